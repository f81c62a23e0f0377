// Quantization grids, and scales and zero points as onnxruntime computes them.
//
// qparams_for_range mirrors onnxruntime.quantization.quant_utils.compute_scale_zp step by step
// (float32 bounds, double scale and zero point, float32 scale stored last), because a QDQ
// model is only interchangeable with onnxruntime's when every scale has the same bits.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "quant/rounding.h"
#include "tether/quant.h"

namespace tether::quant {

namespace {

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

void check_grid_dtype(const Grid& grid) {
  if (grid.dtype != ir::DType::kInt8 && grid.dtype != ir::DType::kUInt8)
    throw ArgumentError("quantization grids are int8 or uint8, got " + std::string(ir::dtype_name(grid.dtype)));
}

}  // namespace

int64_t Grid::qmin() const {
  check_grid_dtype(*this);
  if (dtype == ir::DType::kUInt8) return 0;
  if (reduce_range) return -64;
  return symmetric ? -127 : -128;
}

int64_t Grid::qmax() const {
  check_grid_dtype(*this);
  if (dtype == ir::DType::kUInt8) return reduce_range ? 127 : 255;
  return reduce_range ? 64 : 127;
}

QParams qparams_for_range(float rmin, float rmax, const Grid& grid) {
  if (!std::isfinite(rmin) || !std::isfinite(rmax) || rmin > rmax)
    throw ArgumentError("quantization range [" + float_text(rmin) + ", " + float_text(rmax) +
                        "] is not a range: bounds must be finite with min <= max");
  const int64_t qmin = grid.qmin(), qmax = grid.qmax();
  float lo = std::min(rmin, 0.0f), hi = std::max(rmax, 0.0f);
  if (grid.symmetric) {
    const float a = std::max(std::fabs(lo), std::fabs(hi));
    lo = -a;
    hi = a;
  }
  const double scale = (static_cast<double>(hi) - static_cast<double>(lo)) / static_cast<double>(qmax - qmin);
  QParams q;
  q.dtype = grid.dtype;
  if (scale < static_cast<double>(FLT_MIN)) {
    q.scale.push_back(1.0f);
    q.zero_point.push_back(0);
    return q;
  }
  double zp = grid.symmetric ? round_half_even(static_cast<double>(qmin + qmax) / 2.0)
                             : round_half_even(static_cast<double>(qmin) - static_cast<double>(lo) / scale);
  zp = std::clamp(zp, static_cast<double>(qmin), static_cast<double>(qmax));
  q.scale.push_back(static_cast<float>(scale));
  q.zero_point.push_back(static_cast<int64_t>(zp));
  return q;
}

QParams weight_qparams(const ir::Tensor& weight, int axis, const Grid& grid) {
  const std::string what = "weight '" + weight.name() + "'";
  if (weight.dtype() != ir::DType::kFloat32)
    throw ArgumentError(what + " is " + std::string(ir::dtype_name(weight.dtype())) + ", weight_qparams takes float32");
  const auto& dims = weight.dims();
  if (axis >= static_cast<int>(dims.size()))
    throw ArgumentError(what + " has rank " + std::to_string(dims.size()) + ", no channel axis " + std::to_string(axis));
  int64_t outer = 1, channels = 1, inner = 1;
  if (axis >= 0) {
    for (int d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
    channels = dims[static_cast<size_t>(axis)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  } else {
    inner = weight.num_elements();
  }
  const float* x = weight.data<float>();
  std::vector<float> lo(static_cast<size_t>(channels), 0.0f), hi(static_cast<size_t>(channels), 0.0f);
  std::vector<bool> seen(static_cast<size_t>(channels), false);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      const auto ci = static_cast<size_t>(c);
      for (int64_t i = 0; i < inner; ++i) {
        const float v = p[i];
        if (!std::isfinite(v))
          throw ArgumentError(what + " holds " + float_text(v) +
                              (axis >= 0 ? " in channel " + std::to_string(c) + " along axis " + std::to_string(axis)
                                         : " at element " + std::to_string(i)) +
                              ": NaN and infinity cannot be quantized");
        if (!seen[ci]) {
          lo[ci] = hi[ci] = v;
          seen[ci] = true;
        }
        lo[ci] = std::min(lo[ci], v);
        hi[ci] = std::max(hi[ci], v);
      }
    }
  QParams q;
  q.axis = axis >= 0 ? axis : -1;
  q.dtype = grid.dtype;
  for (size_t c = 0; c < lo.size(); ++c) {
    const QParams one = qparams_for_range(lo[c], hi[c], grid);
    q.scale.push_back(one.scale[0]);
    q.zero_point.push_back(one.zero_point[0]);
  }
  return q;
}

}  // namespace tether::quant
