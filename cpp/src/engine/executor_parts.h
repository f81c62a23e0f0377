// The executor's insides (engine/executor.h is its interface): the Session class and what its
// plans hold, shared by executor.cc (compile, host-memory plans and runs) and
// executor_space.cc (sessions whose first backend has memory of its own: engine/space.h).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kernel.h"
#include "engine/plan_cache.h"
#include "engine/planner.h"
#include "engine/session.h"
#include "engine/space.h"
#include "tether/engine.h"
#include "tether/shape_inference.h"
#include "util/thread_pool.h"

namespace tether::engine::exec {

using Dims = std::vector<int64_t>;

enum class Slot { kInput, kConstant, kArena, kOutput };

struct ValueEntry {
  const ir::Value* value = nullptr;
  Slot slot = Slot::kArena;
  const ir::Tensor* constant = nullptr;  // kConstant, or a kInput's default
  Dims constant_dims;                    // kConstant: kept when the data is released
  bool released = false;                 // kConstant whose every reader packed its own copy
  int input = -1;                        // session input index
  int output = -1;                       // session output index (its first occurrence)
  bool written = false;                  // a step writes it
  int producer = -1;                     // while steps are made: the node (in topological order) that writes it
  bool channels_last = false;            // [N, H, W, C] for the model's [N, C, H, W] (passes::kChannelsLast)
};


struct Step {
  const ir::Node* node = nullptr;
  const Backend* backend = nullptr;  // the backend placement chose
  std::unique_ptr<Kernel> owned;     // the kernel
  HostKernel* kernel = nullptr;      // the kernel when it runs on host memory; null for a space's
  // A space step's host kernel, for plans whose shapes its own kernel refuses (made on first need).
  mutable std::unique_ptr<HostKernel> fallback;
  std::vector<int> inputs;   // value index, -1 when omitted
  std::vector<int> outputs;  // value index, -1 when omitted
  bool dims_only = false;    // reads its inputs' dims only (Shape, Size)
  bool shapes_only = false;  // computes on dims and constants alone
  std::string why;           // not on the first backend: why that one does not run it
  // Profiling totals (atomic: runs may be concurrent).
  mutable std::atomic<int64_t> runs{0};
  mutable std::atomic<int64_t> nanoseconds{0};
};

// What a run has found that decides the sizes of the steps after an op whose output sizes
// depend on data: the sizes that op gave, and the values of small integer tensors computed from
// data that reach a shape-deciding input (a Reshape target, a TopK k).
struct Pins {
  std::vector<std::pair<std::string, ir::Tensor>> values;
  std::vector<std::pair<std::string, Dims>> dims;
};

// Everything fixed for one set of input shapes, over the steps [begin, end). A plan ends before
// the last step when a step's output sizes do not follow from the input shapes: after a step
// that allocates its outputs (Stall::kSizes), or before a step whose shape-deciding input is
// computed from data (Stall::kValues). The run then continues with a plan for the rest, made
// once per distinct sizes or values found there and cached in `next`.
struct Plan {
  enum class Stall { kNone, kSizes, kValues };
  int begin = 0, end = 0;
  Stall stall = Stall::kNone;
  Pins pins;                      // what this plan was made with (a continuation's and its parents')
  std::vector<Dims> dims;         // per value (empty for values whose sizes this plan cannot know)
  std::vector<int64_t> offsets;   // per value; arena values written by this plan's steps
  std::vector<int> writes;        // arena and output values this plan's steps write into planned memory
  std::vector<bool> known;        // per value: its dims are in `dims`
  std::vector<bool> heap;         // per value: written by an allocating step (not in the arena)
  int64_t arena_bytes = 0;
  int64_t scratch_bytes = 0;
  int64_t intermediate_bytes = 0;
  std::mutex mutex;
  // A session with a space: the space's plan; `offsets` are then host arena offsets (-1: none).
  std::unique_ptr<SpacePlan> device;
  std::shared_ptr<ir::Buffer> host;  // the host arena, then host kernels' scratch
  PlanCache<std::vector<Dims>, std::shared_ptr<Plan>> next;  // continuations, by what the run found (under mutex)
};

// Where an empty tensor's view points (a kernel reads an omitted input as a null pointer).
alignas(64) inline std::byte kEmptyData[64];

class Executor final : public Session {
 public:
  Executor(const ir::Model& model, const CompileOptions& options, std::vector<const Backend*> order,
           std::shared_ptr<util::ThreadPool> pool);

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  std::vector<ir::Tensor> run(const std::vector<std::pair<std::string, ir::Tensor>>& inputs) const override {
    return run_steps(inputs, nullptr);
  }
  std::vector<ir::Tensor> run_capture(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                      const std::vector<std::string>& names,
                                      std::vector<std::pair<std::string, ir::Tensor>>& captured) const override;
  std::vector<ir::Tensor> run_observe(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                      const std::vector<std::string>& names, const Observer& observer) const override;
  std::vector<StepInfo> steps() const override;
  MemoryStats memory() const override {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    MemoryStats m = last_;
    if (space_ != nullptr) space_->stats(m);
    return m;
  }
  ~Executor() override {
    if (space_ != nullptr) space_->drain();  // before the plans' device memory goes
    plans_.clear();
  }
  std::string report() const override { return report_; }
  int threads() const override { return pool_->threads(); }
  std::vector<NodeProfile> profile() const override {
    std::vector<NodeProfile> out;
    if (!profile_) return out;
    if (space_ != nullptr) return space_profile();
    for (const Step& s : steps_)
      out.push_back({s.node->name(), qualified_op(*s.node), s.runs.load(), static_cast<double>(s.nanoseconds.load()) * 1e-9});
    return out;
  }

