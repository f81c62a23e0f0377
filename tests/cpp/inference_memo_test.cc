// ops::infer_shapes with an InferenceMemo (what a session's plans use from one decoding step to
// the next): the types equal those of an inference without the memo, for lengths that grow,
// repeat and shrink; only the nodes a changed input reaches run their rules again; a failed
// inference leaves a memo that the next run does not trust.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/type_overlay.h"
#include "tether/error.h"
#include "tether/model.h"
#include "tether/shape_inference.h"

namespace {

using namespace tether::ir;
using tether::ops::InferenceMemo;
using tether::ops::InferenceOptions;
using tether::ops::TypeOverlay;

ValueType f32(std::vector<Dim> dims) { return ValueType::tensor(DType::kFloat32, Shape(std::move(dims))); }

// x [1, 4] -> Relu -> Add x -> b (does not depend on the cache); past [1, L, 4] and b
// unsqueezed -> Concat -> c [1, L + 1, 4]; Shape(c)[1] -> Range -> r [L + 1] (a shape value);
// ReduceSum over the cache -> d [1, 4] -> Add b -> y.
struct Net {
  Model m;
  Value* x;
  Value* past;
  std::vector<Value*> all;

  Net() {
    m.set_opset("", 17);
    Graph& g = m.graph();
    x = g.add_input("x", f32({Dim(1), Dim(4)}));
    past = g.add_input("past", f32({Dim(1), Dim::symbol("L"), Dim(4)}));
    auto ints = [&](std::vector<int64_t> v, const char* name) {
      Tensor t = Tensor::zeros(DType::kInt64, {static_cast<int64_t>(v.size())});
      for (size_t k = 0; k < v.size(); ++k) t.mutable_data<int64_t>()[k] = v[k];
      return g.add_initializer(std::move(t), name);
    };
    auto scalar = [&](int64_t v, const char* name) {
      Tensor t = Tensor::zeros(DType::kInt64, {});
      t.mutable_data<int64_t>()[0] = v;
      return g.add_initializer(std::move(t), name);
    };
    Value* a = g.add_node("Relu", {x}, {"a"}, "relu")->output(0);
    Value* b = g.add_node("Add", {a, x}, {"b"}, "add_b")->output(0);
    Value* bu = g.add_node("Unsqueeze", {b, ints({1}, "axis1")}, {"bu"}, "unsqueeze")->output(0);
    Node* concat = g.add_node("Concat", {past, bu}, {"c"}, "concat");
    concat->set_attr(Attribute::i("axis", 1));
    Value* c = concat->output(0);
    Value* s = g.add_node("Shape", {c}, {"s"}, "shape")->output(0);
    Value* n = g.add_node("Gather", {s, scalar(1, "one")}, {"n"}, "gather")->output(0);
    Value* r = g.add_node("Range", {scalar(0, "zero"), n, g.find("one")}, {"r"}, "range")->output(0);
    Node* sum = g.add_node("ReduceSum", {c, ints({1}, "axes")}, {"d"}, "sum");
    sum->set_attr(Attribute::i("keepdims", 0));
    Value* d = sum->output(0);
    Value* y = g.add_node("Add", {d, b}, {"y"}, "add_y")->output(0);
    g.add_output(y);
    g.add_output(r);
    all = {a, b, bu, c, s, n, r, d, y};
    tether::ops::infer_shapes(m);
  }

  TypeOverlay inputs(int64_t length, int64_t width = 4) const {
    TypeOverlay t;
    t.set(*x, f32({Dim(1), Dim(width)}));
    t.set(*past, f32({Dim(1), Dim(length), Dim(4)}));
    return t;
  }
};

InferenceOptions overwrite() {
  InferenceOptions o;
  o.overwrite = true;
  return o;
}

TEST(InferenceMemo, GivesTheTypesOfAFreshInferenceForLengthsThatGrowRepeatAndShrink) {
  Net net;
  InferenceMemo memo;
  for (int64_t length : {0, 3, 4, 4, 9, 2, 3}) {
    TypeOverlay fresh = net.inputs(length);
    tether::ops::infer_shapes(net.m, overwrite(), fresh);
    TypeOverlay types = net.inputs(length);
    tether::ops::infer_shapes(net.m, overwrite(), types, memo);
    for (const Value* v : net.all)
      EXPECT_EQ(memo.types.type_of(*v).to_string(), fresh.type_of(*v).to_string()) << v->name() << " at length " << length;
    EXPECT_EQ(memo.types.type_of(*net.all[6]).to_string(), "int64[" + std::to_string(length + 1) + "]");
  }
}

TEST(InferenceMemo, RunsOnlyTheRulesThatAChangedInputReaches) {
  Net net;
  InferenceMemo memo;
  TypeOverlay types = net.inputs(5);
  tether::ops::infer_shapes(net.m, overwrite(), types, memo);
  EXPECT_EQ(memo.nodes_reused, 0);  // nothing to start from
  EXPECT_EQ(memo.nodes_inferred, 9);
  types = net.inputs(6);
  tether::ops::infer_shapes(net.m, overwrite(), types, memo);
  // Relu, Add and Unsqueeze read only x, and y's Add reads b and d, whose [1, 4] the longer
  // cache leaves as it was: those four as last time; Concat, Shape, Gather, Range, ReduceSum run.
  EXPECT_EQ(memo.nodes_reused, 4);
  EXPECT_EQ(memo.nodes_inferred, 5);
  types = net.inputs(6);
  tether::ops::infer_shapes(net.m, overwrite(), types, memo);
  EXPECT_EQ(memo.nodes_reused, 9);  // the same sizes: every node as last time
  EXPECT_EQ(memo.nodes_inferred, 0);
}

TEST(InferenceMemo, AFailedInferenceIsNotStartedFrom) {
  Net net;
  InferenceMemo memo;
  TypeOverlay types = net.inputs(5);
  tether::ops::infer_shapes(net.m, overwrite(), types, memo);
  types = net.inputs(5, 3);  // x [1, 3] cannot join a cache of width 4
  EXPECT_THROW(tether::ops::infer_shapes(net.m, overwrite(), types, memo), tether::ShapeError);
  types = net.inputs(7);
  tether::ops::infer_shapes(net.m, overwrite(), types, memo);
  EXPECT_EQ(memo.nodes_reused, 0);
  EXPECT_EQ(memo.types.type_of(*net.all[3]).to_string(), "float32[1, 8, 4]");
}

}  // namespace
