// passes::optimize through the public API: a rewrite that a C++ user sees, checked against
// plain loops, and values that subgraphs return directly are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tether/engine.h"
#include "tether/model.h"
#include "tether/passes.h"

namespace {

using namespace tether;
using ir::DType;
using ir::Dim;

ir::ValueType f32(std::vector<Dim> dims) { return ir::ValueType::tensor(DType::kFloat32, ir::Shape(std::move(dims))); }

ir::Tensor vec(std::vector<float> v, std::vector<int64_t> dims) {
  return ir::Tensor::copy_of(DType::kFloat32, std::move(dims), v.data(), static_cast<int64_t>(v.size() * sizeof(float)));
}

std::string fused_from(const ir::Node& n) {
  for (const auto& [k, v] : n.metadata())
    if (k == "tether.fused_from") return v;
  return "";
}

// x[1, 2, 1, 3] -> 1x1 Conv (2 -> 2 channels) -> BatchNormalization -> Relu -> y
ir::Model conv_bn_relu() {
  ir::Model m;
  m.set_opset("", 17);
  ir::Graph& g = m.graph();
  ir::Value* x = g.add_input("x", f32({Dim(1), Dim(2), Dim(1), Dim(3)}));
  ir::Value* w = g.add_initializer(vec({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2, 1, 1}), "w");
  std::vector<ir::Value*> bn_in;
  ir::Node* conv = g.add_node("Conv", {x, w}, {"c"}, "conv");
  bn_in.push_back(conv->output(0));
  bn_in.push_back(g.add_initializer(vec({2.0f, 0.5f}, {2}), "scale"));
  bn_in.push_back(g.add_initializer(vec({0.1f, -0.3f}, {2}), "shift"));
  bn_in.push_back(g.add_initializer(vec({0.2f, -0.4f}, {2}), "mean"));
  bn_in.push_back(g.add_initializer(vec({4.0f, 0.25f}, {2}), "var"));
  ir::Node* bn = g.add_node("BatchNormalization", bn_in, {"b"}, "bn");
  bn->set_attr(ir::Attribute::f("epsilon", 0.0f));
  ir::Node* relu = g.add_node("Relu", {bn->output(0)}, {"y"}, "relu");
  g.add_output(relu->output(0));
  return m;
}

TEST(Passes, ConvBatchNormReluBecomesOneFusedConvThatComputesTheSame) {
  ir::Model m = conv_bn_relu();
  const std::string report = passes::optimize(m);
  EXPECT_NE(report.find("pass fold_conv_batchnorm: 1"), std::string::npos) << report;
  EXPECT_NE(report.find("pass fuse_activations: 1"), std::string::npos) << report;
  ASSERT_EQ(m.graph().num_nodes(), 1u);
  const ir::Node& n = *m.graph().nodes()[0];
  EXPECT_EQ(n.op_type(), "FusedConv");
  EXPECT_EQ(n.domain(), "ai.tether");
  EXPECT_EQ(n.name(), "relu");
  EXPECT_EQ(fused_from(n), "conv,bn,relu");
  EXPECT_EQ(n.output(0)->name(), "y");
  EXPECT_EQ(m.opset("ai.tether"), 1);

  const std::vector<float> xs = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -3.0f};  // [c][w]
  auto session = engine::compile(m, {.threads = 1, .optimize = false});
  std::vector<ir::Tensor> out = session->run({{"x", vec(xs, {1, 2, 1, 3})}});
  ASSERT_EQ(out.size(), 1u);
  const float w[2][2] = {{1.0f, -2.0f}, {0.5f, 3.0f}};
  const double scale[] = {2.0, 0.5}, shift[] = {0.1, -0.3}, mean[] = {0.2, -0.4}, var[] = {4.0, 0.25};
  for (int oc = 0; oc < 2; ++oc)
    for (int p = 0; p < 3; ++p) {
      const double conv = w[oc][0] * xs[p] + w[oc][1] * xs[3 + p];
      const double bn = (conv - mean[oc]) / std::sqrt(var[oc]) * scale[oc] + shift[oc];
      EXPECT_NEAR(out[0].data<float>()[oc * 3 + p], std::max(bn, 0.0), 1e-5) << oc << "," << p;
    }
}

