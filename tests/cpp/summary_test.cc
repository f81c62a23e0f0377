// summarize(): op counts, parameters and weight bytes of a hand-built model, subgraphs included.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tether/summary.h"

namespace {

using namespace tether::ir;

ValueType f32(std::vector<Dim> dims) { return ValueType::tensor(DType::kFloat32, Shape(std::move(dims))); }

std::shared_ptr<Graph> branch(Graph* parent, Value* captured, const std::vector<std::string>& ops,
                              const std::string& name) {
  auto g = std::make_shared<Graph>(name);
  g->set_parent(parent);
  Value* v = captured;
  for (size_t i = 0; i < ops.size(); ++i) v = g->add_node(ops[i], {v}, {name + std::to_string(i)})->output(0);
  g->add_output(v);
  return g;
}

TEST(Summary, CountsNodesOpsParametersAndBytesIncludingSubgraphs) {
  Model m;
  Graph& g = m.graph();
  Value* x = g.add_input("x", f32({Dim::symbol("n"), Dim(4)}));
  Value* cond = g.add_input("cond", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));
  Value* w = g.add_initializer(Tensor::zeros(DType::kFloat32, {4, 3}), "w");          // 12 elements, 48 bytes
  g.add_initializer(Tensor::strings({2}, {"ab", "cde"}), "labels");                  // 2 elements, 5 bytes
  SparseTensor sp;
  sp.values = Tensor::zeros(DType::kFloat32, {2});                                   // 2 elements, 8 bytes
  sp.indices = Tensor::zeros(DType::kInt64, {2});                                    // 16 bytes
  sp.dims = {10, 10};
  g.add_sparse_initializer(sp, "sp");

  Node* mm = g.add_node("MatMul", {x, w}, {"h"});
  Node* add = g.add_node("Add", {mm->output(0), mm->output(0)}, {"a"});
  Node* r1 = g.add_node("Relu", {add->output(0)}, {"r1"});
  Node* r2 = g.add_node("Relu", {r1->output(0)}, {"r2"}, "", "ai.onnx");  // the default domain by its long name
  Node* iff = g.add_node("If", {cond}, {"o"});
  auto then_g = branch(&g, r2->output(0), {"Identity"}, "t");
  then_g->add_initializer(Tensor::zeros(DType::kFloat32, {3}), "tb");               // 3 elements, 12 bytes
  iff->set_attr(Attribute::graph("then_branch", then_g));
  iff->set_attr(Attribute::graph("else_branch", branch(&g, r2->output(0), {"Identity", "Neg"}, "e")));
  g.add_node("Fused", {x}, {"f"}, "", "com.ms");
  g.add_output(iff->output(0));

  const ModelSummary s = summarize(m);
  EXPECT_EQ(s.num_nodes, 6 + 1 + 2);
  EXPECT_EQ(s.num_subgraphs, 2);
  EXPECT_EQ(s.num_initializers, 4);
  EXPECT_EQ(s.num_parameters, 12 + 2 + 2 + 3);
  // Sparse data counts both stored tensors: values and indices.
  EXPECT_EQ(s.weight_bytes, 48 + 5 + (8 + 16) + 12);
  const std::vector<std::pair<std::string, int64_t>> ops = {
      {"Identity", 2}, {"Relu", 2}, {"Add", 1}, {"If", 1}, {"MatMul", 1}, {"Neg", 1}, {"com.ms:Fused", 1}};
  EXPECT_EQ(s.op_counts, ops);
}

TEST(Summary, GraphsAttributeCountsEachGraph) {
  Model m;
  Graph& g = m.graph();
  Value* x = g.add_input("x", f32({Dim(1)}));
  Node* n = g.add_node("Custom", {x}, {"y"}, "", "test");
  n->set_attr(Attribute::graphs("bodies", {branch(&g, x, {"Relu"}, "a"), branch(&g, x, {"Relu", "Relu"}, "b")}));
  const ModelSummary s = summarize(m);
  EXPECT_EQ(s.num_subgraphs, 2);
  EXPECT_EQ(s.num_nodes, 4);
  EXPECT_EQ(s.op_counts, (std::vector<std::pair<std::string, int64_t>>{{"Relu", 3}, {"test:Custom", 1}}));
}

TEST(Summary, EmptyModelCountsNothing) {
  const ModelSummary s = summarize(Model());
  EXPECT_EQ(s.num_nodes, 0);
  EXPECT_EQ(s.num_initializers, 0);
  EXPECT_EQ(s.num_parameters, 0);
  EXPECT_EQ(s.weight_bytes, 0);
  EXPECT_EQ(s.num_subgraphs, 0);
  EXPECT_TRUE(s.op_counts.empty());
}

}  // namespace
