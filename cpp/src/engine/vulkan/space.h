// The Vulkan backend's Space (engine/space.h): what it keeps for one session (the device, the
// weights in device memory) and its plans, which place values in device memory, move what
// crosses to and from the host through a staging buffer, and record each stretch of Vulkan
// steps into one command buffer. The executor runs everything else, the CPU steps included.
// docs/vulkan.md describes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernel.h"
#include "engine/space.h"
#include "engine/vulkan/device.h"
#include "engine/vulkan/kernel.h"
#include "tether/engine.h"

namespace tether::util {
class ThreadPool;
}

namespace tether::engine::vulkan {

using Dims = std::vector<int64_t>;

/// A value of the compiled graph and what the session knows of it at compile time.
struct ValueEntry {
  const ir::Value* value = nullptr;
  const ir::Tensor* constant = nullptr;  ///< a constant's tensor (an input's default for an input)
  bool is_constant = false;
  int input = -1;     ///< session input index
  int output = -1;    ///< session output index (its first occurrence)
  int producer = -1;  ///< the step that writes it
  bool gpu_reads = false;  ///< a Vulkan step reads it on the device
  int weight = -1;    ///< a constant read on the device: its handle in the weight buffer
};

/// A step of the session (the executor's, in its order), on one backend.
struct Step {
  const ir::Node* node = nullptr;
  const GpuKernel* gpu = nullptr;  ///< the kernel, when the step is on the Vulkan backend
  std::vector<int> inputs;   ///< value index, -1 when omitted
  std::vector<int> outputs;  ///< value index, -1 when omitted
  bool dims_only = false;    ///< reads its inputs' dims, never their data (Shape, Size)
};

/// A copy between a value's host memory and its device range, through the staging buffer.
struct Transfer {
  int value = -1;
  int64_t staging = 0;  ///< offset in the staging buffer
  int64_t bytes = 0;    ///< on the device (float16 in staging and on the device, float32 on the host, when `half`)
  bool half = false;
};

/// Consecutive steps on one backend. A Vulkan segment is one command buffer, submitted once
/// per run: its uploads, its dispatches, its downloads.
struct Segment {
  bool gpu = false;
  int begin = 0, end = 0;  ///< steps [begin, end)
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  std::vector<Transfer> uploads, downloads;
  // Profiling: timestamp queries [first_query, first_query + 1 + stamp_steps.size()) of the
  // plan's pool: one when the uploads are done, then one after each step (stamp_steps[k] is
  // the step timestamp k + 1 ends).
  uint32_t first_query = 0;
  std::vector<int> stamp_steps;
};

/// Words a kernel's shaders set on invalid input (Recorder::fault), and what the error says.
struct Fault {
  Buffer words;
  std::string what;
};

class VulkanSpace;

/// Everything fixed on the device for one set of input shapes: every value's dims and device
/// range, the backend of each step (a Vulkan kernel refusing these shapes leaves its node to
/// the host), the device arena and staging, and the recorded command buffers with their
/// descriptor sets. Made once, replayed by every run with these shapes.
struct Plan final : SpacePlan {
  Plan(std::shared_ptr<Device> d, const VulkanSpace& s) : device(std::move(d)), space(s) {}
  ~Plan() override;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const std::vector<Stretch>& stretches() const override { return stretches_; }
  bool on_device(size_t step) const override { return on_gpu[step] != 0; }
  std::string refused(size_t step) const override { return refusals[step]; }
  bool captured(size_t value) const override { return capture[value]; }
  int64_t device_bytes() const override { return arena_bytes + device_scratch_bytes + staging_bytes; }
  std::string device_bytes_text() const override;
  void realize() override;
  void stats(MemoryStats& m) const override;
  void run(size_t stretch, const std::vector<void*>& data, std::vector<std::pair<int, int64_t>>& times) override;

