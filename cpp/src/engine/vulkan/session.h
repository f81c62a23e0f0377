// The Vulkan session: a compiled model whose steps belong to a backend. Nodes the Vulkan
// backend supports are recorded into command buffers on the device; every other node runs on
// the CPU backend in the same session, on host memory, with each value that crosses between
// the two copied once per run through a staging buffer. docs/vulkan.md describes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kernel.h"
#include "engine/plan_cache.h"
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
  bool cpu_reads = false;  ///< a CPU step reads it
  int weight = -1;    ///< a constant read on the device: its handle in the weight buffer
};

/// One node of the compiled graph, on one backend.
struct Step {
  const ir::Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;
  GpuKernel* gpu = nullptr;   ///< the kernel, when the step is on the Vulkan backend
  HostKernel* host = nullptr; ///< the kernel, when the step is on the CPU backend
  std::vector<int> inputs;   ///< value index, -1 when omitted
  std::vector<int> outputs;  ///< value index, -1 when omitted
  std::string why_cpu;       ///< a CPU step: why the Vulkan backend does not run it
  /// A Vulkan step's CPU kernel, for plans whose shapes the Vulkan kernel refuses (made on first need).
  mutable std::unique_ptr<HostKernel> fallback;
  bool shapes_only = false;  ///< a CPU step computing on shapes alone (Shape, integer ops on its results)
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

/// Everything fixed for one set of input shapes: every value's dims and places, the backend of
/// each step (a Vulkan kernel refusing these shapes leaves its node to the CPU), the device
/// arena, staging and host memory, and the recorded command buffers with their descriptor
/// sets. Made once, replayed by every run with these shapes.
struct Plan {
  explicit Plan(std::shared_ptr<Device> d) : device(std::move(d)) {}
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  std::shared_ptr<Device> device;
  std::vector<Dims> dims;             ///< per value
  std::vector<char> on_gpu;           ///< per step: on the Vulkan backend in this plan (its kernel takes these shapes)
  std::vector<char> cpu_reads;        ///< per value: a CPU step of this plan reads its data
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
  std::vector<int64_t> host_offset;   ///< per value: offset in the host arena, or -1
  std::vector<bool> capture;          ///< per value: written on the device into a tensor of its own (run_capture)
  std::vector<Segment> segments;
  int64_t arena_bytes = 0, intermediate_bytes = 0, host_bytes = 0, scratch_bytes = 0, staging_bytes = 0;
  int64_t device_scratch_bytes = 0;   ///< the most scratch a Vulkan kernel of the plan asks (Recorder::scratch)
  Buffer arena, staging, device_scratch;
  std::vector<Buffer> tables;         ///< tables kernels computed on the host (Recorder::table)
  std::vector<Fault> faults;          ///< words kernels set on invalid input (Recorder::fault)
  std::shared_ptr<ir::Buffer> host;   ///< the host arena, then CPU kernels' scratch
  VkCommandPool pool = VK_NULL_HANDLE;
  VkDescriptorPool descriptors = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkQueryPool queries = VK_NULL_HANDLE;  ///< timestamps per step, when profiling on a device that has them
  int64_t dispatches = 0;
};

class VulkanSession final : public Session {
 public:
  VulkanSession(const ir::Model& model, const CompileOptions& options, std::shared_ptr<Device> device);
  ~VulkanSession() override;

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  std::vector<ir::Tensor> run(const std::vector<std::pair<std::string, ir::Tensor>>& inputs) const override;
  std::vector<ir::Tensor> run_capture(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                      const std::vector<std::string>& names,
                                      std::vector<std::pair<std::string, ir::Tensor>>& captured) const override;
  std::vector<ir::Tensor> run_observe(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                      const std::vector<std::string>& names, const Observer& observer) const override;
  std::vector<StepInfo> steps() const override;
  MemoryStats memory() const override;
  std::string report() const override { return report_; }
  int threads() const override;
  std::vector<NodeProfile> profile() const override;

