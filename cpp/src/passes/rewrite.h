// Small helpers the rewrite rules share: matching ONNX ops, reading constants, checking who
// reads a value, and replacing a chain of nodes by one while keeping value names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tether/model.h"

namespace tether::passes {

/// Metadata key on a node that replaced others: their names, comma-separated, in graph order.
inline constexpr char kFusedFrom[] = "tether.fused_from";

/// True for `op` in the default ONNX domain.
bool is_onnx(const ir::Node& n, const char* op);

/// int8 or uint8: the element types of the quantized tensors the INT8 passes rewrite.
inline bool is_8bit(ir::DType t) { return t == ir::DType::kInt8 || t == ir::DType::kUInt8; }

/// The value of `v` when it is a constant: an initializer that is not a graph input, or the
/// output of a Constant node (dense values only). nullopt otherwise.
std::optional<ir::Tensor> constant_of(const ir::Value* v);

/// Metadata key on a value the passes must leave computed, as if it were a graph output (set by
/// compile() for CompileOptions::keep, so that observers and captures see the value).
inline constexpr char kKeep[] = "tether.keep";

/// Metadata key on a value that a layout pass made channels last: [N, H, W, C] holding what
/// the model's value of that name holds as [N, C, H, W]. Sessions hand such values to observers
/// and captures in the model's layout.
inline constexpr char kChannelsLast[] = "tether.channels_last";

/// True when `v` is marked with kKeep.
bool is_kept(const ir::Value& v);

/// True when `v` is a graph output of its graph, is returned directly by a subgraph of it, or
/// is kept (is_kept): a value the rewrites must not remove.
bool is_any_output(const ir::Value& v);

/// True when `reader` is the only node reading `v` (once) and `v` is no graph output.
bool only_reader(const ir::Value& v, const ir::Node& reader);

/// "Conv 'name'" names are what parity tools map back to; an unnamed node is listed by its
/// first output's name. Nodes that were themselves fused contribute their own list.
std::string trace_names(const std::vector<const ir::Node*>& nodes);

/// A name not yet used in `g`: `base`, else `base_1`, `base_2`, ...
std::string unique_name(const ir::Graph& g, const std::string& base);

/// Moves every reader of `v` (node inputs, graph-output slots) to a fresh placeholder value,
/// so that `v` and its name can go while its readers wait for the value that takes its place.
ir::Value* park_uses(ir::Graph& g, ir::Value* v);
/// Points the readers parked on `tmp` at `v` and removes `tmp`.
void unpark(ir::Graph& g, ir::Value* tmp, ir::Value* v);

/// Replaces `chain` (nodes in graph order; only the last one's outputs may be read outside the
/// chain) by one new node of `op_type`/`domain` over `inputs` with `attributes`. The new node
/// is named after the last node of the chain, its outputs keep that node's output names and
/// types, and its metadata records the chain under kFusedFrom. Returns the new node.
/// Arguments are taken by value: they often come from a node of the chain.
ir::Node* replace_chain(ir::Graph& g, const std::vector<ir::Node*>& chain, std::string op_type,
                        std::string domain, std::vector<ir::Value*> inputs,
                        std::vector<ir::Attribute> attributes);

/// Replaces `node` by initializers holding `values` (one per output; invalid tensors for
/// outputs nothing reads) under the outputs' names; readers and graph-output slots follow.
void replace_with_constants(ir::Graph& g, ir::Node* node, std::vector<ir::Tensor> values);

// ---- patterns more than one pass matches ------------------------------------------------------

/// MatMul followed by an Add of a constant bias that broadcasts over the last dim only.
struct MatMulBias {
  ir::Node* matmul = nullptr;
  ir::Node* add = nullptr;
  ir::Value* bias = nullptr;  ///< the Add's constant input
  ir::Tensor row;             ///< the bias as a float32 vector of the output's last dim
};

/// Matches `add` as the end of MatMul + bias: the MatMul output (float32, rank >= 2, last dim
/// known, both inputs of rank >= 2) is read by the Add alone, and the other operand is a
/// constant whose dims are all 1 but the last (1 or N), of rank at most the output's.
std::optional<MatMulBias> match_matmul_bias(ir::Node& add);

/// The value holding `m.row`: the bias itself when it already is that vector, else a new
/// initializer.
ir::Value* bias_row_value(ir::Graph& g, const MatMulBias& m);

/// The node producing `v` when it is the ONNX op `op`, `v` is its first output and `reader` is
/// the only node reading `v` (see only_reader); nullptr otherwise.
ir::Node* sole_producer(ir::Value* v, const char* op, const ir::Node& reader);

/// The dims of `v` when it is a tensor whose rank is known to be `rank`; nullptr otherwise.
const std::vector<ir::Dim>* dims_of(const ir::Value* v, size_t rank);

/// Unsqueeze's axes: the attribute (before opset 13) or the constant second input; nullopt
/// when they are not constant.
std::optional<std::vector<int64_t>> unsqueeze_axes(const ir::Node& n);

/// Key/value heads repeated for grouped-query attention, as exporters write it:
/// kv [B, Hkv, T, D] -> Unsqueeze(axis 2) -> Expand [B, Hkv, G, T, D] -> Reshape [B, Hkv*G, T, D].
struct KvRepeat {
  ir::Value* kv = nullptr;  ///< [B, Hkv, T, D], the heads before repetition
  int64_t kv_heads = 0;
  int64_t group = 0;
  std::vector<ir::Node*> nodes;  ///< the Unsqueeze, Expand and Reshape, in graph order
};

/// Matches `v` (read by `reader` alone) as a repeat of each of kv's heads `group` times,
/// consecutively. The match rests on inferred shapes: the Expand grows only the unsqueezed
/// axis (its other dims kv's, symbol for symbol) and the Reshape merges exactly the head and
/// group axes; each node of the repeat is read by the next alone.
std::optional<KvRepeat> match_kv_repeat(ir::Value* v, const ir::Node& reader);

/// Imports the ai.tether operator set (version 1) that the fused ops belong to.
void import_tether_opset(ir::Model& model);

}  // namespace tether::passes