  std::shared_ptr<Device> device;
  const VulkanSpace& space;
  std::vector<Dims> dims;             ///< per value
  std::vector<char> on_gpu;           ///< per step: on the Vulkan backend in this plan (its kernel takes these shapes)
  std::vector<std::string> refusals;  ///< per step of the Vulkan backend not on_gpu: why its kernel refuses
  std::vector<char> cpu_reads;        ///< per value: a host step of this plan reads its data
  /// Per step: records nothing, its output read in place of its input (views; Transposes,
  /// Muls by a constant and Gathers of one index folded into strided reads: fold.cc).
  std::vector<char> folded;
  /// Per value a folded step writes: the value whose range holds its elements (else -1), the
  /// byte offset there, the element strides its readers take (empty: row-major) and the
  /// factor they apply.
  std::vector<int> root;
  std::vector<int64_t> root_offset;
  std::vector<std::vector<int64_t>> strides;
  std::vector<float> scale;
  std::vector<Range> dev;             ///< per value: its device range (empty buffer when none)
  std::vector<std::pair<size_t, int64_t>> arena_offsets;  ///< (value, offset in the arena), placed by realize()
  std::vector<int> alias;             ///< per value: the value whose range it shares (folded), or -1
  std::vector<bool> capture;          ///< per value: written on the device into a tensor of its own (run_capture)
  std::vector<Segment> segments;      ///< one per stretch
  std::vector<Stretch> stretches_;
  int64_t arena_bytes = 0, intermediate_bytes = 0, staging_bytes = 0;
  int64_t device_scratch_bytes = 0;   ///< the most scratch a Vulkan kernel of the plan asks (Recorder::scratch)
  Buffer arena, staging, device_scratch;
  std::vector<Buffer> tables;         ///< tables kernels computed on the host (Recorder::table)
  std::vector<Fault> faults;          ///< words kernels set on invalid input (Recorder::fault)
  VkCommandPool pool = VK_NULL_HANDLE;
  VkDescriptorPool descriptors = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkQueryPool queries = VK_NULL_HANDLE;  ///< timestamps per step, when profiling on a device that has them
  int64_t dispatches = 0;
};

class VulkanSpace final : public Space {
 public:
  VulkanSpace(const CompileOptions& options, std::shared_ptr<Device> device);
  ~VulkanSpace() override;

  std::unique_ptr<Kernel> create(const KernelInit& init, std::string& why) override;
  bool reads_input(const Kernel& kernel, size_t i) const override {
    return static_cast<const GpuKernel&>(kernel).reads_on_device(i);
  }
  void finish(const Program& program) override;
  std::string report(const Program& program) const override;
  std::unique_ptr<SpacePlan> plan(const std::vector<Dims>& dims, bool capture) const override;
  void check_usable() const override;
  void drain() override;
  bool profiled(const Kernel& kernel) const override {
    return gpu_timestamps_ && !static_cast<const GpuKernel&>(kernel).is_view();
  }
  void stats(MemoryStats& m) const override { m.device_weight_bytes = weight_bytes_; }

 private:
  friend struct Plan;
  void upload_weights(Gpu& gpu);
  void place_steps(Plan& plan) const;
  /// Which Vulkan steps of the plan fold into their readers (Plan::folded and the layouts).
  void fold_steps(Plan& plan) const;
  /// Step s's inputs and outputs as its kernel records them: dims, and with `ranges` their
  /// device ranges (an input the kernel does not read on the device keeps an empty one).
  /// `empty` gets whether every output has no elements.
  std::pair<std::vector<GpuTensor>, std::vector<GpuTensor>> step_tensors(const Plan& plan, size_t s, bool ranges,
                                                                         bool& empty) const;
  void place_on_device(Plan& plan) const;
  int64_t plan_transfers(Plan& plan, const std::vector<int>& upload_seg) const;
  void record(Plan& plan) const;
  void read_timestamps(const Plan& plan, const Segment& seg, std::vector<std::pair<int, int64_t>>& times) const;
  /// Whether value i is stored as float16 on the device (a float32 value under precision fp16).
  bool half(size_t i) const;

  std::shared_ptr<Device> device_;
  std::vector<ValueEntry> values_;
  std::vector<Step> steps_;
  bool profile_ = false;
  bool strict_ = false;  // a node the Vulkan backend cannot run is an error, never a host step
  bool fp16_ = false;    // precision "fp16": float values and weights stored as float16 on the device
  bool gpu_timestamps_ = false;  // profiling times each Vulkan step by timestamps on the device
  std::unique_ptr<Gpu> gpu_;  // while the session compiles: the weights kernels add
  Device::PipelineStats pipelines_before_, pipelines_after_;

  Buffer unused_;                       // bound where a specialisation reads nothing
  Buffer weights_;                      // constants read on the device, one buffer
  std::vector<Range> weight_ranges_;    // by handle
  int64_t weight_bytes_ = 0;
  mutable std::string broken_;  // set when the device failed under a run: every later run says so
};

/// The Space of a session on options.device (opened here).
std::unique_ptr<Space> open_space(const CompileOptions& options);

}  // namespace tether::engine::vulkan
