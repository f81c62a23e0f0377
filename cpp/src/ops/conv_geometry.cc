// ConvGeometry: a convolution's attributes against actual sizes.
#include "ops/conv_geometry.h"

#include <algorithm>
#include <string>

namespace tether::ops {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::vector<int64_t> ints_or(const ir::Node& n, const char* name, size_t count, int64_t fill) {
  std::vector<int64_t> v = n.attr_ints(name);
  if (v.empty()) v.assign(count, fill);
  return v;
}

}  // namespace

ConvGeometry conv_geometry(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                           const std::vector<int64_t>& y, bool transpose) {
  const size_t k = x.size() - 2;
  ConvGeometry g;
  g.kernel = n.attr_ints("kernel_shape");
  if (g.kernel.empty()) g.kernel.assign(w.begin() + 2, w.end());
  g.strides = ints_or(n, "strides", k, 1);
  g.dilations = ints_or(n, "dilations", k, 1);
  g.group = n.attr_int("group", 1);
  const std::vector<int64_t> pads = ints_or(n, "pads", 2 * k, 0);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  g.pad_begin.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    if (!transpose) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (y[i + 2] - 1) * g.strides[i] + ek - x[i + 2]);
        g.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      } else if (auto_pad != "VALID") {
        g.pad_begin[i] = pads[i];
      }
    } else {
      // Total padding follows from the output size inference chose (output_shape, output_padding).
      const std::vector<int64_t> out_pad = ints_or(n, "output_padding", k, 0);
      const int64_t total = g.strides[i] * (x[i + 2] - 1) + out_pad[i] + ek - y[i + 2];
      if (n.attr("output_shape") != nullptr || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
        // Rounded down, as ONNX defines it: a negative total (output_shape past the natural
        // size) puts no padding before and lets the extra rows and columns stay zero.
        g.pad_begin[i] = auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      else if (auto_pad != "VALID")
        g.pad_begin[i] = pads[i];
    }
  }
  return g;
}

bool conv_transpose_is_patch_scatter(const ir::Node& n, const std::vector<int64_t>& w) {
  if (w.size() != 4 || n.attr_int("group", 1) != 1 || n.attr("output_shape") != nullptr) return false;
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return false;
  const std::vector<int64_t> kernel = n.attr_ints("kernel_shape", {w[2], w[3]});
  if (kernel != std::vector<int64_t>{w[2], w[3]} || n.attr_ints("strides", {1, 1}) != kernel) return false;
  for (const char* name : {"pads", "output_padding"})
    for (int64_t v : n.attr_ints(name))
      if (v != 0) return false;
  for (int64_t v : n.attr_ints("dilations"))
    if (v != 1) return false;
  return true;
}

}  // namespace tether::ops
