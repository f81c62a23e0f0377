// tether/engine.h: compile a model for a backend and run it.
//
// compile() validates the model, infers shapes, rewrites the graph (when optimising), lets the
// backend prepare every node (weights packed once) and lists every node it cannot run.
// run() is safe from several threads at once; for each new set of input shapes it plans once
// where every intermediate lives in one arena, and reuses that plan and arena afterwards.
//
//   using namespace tether;
//   ir::Model model = ir::load_model("resnet.onnx");
//   auto session = engine::compile(model, {.threads = 2});
//   ir::Tensor x = ir::Tensor::zeros(ir::DType::kFloat32, {1, 3, 224, 224});
//   std::vector<ir::Tensor> out = session->run({{"x", x}});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tether/model.h"
#include "tether/passes.h"

namespace tether::engine {

struct CompileOptions {
  /// A device of devices(): "cpu"; "vulkan" (the first discrete GPU, else integrated,
  /// virtual, then any Vulkan device) or "vulkan:N".
  std::string device = "cpu";
  /// Threads for one run: 0 means the number of physical cores.
  int threads = 0;
  /// Graph rewrites before compiling (constant folding, fusion, ...).
  bool optimize = true;
  /// Time every kernel of every run (a little overhead per node); read with Session::profile().
  bool profile = false;
  /// Value names the graph passes must leave computed (never fused away), so that
  /// Session::run_observe and run_capture see them. Unknown names: ArgumentError.
  std::vector<std::string> keep;
  /// On a device other than "cpu": refuse (UnsupportedError naming them) nodes its backend
  /// cannot run, instead of running them on the CPU in the same session. No effect on "cpu".
  bool strict = false;
  /// Bytes one run may take for its intermediates, outputs and scratch, host and device
  /// memory together (every device): a run whose plan needs more, or whose single value would, raises MemoryLimitError naming the
  /// node, value, shape and bytes before allocating anything. 0: the machine's physical memory.
  int64_t max_memory = 0;
  /// "fp32" (the default), or on a Vulkan device "fp16": float tensors and float weights kept
  /// as float16 in device memory, arithmetic in float32. UnsupportedError on a device without
  /// 16-bit storage buffers and on "cpu"; ArgumentError for any other text.
  std::string precision = "fp32";
};

/// A fact a backend reports about one of its devices: a flag, a count or a text.
using DeviceProperty = std::variant<bool, int64_t, std::string>;

/// A device compile() takes, as devices() lists it: fields every backend fills, and the
/// backend's own facts in `properties`.
///
///   for (const engine::DeviceInfo& d : engine::devices())
///     if (auto it = d.properties.find("fp16_storage"); it != d.properties.end() && std::get<bool>(it->second))
///       compile(model, {.device = d.device, .precision = "fp16"});
struct DeviceInfo {
  std::string device;          ///< what CompileOptions::device takes: "cpu", "vulkan:0", ...
  std::string backend;         ///< the backend that compiles for it: "cpu", "vulkan"
  int index = -1;              ///< N of "backend:N"; -1 for the CPU
  std::string name;            ///< the CPU's model; the GPU's name
  /// "cpu" for the CPU engine; a GPU's type: "discrete_gpu", "integrated_gpu", "virtual_gpu",
  /// "cpu" (a driver running on the CPU, like Mesa's lavapipe) or "other".
  std::string type;
  int64_t memory_bytes = 0;    ///< the memory its runs allocate from: physical memory, device-local memory
  /// The backend's own facts, by name. The CPU: "cores", "threads", "isa" (the widest
  /// instruction set tether's kernels use), "avx2", "avx512", "avx512_vnni", "avx_vnni",
  /// "amx_int8", "gemm_kernel" and "int8_gemm_kernel" (the GEMM micro-kernels chosen). Vulkan: "driver_name", "driver_version", "api_version", "fp16", "int8"
  /// (arithmetic in shaders), "fp16_storage" (what precision "fp16" needs), "subgroup_size".
  std::map<std::string, DeviceProperty> properties;
};

/// Each backend's devices: the CPU first, then each Vulkan physical device in the order
/// "vulkan:N" numbers them. Without a Vulkan loader or driver, the CPU alone; never throws for
/// a missing one.
std::vector<DeviceInfo> devices();

/// The entry of devices() named `device` ("cpu", "vulkan:0", ...), asking its backend only
/// (the CPU's never opens the Vulkan loader). ArgumentError naming the devices otherwise.
///
///   const engine::DeviceInfo cpu = engine::device_info("cpu");
///   std::get<std::string>(cpu.properties.at("isa"));   // "avx512", "avx2" or "generic"
DeviceInfo device_info(const std::string& device);

/// What a backend's driver diagnostics reported (Vulkan: the validation layer, on when
/// TETHER_VULKAN_VALIDATION=1 was set before the first Vulkan call).
struct BackendDiagnostics {
  std::string backend;                ///< "vulkan", ...
  bool enabled = false;               ///< whether the diagnostics are on
  std::vector<std::string> messages;  ///< warnings and errors since the last call, one line each
};

/// Per backend that has diagnostics, what they reported since the last call (and clears it).
///
///   for (const auto& d : engine::take_diagnostics())
///     for (const std::string& m : d.messages) std::cerr << d.backend << ": " << m << "\n";
std::vector<BackendDiagnostics> take_diagnostics();

/// A value as the kernel that wrote it left it. The data is valid during the observer call only.
struct ObservedValue {
  size_t index = 0;  ///< position of the value's name in the list given to run_observe
  const std::string& name;
  ir::DType dtype;
  const std::vector<int64_t>& dims;
  const void* data;  ///< row-major, dims' product elements of dtype
};

/// Called by Session::run_observe for each observed value.
using Observer = std::function<void(const ObservedValue&)>;

/// Time spent in one node's kernel over all profiled runs.
struct NodeProfile {
  std::string name;     ///< the node's name (for fused nodes: the name of the last node fused)
  std::string op_type;  ///< "Conv", "ai.tether:FusedConv", ...
  int64_t runs = 0;
  double seconds = 0;   ///< total wall time in the kernel
};

/// Name, element type and (possibly symbolic) shape of a session input or output.
struct TensorInfo {
  std::string name;
  ir::DType dtype = ir::DType::kUndefined;
  ir::Shape shape;
};

/// Memory used by the plan for one set of input shapes. On a Vulkan device the arena is device
/// memory, and scratch_bytes counts the host memory of values computed on the CPU.
struct MemoryStats {
  int64_t arena_bytes = 0;         ///< the arena every intermediate shares
  int64_t intermediate_bytes = 0;  ///< what the intermediates would take side by side
  int64_t scratch_bytes = 0;       ///< kernel scratch, after the arena
  int64_t plans = 0;               ///< input shape sets planned so far
  int64_t arenas = 0;              ///< arenas allocated so far (one per concurrent run and plan)
  int64_t device_weight_bytes = 0;  ///< Vulkan: the constants kept in device memory
  int64_t staging_bytes = 0;        ///< Vulkan: host-visible memory for transfers of the plan
};

/// One kernel of a compiled session, in execution order.
struct StepInfo {
  std::string name;     ///< the node's name (for fused nodes: the name of the last node fused)
  std::string op_type;  ///< "Conv", "ai.tether:FusedConv", ...
  /// The names of the model's nodes this kernel computes, in graph order: several for a node
  /// the passes fused (from its "tether.fused_from" metadata), else the node's own name.
  std::vector<std::string> fused_from;
  std::vector<std::string> inputs;   ///< value names read ("" for an omitted optional input)
  std::vector<std::string> outputs;  ///< value names written ("" for an omitted output)
  std::string backend = "cpu";       ///< the backend that runs it: "cpu", "vulkan", ...
};

/// A compiled model.
class Session {
 public:
  virtual ~Session() = default;
  virtual const std::vector<TensorInfo>& inputs() const = 0;
  virtual const std::vector<TensorInfo>& outputs() const = 0;

