// The sliding-window arithmetic of Conv, ConvTranspose and the pools (defined in ops/conv.cc):
// attributes read with their defaults, output spatial dims, and the channels-last views of the
// ai.tether forms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/infer_context.h"

namespace tether::ops {

/// The ints attribute `name` with exactly `n` entries, or `n` times `fill` when it is absent;
/// fail()s through ctx for any other length (an empty list included).
std::vector<int64_t> attr_or(const InferContext& ctx, const char* name, size_t n, int64_t fill);

/// A sliding window's attributes over the spatial axes.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad;
  bool ceil_mode = false;
};

/// The window of `kernel` with the node's strides, dilations, pads, auto_pad and ceil_mode,
/// checked (strides and dilations >= 1, pads >= 0, a known auto_pad).
Window window(const InferContext& ctx, std::vector<int64_t> kernel);

/// Output size along spatial axis i for an input size `in`.
Dim window_out(const InferContext& ctx, const Window& w, size_t i, const Dim& in);

/// True for the ai.tether forms with channels_last = 1 (QLinearConv, MaxPool, FusedConv): they
/// read X [N, spatial..., C] and write Y alike, shaped as the ONNX op on the channels-first view.
bool channels_last(const InferContext& ctx);

/// X's shape as the ONNX op sees it: [N, C, spatial...] (moved from [N, spatial..., C] when `last`).
Shape channels_first_view(const InferContext& ctx, bool last);

/// [N, C, spatial...] output dims as the op writes them (channels moved last when `last`).
Shape output_layout(std::vector<Dim> out, bool last);

}  // namespace tether::ops
