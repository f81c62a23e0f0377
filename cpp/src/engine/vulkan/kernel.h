// What a Vulkan kernel is: a Kernel (so the Vulkan backend is a Backend like the CPU's) that,
// instead of running on host memory, builds its pipelines once at compile and records its
// dispatches once per plan into the plan's command buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/kernel.h"
#include "engine/vulkan/device.h"

namespace tether::engine::vulkan {

/// Bytes of a buffer: where a value lives on the device.
struct Range {
  VkBuffer buffer = VK_NULL_HANDLE;
  int64_t offset = 0;
  int64_t bytes = 0;
};

/// A value as a kernel records it: element type, sizes, and its range.
struct GpuTensor {
  ir::DType dtype = ir::DType::kFloat32;
  std::vector<int64_t> dims;
  Range range;
  /// Element strides over `dims` from the range's start, for an input the session folded a
  /// Transpose (or views of one) into; empty when the value is row-major. Only inputs the
  /// kernel reads strided (GpuKernel::reads_strided) get them.
  std::vector<int64_t> strides;
  /// The factor the value's elements carry, for such an input folded from a Mul by a constant.
  float scale = 1.0f;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

/// What a kernel may use at compile time: its session's device and weight buffer.
class Gpu {
 public:
  explicit Gpu(Device& device) : device(device) {}
  Device& device;
  /// Precision "fp16": float32 values are stored as float16 on the device.
  bool fp16 = false;

  /// Keeps `bytes` in the session's weight buffer (uploaded once, after every kernel is
  /// prepared); returns the handle Recorder::weight takes.
  int add_weight(std::vector<std::byte> bytes);
  /// The same for bytes the caller keeps alive and unchanged until the upload (a constant of
  /// the compiled model).
  int add_weight_view(const void* data, int64_t bytes);
  /// The pipeline of embedded shader `shader` (see Device::pipeline) for data of type `data`:
  /// under precision fp16, float32 data takes the shader's float16-storage build
  /// (`shader`_f16: float buffers as float16, data movement in 16-bit words).
  const Pipeline& pipeline(const std::string& shader, uint32_t bindings, uint32_t push_bytes, std::vector<uint32_t> spec,
                           ir::DType data = ir::DType::kFloat32) {
    const bool half = fp16 && data == ir::DType::kFloat32;
    return device.pipeline(PipelineKey{half ? shader + "_f16" : shader, bindings, push_bytes, std::move(spec)});
  }

  struct Weight {
    std::vector<std::byte> owned;
    const void* data = nullptr;
    int64_t bytes = 0;
  };
  std::vector<Weight> weights;  ///< in handle order (what the session uploads)
};

/// Where a plan's commands go; kernels call it from record(). Commands run in the order
/// recorded, each seeing every earlier one's writes.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual const Device& device() const = 0;
  /// One dispatch of `p`: a range per binding (0..n-1), the push constants, workgroup counts.
  virtual void dispatch(const Pipeline& p, const std::vector<Range>& bindings, const void* push, size_t push_bytes,
                        uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) = 0;
  /// Copies src's bytes to dst (of the same size).
  virtual void copy(const Range& src, const Range& dst) = 0;
  /// Where weight `handle` (from Gpu::add_weight) lives.
  virtual Range weight(int handle) const = 0;
  /// A small buffer no kernel writes, for a binding that a specialisation leaves unread.
  virtual Range unused() const = 0;
  /// A read-only table of `bytes` the kernel computed on the host for this plan (indices,
  /// weights), kept in host-visible memory for the plan's life. Throws DeviceError when the
  /// device has not the memory.
  virtual Range table(const void* data, int64_t bytes) = 0;
  /// A device range of `bytes` for this kernel's own dispatches (partial results one of them
  /// writes and a later one reads). The kernels of a plan share it, one after the other: its
  /// contents are undefined when the kernel starts and once it ends. The plan sizes it from
  /// what each kernel asks of GpuKernel::refuses's recorder.
  virtual Range scratch(int64_t bytes) = 0;
  /// Four 32-bit words in host-visible memory that the kernel's shaders set when they find
  /// their input invalid, which only the data shows (an index out of range): the first word
  /// non-zero, the next two the offending value's low and high words. The plan clears them
  /// before each run and reads them after each Vulkan stretch; set, the run raises
  /// ArgumentError "`what`: <the value>" instead of returning outputs.
  virtual Range fault(const std::string& what) = 0;

