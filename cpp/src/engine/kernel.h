// What a kernel is and what it sees: the interface every backend's kernels implement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tether/error.h"
#include "tether/graph.h"
#include "tether/model.h"

#ifdef TETHER_KEPT_OPS_HEADER
#include TETHER_KEPT_OPS_HEADER  // a reduced deployment build's ops (see TETHER_ADD below)
#endif

namespace tether::util {
class ThreadPool;
}

namespace tether::engine {

struct CompileOptions;
class Space;

/// A tensor as a kernel sees it: element type, sizes, and contiguous row-major data.
struct View {
  ir::DType dtype = ir::DType::kFloat32;
  std::vector<int64_t> dims;
  void* data = nullptr;

  size_t rank() const { return dims.size(); }
  int64_t numel() const {  // 0 for any dim of 0, whatever the others (an empty plane may be vast)
    for (int64_t d : dims)
      if (d == 0) return 0;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

/// What a kernel gets for one run besides its tensors.
struct RunContext {
  util::ThreadPool* pool = nullptr;
  std::byte* scratch = nullptr;  ///< scratch_bytes() bytes, 64-byte aligned, not zeroed
};

/// One node, ready for its backend: attributes read and constant inputs (weights) prepared
/// once. Each backend runs its own kind: the CPU backend's are HostKernels (run on host
/// memory), the Vulkan backend's GpuKernels (engine/vulkan/kernel.h: they record dispatches).
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// True for a kernel that sizes and allocates its outputs itself (ops whose output sizes
  /// depend on input values: NonZero, Unique, NonMaxSuppression, control flow): an
  /// AllocatingKernel. The session plans the steps after it once it knows the sizes.
  virtual bool allocates_outputs() const { return false; }
};

/// A kernel that computes on host memory: the CPU backend's.
class HostKernel : public Kernel {
 public:
  /// Scratch memory one run needs with these shapes (views carry dims only).
  virtual int64_t scratch_bytes(const std::vector<View>& inputs, const std::vector<View>& outputs) const {
    return 0;
  }
  /// True when the kernel made its own copy of constant input i (packed weights) and never
  /// reads the original: the session then frees the original if nothing else reads it.
  virtual bool packs_input(size_t i) const { return false; }
  /// Computes outputs from inputs. Output views are allocated with the planned dims; the view
  /// of an input the kernel packed has no data.
  virtual void run(const RunContext& ctx, const std::vector<View>& inputs, std::vector<View>& outputs) const = 0;
};

/// A kernel whose outputs' sizes depend on its inputs' values: subclasses implement run_alloc;
/// run() (used when a plan knows the sizes anyway) copies into the planned outputs.
class AllocatingKernel : public HostKernel {
 public:
  bool allocates_outputs() const final { return true; }
  void run(const RunContext& ctx, const std::vector<View>& inputs, std::vector<View>& outputs) const final;
  /// One tensor per node output (invalid where the output is omitted). `outputs` carries the
  /// dims and dtypes as planned (dims may be empty when the plan could not know them) and no data.
  virtual std::vector<ir::Tensor> run_alloc(const RunContext& ctx, const std::vector<View>& inputs,
                                            const std::vector<View>& outputs) const = 0;
};

/// What a kernel factory sees of its node.
struct KernelInit {
  const ir::Node& node;
  std::vector<ir::ValueType> input_types;   ///< as inference gives them (dims may be symbolic)
  std::vector<ir::ValueType> output_types;
  std::vector<const ir::Tensor*> constants;  ///< per input: its value when constant, else nullptr
  int64_t opset = 0;
  int threads = 1;  ///< threads a run uses (kernels with per-thread scratch size it by this)
  /// The compiled model (its opsets), for kernels that compile subgraphs; null when a node is
  /// evaluated on its own (constant folding).
  const ir::Model* model = nullptr;
  /// The session's thread pool, which compiled subgraphs share.
  std::shared_ptr<util::ThreadPool> pool;

  ir::DType input_dtype(size_t i) const {
    return i < input_types.size() ? input_types[i].dtype() : ir::DType::kUndefined;
  }
  ir::DType output_dtype(size_t i) const {
    return i < output_types.size() ? output_types[i].dtype() : ir::DType::kUndefined;
  }
  const ir::Tensor* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
};

/// Creates a kernel; throws ModelError naming the node for attributes it cannot accept.
using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelInit&);
/// "" when the kernel can run this node (dtypes, attributes), else the reason it cannot.
using SupportCheck = std::string (*)(const KernelInit&);

/// Kernels by (domain, op type), as one backend registers them.
class KernelRegistry {
 public:
  struct Entry {
    KernelFactory create;
    SupportCheck check;
  };
  void add(std::string_view op_type, KernelFactory create, SupportCheck check, std::string_view domain = "");
  const Entry* find(std::string_view domain, std::string_view op_type) const;
  /// Every registered op as "domain:op_type" ("" for the ONNX domain), sorted.
  std::vector<std::string> op_types() const;

