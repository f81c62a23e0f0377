// The Vulkan backend's op families (one file each, beside their shaders) and what they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/vulkan/kernel.h"

namespace tether::engine::vulkan {

void register_elementwise(KernelRegistry& r);  // elementwise.cc: unary ops, binary ops with broadcasting
void register_matmul(KernelRegistry& r);       // matmul.cc: Gemm, MatMul and their fused forms
void register_conv(KernelRegistry& r);         // conv.cc: Conv, FusedConv, ConvTranspose
void register_pool(KernelRegistry& r);         // pool.cc: MaxPool, AveragePool, global pools
void register_norm(KernelRegistry& r);         // norm.cc: Softmax, LogSoftmax, LayerNormalization
void register_attention(KernelRegistry& r);    // attention.cc: Attention (ONNX, ai.tether)
void register_shape(KernelRegistry& r);        // shape.cc: views, Concat, Split, Transpose, Slice, Expand, Gather
void register_reduce(KernelRegistry& r);       // reduce.cc: Reduce*
void register_resize(KernelRegistry& r);       // resize.cc: Resize, Upsample (nearest, linear)
void register_elementwise_logic(KernelRegistry& r);  // elementwise_logic.cc: Where, comparisons, logic, Cast
void register_shape_computed(KernelRegistry& r);     // shape_computed.cc: Tile, Range (Gather, Slice: see below)
void register_misc(KernelRegistry& r);               // misc.cc: CumSum, TopK
void register_rnn(KernelRegistry& r);                // rnn.cc: RNN, GRU, LSTM
void register_scatter(KernelRegistry& r);            // scatter.cc: GatherND
void register_quant(KernelRegistry& r);        // quant*.cc: INT8 (after the others: it widens MaxPool, the views and data movement)

/// How the shaders of elements.glsl hold an element: the codes they switch on.
enum ElementKind : uint32_t { kFloatElement = 0, kInt32Element, kInt64Element, kByteElement };

/// The kind of `t`'s elements (float32, int32, int64, bool and uint8), or -1 for another dtype.
int element_kind(ir::DType t);

/// "" when input `i` (present) has a dtype element_kind takes, else why not.
std::string any_element(const KernelInit& init, size_t i);

/// Throws UnsupportedError naming the node when the device has no 8-bit storage buffers, which
/// the shaders of elements.glsl declare (bool and byte tensors).
void require_byte_storage(const Recorder& rec, const ir::Node& node);

/// The pipeline of an elements.glsl shader, its float16-storage build under precision fp16
/// when `floats` (float elements involved); nullptr on a device without 8-bit storage, whose
/// kernels then refuse when recorded (require_byte_storage).
const Pipeline* element_pipeline(Gpu& gpu, const char* shader, uint32_t bindings, uint32_t push_bytes,
                                 std::vector<uint32_t> spec, bool floats);

/// Up to three operands broadcast (numpy) to `out`'s dims, merged where all of them allow, as
/// the element-wise shaders index them (binary.comp, qadd.comp, elementwise_compare.comp,
/// elementwise_where.comp): the output's dims and each operand's strides over them, 0 where it
/// broadcasts. A shader of two operands reads the first kTwoOperandPushBytes. Throws
/// UnsupportedError past 6 unmerged dims.
struct BroadcastPush {
  uint32_t n, rank;
  uint32_t dims[6];
  uint32_t strides[3][6];
};
constexpr uint32_t kTwoOperandPushBytes = sizeof(uint32_t) * (2 + 6 + 2 * 6);
BroadcastPush broadcast_push(const ir::Node& node, const std::vector<std::vector<int64_t>>& operands, const GpuTensor& out);

/// Gather and Slice whose indices or bounds are computed (shape_computed.cc): the kernels
/// shape.cc's registrations make when those inputs are not constants, and their checks. They
/// move elements of any kind, int8 as bytes; the `_indices` and `_bounds` checks leave out the
/// data's type, for quant.cc's 8-bit registrations.
std::unique_ptr<Kernel> computed_gather_kernel(const KernelInit& init);
std::string computed_gather_check(const KernelInit& init);
std::string computed_gather_indices_check(const KernelInit& init);
std::unique_ptr<Kernel> computed_slice_kernel(const KernelInit& init);
std::string computed_slice_check(const KernelInit& init);
std::string computed_slice_bounds_check(const KernelInit& init);

/// Whether kernels take their forms for GPUs (shared-memory tiles, gemm_tiled.glsl) rather
/// than those for a device that runs invocations as lanes of a CPU's vector registers
/// (lavapipe), where every load is a loop over lanes and shared memory does not pay. By the
/// device's type, unless TETHER_VULKAN_KERNELS is "gpu" or "cpu", which forces one form on any
/// device (so that both run the op table on lavapipe). Read when a kernel is compiled.
/// Example: `if (gpu_kernels(gpu.device)) tiles = tiled_pipelines(gpu, "conv_gemm", ...);`
bool gpu_kernels(const Device& device);

/// The build of a shader on rows.glsl (a workgroup per row) that reduces by subgroups,
/// `shader`_subgroup, where the device has subgroup arithmetic, unless TETHER_VULKAN_NO_SUBGROUPS=1
/// (read when a kernel is compiled) keeps the shared-memory tree of `shader` itself.
/// Example: `pipeline_ = &gpu.pipeline(row_shader(gpu.device, "attention"), 5, sizeof push, spec);`
std::string row_shader(const Device& device, const std::string& shader);

/// Records a dispatch of `p` with one workgroup per row, `rows` of them (shaders/rows.glsl
/// numbers them over a 2-D grid).
void dispatch_rows(Recorder& rec, const Pipeline& p, const std::vector<Range>& bindings, const void* push,
                   size_t push_bytes, int64_t rows);

/// Invocations per workgroup of the 1-D shaders.
inline constexpr uint32_t kLocal = 64;

/// An integer tensor's values (int64 or int32) as int64.
std::vector<int64_t> int_values(const ir::Tensor& t);

/// `axis` counted from the end when negative, for a rank; throws ModelError naming the node
/// when it is out of range.
int64_t normalize_axis(const ir::Node& node, int64_t axis, size_t rank);

/// A Slice with constant bounds (attributes before opset 10, constant inputs after) as a
/// strided view of its input: the output's dims (from inference) say where each run ends, so
/// only starts, axes and steps are kept.
///
///   ConstantSlice s(init); int64_t base; std::vector<int64_t> strides;
///   s.view(node, in[0].dims, base, strides);   // element i of axis a: base + i * strides[a]
struct ConstantSlice {
  explicit ConstantSlice(const KernelInit& init);
  /// The offset of the slice's first element in a row-major tensor of `dims`, and the element
  /// strides of each axis within the slice (ONNX's clamping of starts; ModelError for an axis
  /// out of range, naming `node`).
  void view(const ir::Node& node, const std::vector<int64_t>& dims, int64_t& base, std::vector<int64_t>& strides) const;