  /// Workgroup counts (x, y) for `n` invocations in groups of `local`: shaders number their
  /// invocations x + y * (groups in x) * local (see shaders/common.glsl), so that grids past
  /// the device's 65535 groups per dimension still work. Throws UnsupportedError for n past
  /// 2^32.
  std::pair<uint32_t, uint32_t> grid(int64_t n, uint32_t local) const;
};

/// A kernel of the Vulkan backend.
class GpuKernel : public Kernel {
 public:
  /// Builds the kernel's pipelines and adds what it keeps of its constant inputs to the
  /// weight buffer: once, at compile, on the session's device.
  virtual void prepare(Gpu& gpu) = 0;
  /// False for an input the kernel does not read on the device (a shape, axes or scales it
  /// read at compile): the session then neither uploads it nor keeps it as a weight.
  virtual bool reads_on_device(size_t i) const { return true; }
  /// True for a kernel whose output is its input's bytes as they are (Reshape, Flatten,
  /// Squeeze, Unsqueeze, Identity): the session gives the output the input's range and the
  /// kernel records nothing.
  virtual bool is_view() const { return false; }
  /// True when the kernel reads input `i` through GpuTensor::strides and multiplies it by
  /// GpuTensor::scale, for inputs like `in` (dims, strides and scales of every input): the
  /// session then folds a Transpose, a Mul by a constant or a Gather of one index that only
  /// such reads consume into the reads instead of dispatching it.
  virtual bool reads_strided(size_t i, const std::vector<GpuTensor>& in) const { return false; }
  /// Records the kernel's work for one plan. `in` and `out` carry the plan's dims and ranges;
  /// an omitted input, or one not read on the device, has an empty range. Throws
  /// UnsupportedError naming the node when these shapes exceed what the kernel handles.
  virtual void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const = 0;
  /// Why the kernel cannot run these shapes, "" when it can: record() into a recorder that keeps
  /// nothing, and the message of the UnsupportedError it throws. Ranges may be empty. Other
  /// errors propagate. The session asks at compile (static shapes) and for every plan, and
  /// runs a node whose kernel refuses its shapes on the CPU. `scratch_bytes`, when given, gets
  /// the most device scratch (Recorder::scratch) the kernel asked for.
  std::string refuses(const Device& device, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out,
                      int64_t* scratch_bytes = nullptr) const;

};

/// The Vulkan backend: the ops it has kernels for. Kernels it creates are GpuKernels.
const Backend& vulkan_backend();

// ---- helpers for kernels --------------------------------------------------------------------------

/// Element-wise functions of shaders/activation.glsl, by the code it switches on.
enum UnaryOp : uint32_t {
  kIdentity = 0, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kSilu, kTanh,
  kErf, kExp, kLog, kSqrt, kNeg, kAbs, kReciprocal, kFloor, kCeil, kSoftplus, kElu, kSelu, kSin, kCos, kSign,
  kRound, kSoftsign, kCelu, kThresholdedRelu, kMish,
};

/// A fused or standalone activation as shaders/activation.glsl computes it: op code and
/// parameters (specialisation constants 1, 2 and 3 of the shaders that apply one).
struct Activation {
  uint32_t op = 0;
  float a = 0, b = 0;
  std::vector<uint32_t> spec() const { return {op, float_bits(a), float_bits(b)}; }
};

/// The activation a fused node (FusedConv, FusedGemm, FusedMatMul) applies: its "activation"
/// and "activation_params" attributes. Throws ModelError naming the node for an unknown one.
Activation fused_activation(const ir::Node& node);

/// Dims with those of size 1 dropped and neighbours merged where every operand is contiguous
/// across them: `dims` (the output's) and, per operand, its strides over the output's dims
/// (0 where it is broadcast) are rewritten in place, fewest dims first kept row-major.
void collapse_dims(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>*> strides);

/// Row-major strides of `dims`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims);

/// Strides of a tensor of dims `in` broadcast to dims `out` (numpy rules: aligned at the
/// right, 0 where `in` has size 1 or lacks the dim).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

/// "" when every input present has dtype float32, else why not.
std::string float32_only(const KernelInit& init);

/// Checks that a value fits 32-bit indexing in shaders; throws UnsupportedError naming the node.
void check_u32(const ir::Node& node, int64_t count, const char* what);

}  // namespace tether::engine::vulkan