TEST(Passes, AConvOutputThatASubgraphReturnsIsNotFusedAway) {
  ir::Model m = conv_bn_relu();
  ir::Graph& g = m.graph();
  // An If whose then-branch returns the conv output directly: the BN and Relu must not take
  // the conv's place, or the branch would lose its value.
  ir::Value* cond = g.add_input("cond", ir::ValueType::tensor(DType::kBool, ir::Shape(std::vector<Dim>{})));
  auto then_branch = std::make_shared<ir::Graph>("then");
  then_branch->set_parent(&g);
  then_branch->add_output(g.find("c"));
  auto else_branch = std::make_shared<ir::Graph>("else");
  else_branch->set_parent(&g);
  else_branch->add_output(g.find("x"));
  ir::Node* branch = g.add_node("If", {cond}, {"picked"}, "if");
  branch->set_attr(ir::Attribute::graph("then_branch", then_branch));
  branch->set_attr(ir::Attribute::graph("else_branch", else_branch));
  g.add_output(branch->output(0));

  const std::string report = passes::optimize(m);
  EXPECT_NE(report.find("pass fold_conv_batchnorm: 0"), std::string::npos) << report;
  int convs = 0, bns = 0;
  for (const ir::Node* n : g.nodes()) {
    convs += n->op_type() == "Conv";
    bns += n->op_type() == "BatchNormalization";
  }
  EXPECT_EQ(convs, 1);
  EXPECT_EQ(bns, 1);
  EXPECT_NO_THROW(g.validate());
}

}  // namespace

namespace {

// x + (Constant a * b): the product's inputs are all constant.
ir::Model add_of_constant_product() {
  ir::Model m;
  m.set_opset("", 17);
  ir::Graph& g = m.graph();
  ir::Value* x = g.add_input("x", f32({Dim(3)}));
  ir::Node* a = g.add_node("Constant", {}, {"a"}, "a");
  a->set_attr(ir::Attribute::tensor("value", vec({1.0f, 2.0f, 3.0f}, {3})));
  ir::Value* b = g.add_initializer(vec({4.0f, -5.0f, 0.5f}, {3}), "b");
  ir::Node* mul = g.add_node("Mul", {a->output(0), b}, {"p"}, "mul");
  ir::Node* add = g.add_node("Add", {x, mul->output(0)}, {"y"}, "add");
  g.add_output(add->output(0));
  return m;
}

// An evaluator that computes Mul alone, in its own loop: the passes call whatever they are given.
class MulOnly final : public passes::ConstantEvaluator {
 public:
  mutable int calls = 0;
  std::optional<std::vector<ir::Tensor>> evaluate(const ir::Node& node, const std::vector<const ir::Tensor*>& inputs,
                                                  int64_t, int64_t) const override {
    ++calls;
    if (node.op_type() != "Mul") return std::nullopt;
    ir::Tensor out = ir::Tensor::zeros(DType::kFloat32, inputs[0]->dims());
    for (int64_t i = 0; i < out.num_elements(); ++i)
      out.mutable_data<float>()[i] = inputs[0]->data<float>()[i] * inputs[1]->data<float>()[i];
    return std::vector<ir::Tensor>{std::move(out)};
  }
};

const ir::Tensor* initializer_named(const ir::Graph& g, const std::string& name) {
  const ir::Value* v = g.find(name);
  return v != nullptr && v->has_initializer() ? &v->initializer() : nullptr;
}

}  // namespace

TEST(Passes, ConstantFoldingComputesOnlyThroughTheEvaluatorItIsGiven) {
  // Without an evaluator the Constant becomes an initializer and the Mul stays.
  ir::Model plain = add_of_constant_product();
  passes::optimize(plain);
  EXPECT_NE(initializer_named(plain.graph(), "a"), nullptr);
  EXPECT_EQ(initializer_named(plain.graph(), "p"), nullptr);
  EXPECT_EQ(plain.graph().num_nodes(), 2u);

  // With the engine's evaluator (the CPU kernels) and with one of the caller's, the product
  // becomes an initializer holding a * b.
  MulOnly mine;
  for (const passes::ConstantEvaluator* evaluator : {&engine::constant_evaluator(),
                                                     static_cast<const passes::ConstantEvaluator*>(&mine)}) {
    ir::Model m = add_of_constant_product();
    passes::OptimizeOptions o;
    o.evaluator = evaluator;
    const std::string report = passes::optimize(m, o);
    EXPECT_NE(report.find("pass fold_constants: 2"), std::string::npos) << report;
    const ir::Tensor* p = initializer_named(m.graph(), "p");
    ASSERT_NE(p, nullptr);
    const float want[] = {4.0f, -10.0f, 1.5f};
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p->data<float>()[i], want[i]);
    ASSERT_EQ(m.graph().num_nodes(), 1u);
    EXPECT_EQ(m.graph().nodes()[0]->op_type(), "Add");
  }
  EXPECT_EQ(mine.calls, 1);  // the Add reads the input x: never offered
}
