// MatMul + bias: one node that adds the bias as it writes each output row.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// Gemm is the 2-D case with constant weights: its kernel packs B once at compile time.
bool gemm_shaped(const MatMulBias& m) {
  std::optional<ir::Tensor> b = constant_of(m.matmul->input(1));
  return m.matmul->input(0)->type().shape().rank() == 2 && b && b->rank() == 2;
}

}  // namespace

int fuse_matmul_add(ir::Model& model) {
  ir::Graph& g = model.graph();
  int fused = 0;
  for (ir::Node* add : g.topological_order()) {
    std::optional<MatMulBias> m = match_matmul_bias(*add);
    if (!m) continue;
    ir::Value* a = m->matmul->input(0);
    ir::Value* b = m->matmul->input(1);
    ir::Value* bias = bias_row_value(g, *m);
    if (gemm_shaped(*m)) {
      replace_chain(g, {m->matmul, add}, "Gemm", "", {a, b, bias}, {});
    } else {
      replace_chain(g, {m->matmul, add}, "FusedMatMul", "ai.tether", {a, b, bias}, {});
      import_tether_opset(model);
    }
    ++fused;
  }
  return fused;
}

}  // namespace tether::passes