 private:
  // Which values a run hands to an observer: per value, the index passed along, or -1.
  struct Watch {
    std::vector<int> slot;
    bool inputs = false;  // graph inputs too, before the first step
    const Observer* observer = nullptr;
  };
  std::vector<ir::Tensor> run_steps(const std::vector<std::pair<std::string, ir::Tensor>>& inputs, const Watch* watch) const;
  // Sessions with a space (executor_space.cc): runs one at a time, plans per shapes and capture.
  std::vector<ir::Tensor> run_space(const std::vector<std::pair<std::string, ir::Tensor>>& inputs, const Watch* watch) const;
  std::shared_ptr<Plan> space_plan_for(const std::vector<const ir::Tensor*>& bound, bool capture) const;
  std::shared_ptr<Plan> make_space_plan(const std::vector<const ir::Tensor*>& bound, bool capture) const;
  void place_on_host(Plan& plan) const;
  void check_space_total(const Plan& plan) const;
  std::unique_ptr<HostKernel> host_fallback(const Step& step, const std::string& why) const;
  std::vector<NodeProfile> space_profile() const;
  void index_values();
  void create_steps();
  // `from`: the first backend of order_ asked.
  const Backend* place(const KernelInit& init, const std::vector<const ir::Value*>& inputs, std::string& why,
                       size_t from = 0) const;
  Program program() const;
  int64_t release_packed_constants();
  std::vector<const ir::Tensor*> bind_inputs(const std::vector<std::pair<std::string, ir::Tensor>>& named) const {
    std::vector<const ir::Value*> values;
    for (int v : input_values_) values.push_back(values_[static_cast<size_t>(v)].value);
    return engine::bind_inputs(inputs_, values, named);
  }
  std::shared_ptr<Plan> plan_for(const std::vector<const ir::Tensor*>& bound) const;
  // `values_pinned`: the shape-deciding values step `begin` reads are among the pins.
  std::shared_ptr<Plan> make_plan(const std::vector<const ir::Tensor*>& bound, Pins pins, int begin,
                                  bool values_pinned = false) const;
  std::shared_ptr<Plan> next_plan(Plan& plan, const std::vector<const ir::Tensor*>& bound, const std::vector<void*>& data,
                                  const std::vector<ir::Tensor>& heap) const;

