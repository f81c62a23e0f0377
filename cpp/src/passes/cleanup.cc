// Passes that remove nodes and weights without changing what the graph computes.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// Dropout is the identity at inference: when training_mode is absent or a constant false and
// nobody reads the mask.
bool is_inference_dropout(const ir::Node& n) {
  if (!is_onnx(n, "Dropout")) return false;
  if (n.output(1) != nullptr && (!n.output(1)->uses().empty() || n.output(1)->is_output())) return false;
  const ir::Value* training = n.input(2);
  if (training == nullptr) return true;
  if (!training->has_initializer() || training->is_input()) return false;
  const ir::Tensor& t = training->initializer();
  return t.dtype() == ir::DType::kBool && t.num_elements() == 1 && *t.data<uint8_t>() == 0;
}

}  // namespace

int remove_identities(ir::Graph& graph) {
  int removed = 0;
  for (ir::Node* n : graph.nodes()) {
    if (!is_onnx(*n, "Identity") && !is_inference_dropout(*n)) continue;
    ir::Value* in = n->input(0);
    ir::Value* out = n->output(0);
    if (in == nullptr || out == nullptr || out->is_output() || is_kept(*out)) continue;
    graph.replace_all_uses(out, in);
    graph.remove_node(n);  // an unread Dropout mask goes with it
    ++removed;
  }
  return removed;
}

int remove_dead_nodes(ir::Graph& graph) {
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<ir::Node*> order = graph.topological_order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ir::Node* n = *it;
      bool live = false;
      for (const ir::Value* out : n->outputs())
        if (out != nullptr && (!out->uses().empty() || is_any_output(*out))) live = true;
      if (live) continue;
      graph.remove_node(n);
      ++removed;
      changed = true;
    }
  }
  return removed;
}

int remove_unused_initializers(ir::Graph& graph) {
  int removed = 0;
  for (ir::Value* v : graph.initializers()) {
    if (v->is_input() || !v->uses().empty() || is_any_output(*v)) continue;
    graph.remove_value(v);
    ++removed;
  }
  return removed;
}

}  // namespace tether::passes