 private:
  // Called with each value a run computes (value index, its host bytes), in execution order.
  using OnValue = std::function<void(int value, const void* data)>;

  void index_values();
  void create_steps(const CompileOptions& options);
  void upload_weights(Gpu& gpu);
  void schedule_steps();
  std::vector<ir::Tensor> run_plan(const std::vector<std::pair<std::string, ir::Tensor>>& named, bool capture,
                                   const OnValue* on_value, const std::vector<int>* watch_inputs = nullptr) const;
  Plan& plan_for(const std::vector<const ir::Tensor*>& bound, bool capture) const;
  std::unique_ptr<Plan> make_plan(const std::vector<const ir::Tensor*>& bound, bool capture) const;
  void place_steps(Plan& plan) const;
  /// Which Vulkan steps of the plan fold into their readers (Plan::folded and the layouts).
  void fold_steps(Plan& plan) const;
  /// Step s's inputs and outputs as its kernel records them: dims, and with `ranges` their
  /// device ranges (an input the kernel does not read on the device keeps an empty one).
  /// `empty` gets whether every output has no elements.
  std::pair<std::vector<GpuTensor>, std::vector<GpuTensor>> step_tensors(const Plan& plan, size_t s, bool ranges,
                                                                         bool& empty) const;
  std::unique_ptr<HostKernel> cpu_fallback(const ir::Node& node, const std::string& why) const;
  void place_on_device(Plan& plan) const;
  int64_t plan_transfers(Plan& plan, const std::vector<int>& upload_seg) const;
  void place_on_host(Plan& plan) const;
  void check_values(const Plan& plan) const;
  void check_total(const Plan& plan) const;
  void record(Plan& plan) const;

  std::shared_ptr<Device> device_;
  ir::Model model_;  // the compiled copy: owns the constants kernels read
  std::vector<ValueEntry> values_;
  std::unordered_map<const ir::Value*, int> index_;
  std::deque<Step> steps_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<int> input_values_, output_values_;
  std::vector<bool> shape_input_;
  std::vector<ir::Tensor> constants_;  // Constant-node values
  std::shared_ptr<util::ThreadPool> pool_;
  std::string report_;
  bool profile_ = false;
  bool strict_ = false;      // a node the Vulkan backend cannot run is an error, never a CPU step
  int64_t max_memory_ = 0;   // bytes one run may take, host and device together (CompileOptions::max_memory)
  bool fp16_ = false;  // precision "fp16": float values and weights stored as float16 on the device
  /// Whether value i is stored as float16 on the device (a float32 value under precision fp16).
  bool half(size_t i) const;

  Buffer unused_;                       // bound where a specialisation reads nothing
  Buffer weights_;                      // constants read on the device, one buffer
  std::vector<Range> weight_ranges_;    // by handle
  int64_t weight_bytes_ = 0;

  // Runs are serialised: a plan's command buffers, arena and staging serve one run at a time.
  mutable std::mutex run_mutex_;
  mutable std::string broken_;  // set when the device failed under a run: every later run says so
  // Plans by input shapes and whether the run captures values, at most kMaxPlans of them.
  mutable PlanCache<std::pair<std::vector<Dims>, bool>, std::unique_ptr<Plan>> plans_;
  mutable MemoryStats last_;
  mutable std::vector<Dims> last_dims_;  // the running plan's dims (read by capture callbacks)
  // Profiling: per step (CPU: wall time; Vulkan: time on the device between timestamps), and
  // per Vulkan segment (wall time of its uploads, submission, wait and downloads).
  mutable std::vector<int64_t> step_runs_, step_ns_;
  mutable std::map<int, std::pair<int64_t, int64_t>> segment_time_;  // first step -> (runs, ns)
  bool gpu_timestamps_ = false;  // profiling times each Vulkan step by timestamps on the device
  void read_timestamps(const Plan& plan, const Segment& seg) const;
};

}  // namespace tether::engine::vulkan