  ir::Model model_;  // the compiled copy: owns the constants kernels read
  std::vector<const Backend*> order_;  // the backends, in the order placement asks them
  // The first backend's share of the session when its memory is its own (engine/space.h).
  std::unique_ptr<Space> space_;
  std::string engine_;  // how messages name this engine ("cpu")
  std::vector<ValueEntry> values_;
  std::vector<const Backend*> placed_;  // while steps are made: each node's backend, in topological order
  std::unordered_map<const ir::Value*, int> index_;
  std::deque<Step> steps_;  // a deque: steps hold atomics, so they never move
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<int> input_values_, output_values_;
  std::vector<bool> shape_input_;  // per session input: its values decide shapes (a "shape tensor")
  std::vector<ir::Tensor> constants_;  // Constant-node values
  std::shared_ptr<util::ThreadPool> pool_;
  std::string report_;
  bool profile_ = false;
  bool strict_ = false;  // every node on the first backend of order_, shape computations aside
  int64_t max_memory_ = 0;  // bytes one run may take (CompileOptions::max_memory)
  void check_memory(const Plan& plan, int begin) const;
  bool has_allocating_ = false;  // some step sizes its outputs itself (plans may then end early)

  mutable std::mutex plans_mutex_;
  // With a space: runs are serialised (a plan's device memory and commands serve one run at a
  // time); wall time per device stretch, by its first step: (runs, nanoseconds).
  mutable std::mutex run_mutex_;
  mutable std::map<int, std::pair<int64_t, int64_t>> stretch_time_;
  // Buffers that outlive a run (docs/engine.md, "Buffers across runs"): per output, the buffers
  // it was last written into; the arenas runs lease. A run takes one nobody else holds any more
  // and large enough (the caller dropped last run's output), else allocates one, with room to
  // grow when the size grew since the last run (a decoder's cache, one row longer a step).
  struct Spare {
    std::vector<std::shared_ptr<ir::Buffer>> buffers;
    int64_t last_bytes = -1;
  };
  mutable std::mutex spare_mutex_;
  mutable std::vector<Spare> spare_;  // per output
  mutable Spare arenas_;
  // A buffer of at least `bytes` from `spare` (the whole: a tensor takes a prefix of it);
  // `made` is set when it was allocated. Throws std::bad_alloc.
  std::shared_ptr<ir::Buffer> take_buffer(Spare& spare, int64_t bytes, bool* made = nullptr) const;
  // Output k's tensor for this run, in a spare buffer when one fits. Not zeroed: kernels write
  // every element of their outputs.
  ir::Tensor output_tensor(size_t k, ir::DType dtype, const std::vector<int64_t>& dims) const;
  // Plans by input shapes (and shape-deciding input values), at most kMaxPlans of them.
  mutable PlanCache<std::vector<Dims>, std::shared_ptr<Plan>> plans_;
  mutable MemoryStats last_;
  // What the last plan from the first step found in shape inference, and its arena layout
  // (under plans_mutex_).
  mutable ops::InferenceMemo memo_;
  struct Layout {
    std::vector<size_t> placed;       // the values in the arena
    std::vector<Lifetime> lifetimes;  // theirs, with the bytes each may take
    ArenaPlan arena;
  };
  mutable Layout layout_;
  // Views of `values` (value indices, -1 omitted) with these dims and, given `data`, their
  // bytes; `views` keeps its elements (and their dims' capacity) from the last call.
  void set_views(std::vector<View>& views, const std::vector<int>& values, const std::vector<Dims>& dims,
                 const std::vector<void*>* data) const;
  ArenaPlan arena_for(const std::vector<Lifetime>& lifetimes, const std::vector<size_t>& placed, bool reuse) const;
};

}  // namespace tether::engine::exec
