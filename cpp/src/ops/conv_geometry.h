// A convolution's attributes resolved against actual sizes: what every backend's Conv,
// ConvInteger, QLinearConv and ConvTranspose kernels index by (op semantics, not a kernel).
#pragma once

#include <cstdint>
#include <vector>

#include "tether/graph.h"

namespace tether::ops {

/// Kernel size, strides, dilations, padding before each spatial dim (auto_pad resolved, which
/// needs the input and output dims) and groups of a convolution node.
struct ConvGeometry {
  std::vector<int64_t> kernel, strides, dilations, pad_begin;
  int64_t group = 1;
};

/// The geometry of Conv-like node `n` for input dims `x`, weight dims `w` and output dims `y`
/// ([N, C, spatial...]); `transpose` for ConvTranspose, whose padding follows from the output
/// size shape inference chose.
///
///   const ops::ConvGeometry g = ops::conv_geometry(node, {1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 8, 8}, false);
///   // g.pad_begin == {1, 1} for pads = [1, 1, 1, 1]
ConvGeometry conv_geometry(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                           const std::vector<int64_t>& y, bool transpose);

/// True when ConvTranspose node `n` with weight dims `w` ([C_in, C_out, kH, kW]) scatters
/// non-overlapping patches: 2-D, kernel equal to the strides, no padding, output padding,
/// output_shape, dilation or groups, so each input pixel writes its own kH x kW block (one
/// product per pixel; what channels-last kernels run without an overlap-add).
bool conv_transpose_is_patch_scatter(const ir::Node& n, const std::vector<int64_t>& w);

}  // namespace tether::ops
