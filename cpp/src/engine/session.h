// Pieces of the executor (executor.cc, executor_space.cc) and its helpers (subgraphs in
// session.cc): compile's first steps, binding inputs, plan keys, shapes for a plan, what a
// kernel factory sees of a node, and how steps are described.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/kernel.h"
#include "ops/node_facts.h"
#include "ops/type_overlay.h"
#include "tether/engine.h"
#include "tether/passes.h"
#include "tether/shape_inference.h"

namespace tether::engine {

/// The first steps of compile on the session's own copy of a model: validates it, marks the
/// values options.keep names (ArgumentError for an unknown one), applies the graph passes
/// when options.optimize, infers shapes, and rewrites float16/bfloat16 nodes that `backend`
/// runs in float32 only (see half.h). Returns the compile report's lines so far.
/// `passes` chooses among the passes (an engine whose kernels take the ONNX layout only turns
/// channels_last off).
/// "[2, 3, 4]".
std::string dims_text(const std::vector<int64_t>& dims);

/// Bytes of physical memory of this machine (a session's default max_memory).
int64_t physical_memory();

/// The bytes one run of a session compiled with `options` may take: max_memory, or this
/// machine's physical memory when it is 0.
int64_t memory_limit(const CompileOptions& options);

/// Bytes of output `value` (of `dtype` and `dims`) of `node`. Throws MemoryLimitError naming
/// the node, value, shape and bytes when past `limit` or past what int64 counts.
int64_t checked_value_bytes(const ir::Node& node, const std::string& value, ir::DType dtype,
                            const std::vector<int64_t>& dims, int64_t limit);

std::string prepare_model(ir::Model& model, const CompileOptions& options, const Backend& backend,
                          const passes::OptimizeOptions& passes = {});

/// Per session input (`infos`, whose graph values are `values`), the tensor a run reads: the
/// named tensor, or the input's initializer as its default. Throws ArgumentError naming the
/// input for an unknown, repeated or missing name, a wrong dtype or rank, a dim that
/// contradicts the model, or a symbolic dim bound to two sizes.
std::vector<const ir::Tensor*> bind_inputs(const std::vector<TensorInfo>& infos, const std::vector<const ir::Value*>& values,
                                           const std::vector<std::pair<std::string, ir::Tensor>>& named);

/// Per graph input of `graph`: whether its values reach a shape slot (directly, or through
/// nodes computing on it other than Shape and Size): a "shape tensor".
std::vector<bool> find_shape_inputs(const ir::Graph& graph);

/// Shape tensors longer than this are refused: a plan per value of a large input would be
/// data, not shape, dependence.
inline constexpr int64_t kMaxShapeTensorElements = 4096;

/// A tensor's dtype, byte count and bytes as int64 words: a plan cache key part for its value.
std::vector<int64_t> value_key(ir::DType dtype, const void* data, size_t nbytes);

/// The key plans are cached by: every input's dims, then the bytes of each shape tensor.
/// Throws UnsupportedError for a shape tensor that is not numeric or is too long
/// (`engine` names the engine in the message).
std::vector<std::vector<int64_t>> plan_key(const std::vector<const ir::Tensor*>& bound, const std::vector<bool>& shape_input,
                                           const std::vector<TensorInfo>& infos, const std::string& engine);

/// The types of `model`'s values when its inputs have the bound tensors' dims: shapes inferred
/// again for them (and for the values of shape tensors; `opts` may pin more, a run's findings)
/// into `types`, beside the model rather than in a copy of it (the copy of a large model costs
/// more than the inference). `model` is not changed, so runs may read it meanwhile, and its
/// values keep their types (weights kept only packed included); `types` holds those that differ.
/// `memo` (optional): what the previous call for this model found, so that only the nodes the
/// change of inputs reaches are inferred again (ops::InferenceMemo); updated to this call's, and
/// the types are then in memo->types, not in `types`.
void infer_for_inputs(const ir::Model& model, const std::vector<TensorInfo>& infos, const std::vector<const ir::Tensor*>& bound,
                      const std::vector<bool>& shape_input, ops::InferenceOptions opts, ops::TypeOverlay& types,
                      ops::InferenceMemo* memo = nullptr);

/// What a kernel factory sees of node `n` of `model`: types, constants (`constant_of` gives a
/// value's constant tensor, or nullptr), and, after the node's own inputs, the values its
/// subgraphs capture (see captured_values), which its step must then read as inputs too.
struct NodeInit {
  KernelInit init;
  std::vector<const ir::Value*> inputs;  ///< the node's inputs, then its captured values
};
NodeInit kernel_init(const ir::Node& n, const ir::Model& model, std::shared_ptr<util::ThreadPool> pool,
                     const std::function<const ir::Tensor*(const ir::Value*)>& constant_of);

/// "Conv" for an ONNX op, "ai.tether:FusedConv" for another domain's.
std::string qualified_op(const ir::Node& n);

/// How Session::steps describes the step of node `n`.
StepInfo step_info(const ir::Node& n);

}  // namespace tether::engine