 private:
  std::unordered_map<std::string, Entry> entries_;
};

/// TETHER_ADD(r, "Relu", create, check) registers an ONNX-domain kernel and
/// TETHER_ADD_IN(r, "ai.tether", "FusedConv", create, check) one of another domain; backends
/// register through them rather than KernelRegistry::add so that a reduced deployment build
/// (-DTETHER_DEPLOY_OPS=ops.txt, docs/building.md) can leave kernels out. There the build
/// defines TETHER_KEPT_OPS_HEADER, a header generated from the list whose
/// tether::engine::kept_ops::kept(domain, op_type) is constexpr: an op it does not keep
/// compiles to a discarded statement, so nothing references its kernel and the linker drops
/// it. Otherwise both are plain add() calls. The domain and op name are string literals on the
/// macro's own line: the configure step reads them there (cmake/DeployOps.cmake).
#ifdef TETHER_KEPT_OPS_HEADER
#define TETHER_ADD(registry, op_type, ...)                                                            \
  do {                                                                                                \
    if constexpr (::tether::engine::kept_ops::kept("", op_type)) (registry).add(op_type, __VA_ARGS__); \
  } while (0)
#define TETHER_ADD_IN(registry, domain, op_type, ...)                         \
  do {                                                                        \
    if constexpr (::tether::engine::kept_ops::kept(domain, op_type))          \
      (registry).add(op_type, __VA_ARGS__, domain);                           \
  } while (0)
#else
#define TETHER_ADD(registry, op_type, ...) (registry).add(op_type, __VA_ARGS__)
#define TETHER_ADD_IN(registry, domain, op_type, ...) (registry).add(op_type, __VA_ARGS__, domain)
#endif

/// A backend: the ops it can run and how to make their kernels.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  /// "" when this backend can run the node, else why not (op unknown, dtype, attribute).
  virtual std::string supports(const KernelInit& init) const = 0;
  /// Precondition: supports(init) is "".
  virtual std::unique_ptr<Kernel> create(const KernelInit& init) const = 0;
  /// The ops it has kernels for, as "domain:op_type" ("" for the ONNX domain), sorted.
  virtual std::vector<std::string> op_types() const = 0;
  /// For a backend whose kernels compute in memory of their own (a GPU's): what it keeps for
  /// one session compiled with `options` (its device opened), which makes its kernels and
  /// plans (engine/space.h). Null, the default, for a backend of HostKernels on host memory.
  /// Throws what opening the device throws (DeviceError, UnsupportedError).
  virtual std::unique_ptr<Space> open(const CompileOptions& options) const;
};

/// A backend whose kernels are the entries of a registry its constructor fills.
class RegistryBackend : public Backend {
 public:
  /// `missing`: the reason given for an op the registry lacks ("no cpu kernel for this op").
  explicit RegistryBackend(std::string missing) : missing_(std::move(missing)) {}
  std::string supports(const KernelInit& init) const override;
  std::unique_ptr<Kernel> create(const KernelInit& init) const override;
  std::vector<std::string> op_types() const override { return registry_.op_types(); }

 protected:
  KernelRegistry registry_;

 private:
  std::string missing_;
};

/// The CPU backend.
const Backend& cpu_backend();

/// The CPU backend's kernel for `init` (precondition: cpu_backend().supports(init) is ""),
/// as the HostKernel every kernel of that backend is.
std::unique_ptr<HostKernel> create_host_kernel(const KernelInit& init);

// ---- subgraphs (If, Loop, Scan) ---------------------------------------------------------------

/// The values of enclosing graphs that a node's subgraphs read, initializers aside (those are
/// copied into the compiled subgraph), in order of first use. The session passes them to the
/// node's kernel as extra inputs after the node's own.
std::vector<const ir::Value*> captured_values(const ir::Node& node);

/// A subgraph compiled on its own by the CPU engine: what control-flow kernels run.
class Subgraph {
 public:
  virtual ~Subgraph() = default;
  /// Runs the subgraph on one tensor per input (its own inputs, then the captured values) with
  /// the session's threads; one tensor per subgraph output.
  virtual std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs) const = 0;
};

/// Compiles `body` standalone: its inputs, then `captured` (see captured_values) as inputs,
/// with the opsets of `model`. `input_types` gives the types of the body's own inputs where the
/// body leaves them undeclared (ONNX lets a Loop body's inputs take the Loop's types). Throws
/// UnsupportedError naming the nodes the CPU engine cannot run.
std::unique_ptr<Subgraph> compile_subgraph(const ir::Graph& body, const std::vector<const ir::Value*>& captured,
                                           const ir::Model& model, std::shared_ptr<util::ThreadPool> pool,
                                           const std::vector<ir::ValueType>& input_types = {});

// ---- helpers for support checks ---------------------------------------------------------------

/// "" when input `i` (present) has one of `allowed` dtypes, else a reason naming it.
std::string require_dtype(const KernelInit& init, size_t i, std::initializer_list<ir::DType> allowed);

}  // namespace tether::engine