  /// Runs the model on named inputs (borrowed for the call, any order) and returns the
  /// outputs in order. Throws ArgumentError naming the input for an unknown or missing
  /// name, a wrong dtype or rank, or a dim that contradicts the model.
  virtual std::vector<ir::Tensor> run(const std::vector<std::pair<std::string, ir::Tensor>>& inputs) const = 0;

  /// Runs like run(), with the same plan and kernels, and also copies each value a kernel
  /// writes right after that kernel ran, in execution order, into `captured`. `names` limits
  /// the copies to those value names (empty: every value). Values the passes fused away are
  /// not computed, so they are not captured; steps() says which kernel computes which nodes.
  virtual std::vector<ir::Tensor> run_capture(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                              const std::vector<std::string>& names,
                                              std::vector<std::pair<std::string, ir::Tensor>>& captured) const = 0;

  /// Runs like run() and calls `observer` with each value named in `names` as soon as it exists:
  /// graph inputs before the first kernel, every other value right after the kernel that
  /// writes it, on the calling thread, in execution order; nothing is copied. Throws
  /// ArgumentError for a name that no kernel writes and no input holds (unknown, constant, or
  /// fused away: compile with CompileOptions::keep). An exception from the observer ends the
  /// run and propagates.
  virtual std::vector<ir::Tensor> run_observe(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                              const std::vector<std::string>& names, const Observer& observer) const = 0;

