// ops::infer_shapes into a TypeOverlay: the shapes a model takes for other input sizes, against
// shapes worked out by hand, with the model itself left as it was.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/type_overlay.h"
#include "tether/error.h"
#include "tether/model.h"
#include "tether/shape_inference.h"

namespace {

using namespace tether::ir;
using tether::ops::InferenceOptions;
using tether::ops::TypeOverlay;

ValueType f32(std::vector<Dim> dims) { return ValueType::tensor(DType::kFloat32, Shape(std::move(dims))); }

void expect_type(const ValueType& t, const std::vector<Dim>& expected, const char* what) {
  ASSERT_TRUE(t.is_tensor()) << what;
  ASSERT_EQ(t.dtype(), DType::kFloat32) << what;
  ASSERT_TRUE(t.shape().has_rank()) << what;
  ASSERT_EQ(t.shape().rank(), expected.size()) << what << " is " << t.to_string();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(t.shape()[i] == expected[i]) << what << " is " << t.to_string() << ", expected dim " << i << " "
                                             << expected[i].to_string();
}

InferenceOptions overwrite() {
  InferenceOptions o;
  o.overwrite = true;
  return o;
}

// x[N, 4] -> Relu -> Add x -> If (then: Neg of the sum, else: Abs of it, both read from outside
// with undeclared shapes) -> Loop adding x to the carried value (its body input undeclared, typed
// from the node's input at compile) -> y.
struct Net {
  Model m;
  Value* x;
  Value* sum;
  Value* branch_out;
  Value* chosen;
  Value* body_v;
  Value* body_v_out;
  Value* final_v;

  Net() {
    m.set_opset("", 17);
    Graph& g = m.graph();
    x = g.add_input("x", f32({Dim::symbol("N"), Dim(4)}));
    Value* flag = g.add_input("flag", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));
    Value* trips = g.add_initializer(Tensor::zeros(DType::kInt64, {}), "trips");
    Node* relu = g.add_node("Relu", {x}, {"r"}, "relu");
    sum = g.add_node("Add", {relu->output(0), x}, {"s"}, "add")->output(0);

    auto then_g = std::make_shared<Graph>("then");
    then_g->set_parent(&g);
    branch_out = then_g->add_node("Neg", {sum}, {"t"}, "neg")->output(0);
    then_g->add_output(branch_out);
    auto else_g = std::make_shared<Graph>("else");
    else_g->set_parent(&g);
    else_g->add_output(else_g->add_node("Abs", {sum}, {"e"}, "abs")->output(0));
    Node* iff = g.add_node("If", {flag}, {"chosen"}, "if");
    iff->set_attr(Attribute::graph("then_branch", then_g));
    iff->set_attr(Attribute::graph("else_branch", else_g));
    chosen = iff->output(0);

    auto body = std::make_shared<Graph>("body");
    body->set_parent(&g);
    body->add_input("i", ValueType::tensor(DType::kInt64, Shape(std::vector<Dim>{})));
    Value* c = body->add_input("c", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));
    body_v = body->add_input("v", ValueType());
    body->add_output(body->add_node("Identity", {c}, {"go"}, "go")->output(0));
    body_v_out = body->add_node("Add", {body_v, x}, {"v_out"}, "step")->output(0);
    body->add_output(body_v_out);
    Node* loop = g.add_node("Loop", {trips, nullptr, chosen}, {"y"}, "loop");
    loop->set_attr(Attribute::graph("body", body));
    final_v = loop->output(0);
    g.add_output(final_v);
  }
};

TEST(TypeOverlay, InfersOtherInputSizesWithoutChangingTheModel) {
  Net net;
  tether::ops::infer_shapes(net.m);  // as compile does
  const Dim n = Dim::symbol("N");
  expect_type(net.final_v->type(), {n, Dim(4)}, "compiled y");

  TypeOverlay types;
  types.set(*net.x, f32({Dim(5), Dim(4)}));
  tether::ops::infer_shapes(net.m, overwrite(), types);
  for (const Value* v : {net.sum, net.branch_out, net.chosen, net.body_v_out, net.final_v})
    expect_type(types.type_of(*v), {Dim(5), Dim(4)}, v->name().c_str());
  // The model keeps the shapes it was compiled with, the bodies' included.
  for (const Value* v : {net.x, net.sum, net.branch_out, net.chosen, net.body_v, net.body_v_out, net.final_v})
    expect_type(v->type(), {n, Dim(4)}, v->name().c_str());
}

TEST(TypeOverlay, HoldsNothingWhenTheSizesAreThoseOfTheModel) {
  Model m;
  m.set_opset("", 17);
  Graph& g = m.graph();
  Value* x = g.add_input("x", f32({Dim(2), Dim(3)}));
  Value* y = g.add_node("Add", {g.add_node("Relu", {x}, {"r"}, "relu")->output(0), x}, {"y"}, "add")->output(0);
  g.add_output(y);
  tether::ops::infer_shapes(m);

  TypeOverlay same;
  same.set(*x, f32({Dim(2), Dim(3)}));
  tether::ops::infer_shapes(m, overwrite(), same);
  EXPECT_EQ(same.size(), 0u);
  expect_type(same.type_of(*y), {Dim(2), Dim(3)}, "y");
}

TEST(TypeOverlay, ContradictionsAreShapeErrorsNamingTheNode) {
  Model m;
  m.set_opset("", 17);
  Graph& g = m.graph();
  Value* a = g.add_input("a", f32({Dim::symbol("N"), Dim(3)}));
  Value* b = g.add_input("b", f32({Dim(4), Dim(3)}));
  g.add_output(g.add_node("Add", {a, b}, {"y"}, "sum")->output(0));
  tether::ops::infer_shapes(m);

  TypeOverlay types;
  types.set(*a, f32({Dim(2), Dim(3)}));
  try {
    tether::ops::infer_shapes(m, overwrite(), types);
    FAIL() << "adding [2, 3] to [4, 3] was accepted";
  } catch (const tether::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'sum'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(a->type().shape()[0] == Dim::symbol("N"));
}

}  // namespace
