// Backends whose kernels compute in memory of their own (a GPU's): the interface the executor
// (engine/executor.h) drives them through. The executor places the nodes, orders the steps,
// infers shapes per plan, owns the host side (host kernels, host memory, outputs, observed
// values, the memory limit, interrupts, profiling); a Space holds what the backend keeps for
// one session (an open device, weights in its memory) and plans and runs its stretches of
// steps: where values live in its memory, what crosses to and from the host, the commands.
// docs/engine.md ("Backends with memory of their own") describes the contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/kernel.h"
#include "tether/engine.h"

namespace tether::engine {

/// A value of a compiled session as a Space sees it.
struct ProgramValue {
  const ir::Value* value = nullptr;
  const ir::Tensor* constant = nullptr;  ///< a constant's tensor (an input's default for an input)
  bool is_constant = false;              ///< a constant (not an input with a default)
  int input = -1;     ///< session input index
  int output = -1;    ///< session output index (its first occurrence)
  int producer = -1;  ///< the step that writes it
};

/// A step of a compiled session, in execution order, as a Space sees it.
struct ProgramStep {
  const ir::Node* node = nullptr;
  const Backend* backend = nullptr;
  const Kernel* kernel = nullptr;  ///< the space's own kernel when `backend` is the space's
  std::vector<int> inputs;         ///< value index, -1 when omitted
  std::vector<int> outputs;        ///< value index, -1 when omitted
  bool dims_only = false;          ///< reads its inputs' dims only (Shape, Size)
  bool shapes_only = false;        ///< a host step computing on shapes and constants alone
  std::string why;                 ///< a step not on the first backend: why that one does not run it
};

/// What a session compiled: its values and steps, and the threads of its host kernels.
struct Program {
  std::vector<ProgramValue> values;
  std::vector<ProgramStep> steps;
  int threads = 1;
};

/// A Space's plan for one set of input shapes (every value's dims known). Made by Space::plan
/// with nothing allocated, so that the executor can check the memory limit over host and
/// device together; realize() then allocates and records. A plan serves one run at a time.
class SpacePlan {
 public:
  /// Consecutive steps on one side: the space's (`device`) or the host's.
  struct Stretch {
    int begin = 0, end = 0;
    bool device = false;
  };
  virtual ~SpacePlan() = default;
  virtual const std::vector<Stretch>& stretches() const = 0;
  /// Step s runs in the space in this plan (its kernel takes these shapes).
  virtual bool on_device(size_t step) const = 0;
  /// For a step of the space's backend not on_device: why its kernel refuses these shapes.
  virtual std::string refused(size_t step) const = 0;
  /// Value v is written in the space and comes down into a tensor of its own (a capturing plan).
  virtual bool captured(size_t value) const = 0;
  /// Bytes of the space's memory (and its staging) the plan takes, and a breakdown for messages.
  virtual int64_t device_bytes() const = 0;
  virtual std::string device_bytes_text() const = 0;
  /// Allocates the plan's memory and records its commands.
  virtual void realize() = 0;
  /// Its share of MemoryStats (arena_bytes and intermediate_bytes of the space, staging_bytes).
  virtual void stats(MemoryStats& m) const = 0;
  /// Runs device stretch k: values it reads from the host are taken from `data` (host
  /// pointers by value index), values the host needs are written there. Appends
  /// (step, nanoseconds on the device) for each step the device timed.
  virtual void run(size_t stretch, const std::vector<void*>& data, std::vector<std::pair<int, int64_t>>& times) = 0;
};

/// What a backend with memory of its own keeps for one session.
class Space {
 public:
  virtual ~Space() = default;
  /// The kernel for a node its backend supports, ready to record (weights prepared), or null
  /// with `why` when it refuses the node as inference types it (its shapes).
  virtual std::unique_ptr<Kernel> create(const KernelInit& init, std::string& why) = 0;
  /// Whether `kernel` (made by create) reads input i's data in the space; false: its dims or
  /// a value inference gives, so the producer need not run first.
  virtual bool reads_input(const Kernel& kernel, size_t i) const = 0;
  /// Once every step is made: constants into the space's memory.
  virtual void finish(const Program& program) = 0;
  /// Lines for the session's compile report.
  virtual std::string report(const Program& program) const = 0;
  /// A plan for these dims (per value); `capture`: every value written in the space comes down
  /// (run_capture, run_observe). Throws UnsupportedError under strict for shapes a kernel refuses.
  virtual std::unique_ptr<SpacePlan> plan(const std::vector<std::vector<int64_t>>& dims, bool capture) const = 0;
  /// Throws DeviceError when the device failed under an earlier run.
  virtual void check_usable() const = 0;
  /// Before the session's plans are destroyed: waits for work a failed run left on the device.
  virtual void drain() = 0;
  /// Whether profiles list step s (a step of the space): false for steps that dispatch nothing.
  virtual bool profiled(const Kernel& kernel) const = 0;
  /// The session-wide share of MemoryStats (device_weight_bytes).
  virtual void stats(MemoryStats& m) const = 0;
};

}  // namespace tether::engine