  /// The kernels a run executes, in order.
  virtual std::vector<StepInfo> steps() const = 0;

  /// Memory of the most recent plan (the last new set of input shapes).
  virtual MemoryStats memory() const = 0;
  /// The compile report: passes applied, nodes per op, notes.
  virtual std::string report() const = 0;
  virtual int threads() const = 0;
  /// Per-node kernel times, in execution order (empty unless compiled with profile = true).
  virtual std::vector<NodeProfile> profile() const = 0;
};

/// Lets a caller stop runs on its own thread: while a scope is alive, a run on the thread that
/// made it calls `check` between kernels (on the Vulkan engine: between CPU kernels and before
/// each stretch of Vulkan kernels is submitted), at most once per `interval`, and
/// when `check` returns true stops with tether::Interrupted, leaving the session usable. (The
/// Python module installs one on the main thread, so Ctrl-C ends a long run.)
///
///   std::atomic<bool> stop{false};
///   engine::InterruptScope scope([&] { return stop.load(); });
///   session->run(inputs);   // throws tether::Interrupted soon after `stop` is set
class InterruptScope {
 public:
  explicit InterruptScope(std::function<bool()> check, std::chrono::microseconds interval = std::chrono::milliseconds(20));
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  /// Called by the engine between kernels: throws tether::Interrupted when the innermost scope
  /// of this thread says so. Cheap when no scope is alive.
  static void poll();

 private:
  std::function<bool()> check_;
  std::chrono::microseconds interval_;
  std::chrono::steady_clock::time_point next_;
  InterruptScope* outer_;
};

/// Compiles `model` (which is not changed). Throws UnsupportedError listing every node the
/// device cannot run, ArgumentError for an unknown device, and ModelError / ShapeError for a
/// model that is wrong. On a Vulkan device, nodes the Vulkan backend lacks run on the CPU in
/// the same session (report() lists them; CompileOptions::strict refuses them instead);
/// UnsupportedError when no Vulkan device is found, DeviceError when the device fails.
std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options = {});

/// The ops `device` has kernels for, as "domain:op_type" with "" for the ONNX domain
/// ("ai.tether:FusedConv", ":Conv"), sorted. A listed op may still reject some dtypes or
/// attributes; compile() names those nodes. Throws ArgumentError for an unknown device.
std::vector<std::string> supported_ops(const std::string& device = "cpu");

/// What constant folding computes nodes with (passes::OptimizeOptions::evaluator): the CPU
/// engine's kernels, single-threaded, the code that would compute the node at run time.
///
///   tether::passes::OptimizeOptions o;
///   o.evaluator = &tether::engine::constant_evaluator();
///   tether::passes::optimize(model, o);
const passes::ConstantEvaluator& constant_evaluator();

}  // namespace tether::engine