  std::vector<int64_t> starts, axes, steps;
};

/// Element count of dims [begin, end).
int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end);

/// Records a 1-D dispatch of `n` invocations of `p` (workgroups of kLocal).
void dispatch_1d(Recorder& rec, const Pipeline& p, const std::vector<Range>& bindings, const void* push, size_t push_bytes,
                 int64_t n);

/// "" when input `i` has a static rank in `ranks`, else why not.
std::string require_rank(const KernelInit& init, size_t i, std::initializer_list<size_t> ranks);

/// A 1-D or 2-D window (convolution or pooling) in a push block's KH, KW, SH, SW, PH, PW, DH and
/// DW fields: the last two entries of each vector, a 1-D window being 1 high and unpadded on
/// top. The window shaders index by these fields alone.
///
///   set_window(push, g.kernel, g.strides, g.pad_begin, g.dilations);   // g: ops::ConvGeometry
template <class Push>
void set_window(Push& p, const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                const std::vector<int64_t>& pad_begin, const std::vector<int64_t>& dilations) {
  const bool two_d = kernel.size() >= 2;
  auto high = [two_d](const std::vector<int64_t>& v, int64_t fill) { return two_d ? v[v.size() - 2] : fill; };
  p.KH = static_cast<decltype(p.KH)>(high(kernel, 1));
  p.KW = static_cast<decltype(p.KW)>(kernel.back());
  p.SH = static_cast<decltype(p.SH)>(high(strides, 1));
  p.SW = static_cast<decltype(p.SW)>(strides.back());
  p.PH = static_cast<decltype(p.PH)>(high(pad_begin, 0));
  p.PW = static_cast<decltype(p.PW)>(pad_begin.back());
  p.DH = static_cast<decltype(p.DH)>(high(dilations, 1));
  p.DW = static_cast<decltype(p.DW)>(dilations.back());
}

}  // namespace tether::engine::vulkan
