// Graph rewrites applied before compiling. Each pass keeps what the graph computes and
// returns how many rewrites it made. docs/passes.md describes when each applies.
#pragma once

#include <string>
#include <vector>

#include "tether/model.h"
#include "tether/passes.h"

namespace tether::passes {

/// Removes Identity nodes (and inference-mode Dropout, whose mask nobody reads) by pointing
/// their readers at their input. Nodes whose output is a graph output stay.
int remove_identities(ir::Graph& graph);

/// Removes nodes none of whose outputs is read or is a graph output, until none is left.
int remove_dead_nodes(ir::Graph& graph);

/// Removes initializers that nothing reads and that are not graph inputs or outputs.
int remove_unused_initializers(ir::Graph& graph);

/// Outputs of the folding pass larger than this are left to run time, unless the node's
/// inputs were larger still (folding then saves memory as well as time).
inline constexpr int64_t kMaxFoldedBytes = int64_t{1} << 20;

/// Replaces each main-graph node whose inputs are all constants (initializers that are not
/// graph inputs, Constant outputs) by initializers holding its outputs, computed once by
/// `evaluator`; Constant nodes become initializers, and Shape / Size of values whose shape
/// is static become constants too. Random ops, QuantizeLinear / DequantizeLinear, nodes with
/// subgraphs and nodes the evaluator does not compute stay; with a null evaluator only Constant,
/// Shape and Size fold. Values keep their names. Types on the values should be inferred first
/// (optimize() does so).
///
///   fold_constants(model, &engine::constant_evaluator());   // what compile() does
int fold_constants(ir::Model& model, const ConstantEvaluator* evaluator);

/// Folds inference-mode BatchNormalization into the Conv or ConvTranspose before it (new
/// weights and bias, computed in double) when the conv output has no other reader.
int fold_conv_batchnorm(ir::Graph& graph);

/// MatMul + Add of a constant bias over the last dim: Gemm when A is 2-D and B a constant 2-D
/// matrix, else ai.tether FusedMatMul with the bias.
int fuse_matmul_add(ir::Model& model);

/// Conv (or FusedConv without an activation) followed by an Add of a float32 value of exactly
/// the conv output's shape becomes ai.tether FusedConv with that value as a fourth input (the
/// summand), when the conv output has no other reader.
int fuse_conv_add(ir::Model& model);

/// GELU spelled out in elementary ops (0.5 * x * (1 + Erf(x / sqrt 2)), or the Tanh form with
/// 0.044715 x^3) becomes one Gelu node: ONNX's from opset 20, ai.tether's (the same op) before.
int fuse_gelu(ir::Model& model);

/// Conv / Gemm / MatMul (with or without a bias Add) followed by an activation become one
/// ai.tether FusedConv / FusedGemm / FusedMatMul when the intermediate has no other reader.
int fuse_activations(ir::Model& model);

/// DequantizeLinear -> Conv / MatMul / Gemm (-> Relu / Clip) -> QuantizeLinear with constant
/// 8-bit weights becomes one QLinearConv or QLinearMatMul (ai.tether when it carries an
/// activation or a bias; see qdq_fuse.cc). Returns the number of patterns fused.
int fuse_qdq(ir::Model& model);

/// Key/value heads repeated for grouped-query attention (Unsqueeze -> Expand -> Reshape, then
/// MatMul, through a Transpose for the keys) become products over the unrepeated heads, the
/// query or probability rows of a group viewed together by Reshapes (see grouped_kv.cc).
/// Returns the number of MatMuls rewritten.
int fold_grouped_kv_repeat(ir::Model& model);

/// Scaled dot-product attention spelled out (MatMul with K transposed, an optional constant
/// scale and additive float mask, Softmax over the last axis, MatMul with V; K and V per head
/// or repeated for grouped-query attention) becomes one ai.tether Attention node, when the
/// shapes show they compute the same (see attention.cc). Returns the number of chains fused.
int fuse_attention(ir::Model& model);

/// 2-D QLinearConv nodes (group 1 or depthwise, constant parameters) become ai.tether
/// QLinearConv with channels_last = 1 between Transposes, QLinearAdd nodes between two of them
/// and 8-bit MaxPool nodes after one follow, and Transposes that undo each other go (see
/// channels_last.cc). Values that are
/// graph outputs or kept keep their layout. Returns the number of nodes made channels last.
int channels_last_integer_convs(ir::Model& model);

/// 2-D float Conv / FusedConv nodes (any group, constant weights) become ai.tether
/// FusedConv with channels_last = 1 between Transposes; the element-wise ops, pooling and
/// channel Concats after them follow, Transposes of Transposes merge and those that undo each
/// other go (see channels_last_float.cc). Values that are graph outputs or kept keep their
/// layout. Returns the number of nodes made channels last.
int channels_last_float_convs(ir::Model& model);

/// onnxruntime's QOperator contrib ops com.microsoft QLinearSigmoid, QLinearLeakyRelu,
/// QLinearMul, QLinearConcat, QLinearAveragePool and QLinearSoftmax, each written as what it
/// is defined to be: DequantizeLinear of its operands, the float op, QuantizeLinear to its
/// output (see qoperator.cc). optimize() runs it first, and compile() with optimize off. Returns the
/// number of nodes expanded. Throws ModelError for such a node with too few inputs or an axis
/// out of range.
///
///   ir::Model m = ir::load_model("mobilenet.qoperator.onnx");
///   passes::expand_qoperator_ops(m);   // runs wherever QuantizeLinear, Sigmoid, ... run
int expand_qoperator_ops(ir::Model& model);

/// DequantizeLinear -> a unary element-wise op (Sigmoid, Tanh, LeakyRelu, HardSwish, Clip with
/// constant bounds, ...) -> QuantizeLinear, all per tensor with constant parameters and each
/// value read by the next alone, becomes ai.tether QLinearLookup(X, table): the chain computed
/// by `evaluator` for each of the 256 values of X's byte (see qdq_lookup.cc). Does nothing
/// without an evaluator. Returns the number of chains fused.
int fuse_qdq_lookup(ir::Model& model, const ConstantEvaluator* evaluator);

/// A contrib op expand_qoperator_ops writes out, and the ONNX ops its expansion may use (for
/// supported_ops: a device runs the contrib op where it runs all of these).
struct QOperatorExpansion {
  std::string op;                 ///< in the com.microsoft domain
  std::vector<std::string> uses;  ///< in the ONNX domain
};
const std::vector<QOperatorExpansion>& qoperator_expansions();

/// MatMulInteger (2-D B, constant or not) -> Cast(float) -> Mul(scale: one value or one per column)
/// (-> Add of a constant bias per column), each read by the next alone, becomes one ai.tether
/// MatMulIntegerToFloat; ConvInteger (constant weights) likewise, with a scale and bias per
/// output channel, becomes ai.tether ConvIntegerToFloat (see integer_matmul.cc). Returns the
/// number of chains fused.
int fuse_integer_to_float(ir::Model& model);

// optimize() (tether/passes.h) runs them in order: identities, shape inference, constant
// folding, attention, grouped key/value heads, Conv+BN, MatMul+Add, Conv+Add, activation fusion, dead code.

}  // namespace tether::passes
