// Where Resize reads from: the coordinate transforms, nearest rounding and linear taps of
// Resize (opsets 10 to 19) and Upsample, shared by the CPU kernel (cpu/resize.cc) and the
// Vulkan kernel (vulkan/resize.cc, which computes its tables on the host with these), so that
// both backends pick the same input index at exact halves. Computed in float with
// onnxruntime's formulas.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace tether::ops::resize {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfHalfPixelForNn, kTfCropAndResize };
/// kSimple: Upsample and Resize-10, before nearest_mode existed (floor when enlarging, ceil
/// when shrinking).
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

/// Parses the "mode" attribute; false for an unknown one.
inline bool parse_mode(const std::string& s, Mode* m) {
  if (s == "nearest") *m = Mode::kNearest;
  else if (s == "linear" || s == "bilinear") *m = Mode::kLinear;  // "bilinear": Upsample-1's spelling
  else if (s == "cubic") *m = Mode::kCubic;
  else return false;
  return true;
}

/// Parses "coordinate_transformation_mode"; false for an unknown one.
inline bool parse_coord(const std::string& s, Coord* c) {
  if (s == "half_pixel") *c = Coord::kHalfPixel;
  else if (s == "half_pixel_symmetric") *c = Coord::kHalfPixelSymmetric;
  else if (s == "pytorch_half_pixel") *c = Coord::kPytorchHalfPixel;
  else if (s == "align_corners") *c = Coord::kAlignCorners;
  else if (s == "asymmetric") *c = Coord::kAsymmetric;
  else if (s == "tf_half_pixel_for_nn") *c = Coord::kTfHalfPixelForNn;
  else if (s == "tf_crop_and_resize") *c = Coord::kTfCropAndResize;
  else return false;
  return true;
}

/// Parses "nearest_mode"; false for an unknown one.
inline bool parse_nearest(const std::string& s, Nearest* n) {
  if (s == "round_prefer_floor") *n = Nearest::kRoundPreferFloor;
  else if (s == "round_prefer_ceil") *n = Nearest::kRoundPreferCeil;
  else if (s == "floor") *n = Nearest::kFloor;
  else if (s == "ceil") *n = Nearest::kCeil;
  else return false;
  return true;
}

/// Where output coordinate x of an axis resized from `in` to `out` reads from, in input
/// coordinates. The expressions (float or double) are onnxruntime's, so that points at exact
/// halves round the same way.
inline float original_coordinate(Coord c, float x, float scale, int64_t in, int64_t out, float roi_start, float roi_end) {
  const auto lin = static_cast<float>(in), lout = static_cast<float>(out);
  switch (c) {
    case Coord::kHalfPixel: return (x + 0.5f) / scale - 0.5f;
    case Coord::kHalfPixelSymmetric: {
      const float adjustment = lout / (scale * lin);
      const float offset = lin / 2 * (1 - adjustment);
      return static_cast<float>(offset + (x + 0.5) / scale - 0.5);
    }
    case Coord::kPytorchHalfPixel: return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case Coord::kAlignCorners: return out == 1 ? 0.0f : x * (lin - 1) / (lout - 1);
    case Coord::kAsymmetric: return x / scale;
    case Coord::kTfHalfPixelForNn: return (x + 0.5f) / scale;
    case Coord::kTfCropAndResize:
      if (out > 1) return roi_start * (lin - 1) + (x * (roi_end - roi_start) * (lin - 1)) / (lout - 1);
      return static_cast<float>(0.5 * (roi_start + roi_end) * (lin - 1));
  }
  return 0.0f;
}

/// A coordinate within 1e-6 of a half counts as the half: float coordinates such as
/// (4 + 0.5) * (20 / 6) - 0.5 miss 14.5 by an ulp or two, and onnxruntime (1.31) rounds them
/// as ties too.
inline constexpr float kTieTolerance = 1e-6f;

/// The input index nearest mode `n` picks for coordinate x (not yet clamped to the axis).
inline int64_t nearest_index(Nearest n, float x, float scale) {
  const float fl = std::floor(x);
  const bool tie = std::fabs(x - fl - 0.5f) <= kTieTolerance;
  switch (n) {
    case Nearest::kRoundPreferFloor: return static_cast<int64_t>(tie ? fl : std::round(x));
    case Nearest::kRoundPreferCeil: return static_cast<int64_t>(tie ? fl + 1 : std::round(x));
    case Nearest::kFloor: return static_cast<int64_t>(std::floor(x));
    case Nearest::kCeil: return static_cast<int64_t>(std::ceil(x));
    case Nearest::kSimple: return scale < 1 ? static_cast<int64_t>(std::ceil(x)) : static_cast<int64_t>(x);
  }
  return 0;
}

/// Linear interpolation at coordinate x of an axis of `in` points (in >= 1): the two input
/// indices read and their weights (x clamped to the axis; 0.5 each when both are the edge).
inline void linear_taps(float x, int64_t in, int64_t* i0, int64_t* i1, float* w0, float* w1) {
  const float xc = std::max(0.0f, std::min(x, static_cast<float>(in - 1)));
  *i0 = std::min(static_cast<int64_t>(xc), in - 1);
  *i1 = std::min(*i0 + 1, in - 1);
  *w0 = std::fabs(xc - static_cast<float>(*i1));
  *w1 = std::fabs(xc - static_cast<float>(*i0));
  if (*i0 == *i1) *w0 = *w1 = 0.5f;
}

}  // namespace tether::ops::resize
