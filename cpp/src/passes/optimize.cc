// optimize(): every pass, in an order where each one leaves the next more to do.
#include <sstream>

#include "passes/passes.h"
#include "tether/shape_inference.h"

namespace tether::passes {

std::string optimize(ir::Model& model, const OptimizeOptions& options) {
  std::ostringstream report;
  ir::Graph& g = model.graph();
  report << "pass expand_qoperator_ops: " << expand_qoperator_ops(model)
         << " onnxruntime QOperator nodes written as DequantizeLinear -> op -> QuantizeLinear\n";
  report << "pass remove_identities: " << remove_identities(g) << " nodes removed\n";
  // The matchers read element types and ranks; folding reads static shapes.
  ops::infer_shapes(model);
  report << "pass fold_constants: " << fold_constants(model, options.evaluator) << " nodes folded into initializers\n";
  if (options.fuse_attention)
    report << "pass fuse_attention: " << fuse_attention(model) << " attention chains fused\n";
  report << "pass fold_grouped_kv_repeat: " << fold_grouped_kv_repeat(model)
         << " MatMuls over repeated key/value heads folded\n";
  report << "pass fuse_qdq: " << fuse_qdq(model) << " DequantizeLinear -> op -> QuantizeLinear patterns fused\n";
  report << "pass fuse_integer_to_float: " << fuse_integer_to_float(model)
         << " MatMulInteger / ConvInteger -> Cast -> Mul chains fused\n";
  report << "pass fuse_qdq_lookup: " << fuse_qdq_lookup(model, options.evaluator)
         << " DequantizeLinear -> unary op -> QuantizeLinear chains made lookup tables\n";
  if (options.channels_last)
    report << "pass channels_last_integer_convs: " << channels_last_integer_convs(model)
           << " integer nodes made channels last\n";
  report << "pass fold_conv_batchnorm: " << fold_conv_batchnorm(g) << " BatchNormalization nodes folded\n";
  report << "pass fuse_matmul_add: " << fuse_matmul_add(model) << " MatMul + Add pairs fused\n";
  report << "pass fuse_conv_add: " << fuse_conv_add(model) << " Conv + Add pairs fused\n";
  report << "pass fuse_gelu: " << fuse_gelu(model) << " GELU patterns fused\n";
  report << "pass fuse_activations: " << fuse_activations(model) << " activations fused\n";
  if (options.channels_last)
    report << "pass channels_last_float_convs: " << channels_last_float_convs(model)
           << " float nodes made channels last\n";
  const int nodes = remove_dead_nodes(g);
  const int weights = remove_unused_initializers(g);
  report << "pass remove_dead_nodes: " << nodes << " nodes and " << weights << " initializers removed\n";
  return report.str();
}

}  // namespace tether::passes
