// GraphBuilder: models built node by node run to the values plain loops compute, and every
// mistake is refused at the call that makes it, with a message naming the node and input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tether/builder.h"
#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"
#include "test_util.h"

namespace {

using namespace tether;
using ir::DType;
using ir::Dim;
using ir::Shape;
using ir::Tensor;

constexpr int64_t kIn = 5, kHidden = 7, kOut = 3;

Tensor filled(std::vector<int64_t> dims, float scale, float offset) {
  Tensor t = Tensor::zeros(DType::kFloat32, std::move(dims));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = scale * std::sin(0.7f * static_cast<float>(i) + offset);
  return t;
}

// x[batch, 5] -> MatMul(w1) -> Add(b1) -> Relu -> Gemm(w2, b2) -> y[batch, 3]
struct Mlp {
  Tensor w1 = filled({kIn, kHidden}, 0.5f, 0.1f);
  Tensor b1 = filled({kHidden}, 0.2f, 1.3f);
  Tensor w2 = filled({kHidden, kOut}, 0.4f, 2.2f);
  Tensor b2 = filled({kOut}, 0.3f, 0.4f);

  GraphBuilder builder() const {
    GraphBuilder b("mlp");
    b.input("x", DType::kFloat32, Shape({Dim::symbol("batch"), Dim(kIn)}));
    b.initializer("w1", w1);
    b.initializer("b1", b1);
    b.initializer("w2", w2);
    b.initializer("b2", b2);
    auto h = b.node("MatMul", {"x", "w1"}, {}, {.name = "fc1"});
    auto a = b.node("Add", {h[0], "b1"}, {}, {.name = "fc1.bias"});
    auto r = b.node("Relu", {a[0]});
    b.node("Gemm", {r[0], "w2", "b2"}, {ir::Attribute::f("alpha", 1.0f)}, {.name = "fc2", .outputs = {"y"}});
    b.output("y");
    return b;
  }

  // The same network in plain float64 loops.
  std::vector<double> forward(const std::vector<float>& x, int64_t batch) const {
    std::vector<double> y(static_cast<size_t>(batch * kOut));
    for (int64_t n = 0; n < batch; ++n) {
      std::vector<double> h(kHidden);
      for (int64_t j = 0; j < kHidden; ++j) {
        double s = b1.data<float>()[j];
        for (int64_t k = 0; k < kIn; ++k) s += double(x[n * kIn + k]) * w1.data<float>()[k * kHidden + j];
        h[j] = std::max(s, 0.0);
      }
      for (int64_t j = 0; j < kOut; ++j) {
        double s = b2.data<float>()[j];
        for (int64_t k = 0; k < kHidden; ++k) s += h[k] * w2.data<float>()[k * kOut + j];
        y[n * kOut + j] = s;
      }
    }
    return y;
  }
};

void expect_message(const std::exception& e, const std::vector<std::string>& parts) {
  const std::string what = e.what();
  for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
}

template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    expect_message(e, parts);
  }
}

TEST(GraphBuilder, MlpRunsToTheValuesOfPlainLoopsAtTwoBatchSizes) {
  Mlp mlp;
  GraphBuilder b = mlp.builder();
  EXPECT_EQ(b.shape("y").to_string(), "[batch, 3]");
  auto session = engine::compile(b.build(), {.threads = 1});
  for (int64_t batch : {1, 4}) {
    Tensor x = filled({batch, kIn}, 1.5f, 0.9f);
    std::vector<float> xs(x.data<float>(), x.data<float>() + x.num_elements());
    std::vector<Tensor> out = session->run({{"x", x}});
    std::vector<double> expected = mlp.forward(xs, batch);
    ASSERT_EQ(out.at(0).dims(), (std::vector<int64_t>{batch, kOut}));
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(out[0].data<float>()[i], expected[i], 1e-5) << i;
  }
}

TEST(GraphBuilder, SavedFileLoadsWithProducerOpsetAndSymbolicBatch) {
  Mlp mlp;
  tether_test::TempDir dir;
  mlp.builder().save(dir.file("mlp.onnx"));
  ir::Model m = ir::load_model(dir.file("mlp.onnx"));
  EXPECT_EQ(m.producer_name, "tether");
  EXPECT_EQ(m.opset(""), ops::kDefaultBuilderOpset);
  EXPECT_EQ(m.ir_version, 8);  // the IR version ONNX released with opset 17
  ASSERT_EQ(m.graph().outputs().size(), 1u);
  EXPECT_EQ(m.graph().outputs()[0]->type().to_string(), "float32[batch, 3]");
  EXPECT_EQ(m.graph().num_nodes(), 4u);
}

TEST(GraphBuilder, UnknownInputNameIsAGraphErrorNamingNodeAndInput) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape::of({2, 3}));
  expect_error<GraphError>([&] { b.node("Relu", {"xx"}, {}, {.name = "act"}); }, {"Relu 'act'", "input 0 'xx'"});
}

TEST(GraphBuilder, MatMulShapeMismatchIsAShapeErrorWithBothShapes) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape({Dim::symbol("batch"), Dim(784)}));
  b.initializer("w", Tensor::zeros(DType::kFloat32, {100, 10}));
  expect_error<ShapeError>([&] { b.node("MatMul", {"x", "w"}, {}, {.name = "fc1"}); },
                           {"MatMul 'fc1'", "[batch, 784]", "[100, 10]"});
  // The failed node left nothing behind: the same name works once the weight fits.
  b.initializer("w_ok", Tensor::zeros(DType::kFloat32, {784, 10}));
  auto y = b.node("MatMul", {"x", "w_ok"}, {}, {.name = "fc1"});
  EXPECT_EQ(b.shape(y[0]).to_string(), "[batch, 10]");
}

TEST(GraphBuilder, AddOfFloatAndInt64IsAShapeErrorNamingBothTypes) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape::of({2}));
  b.input("i", DType::kInt64, Shape::of({2}));
  expect_error<ShapeError>([&] { b.node("Add", {"x", "i"}, {}, {.name = "sum"}); },
                           {"Add 'sum'", "'x' is float32", "'i' is int64"});
}

TEST(GraphBuilder, DuplicateValueAndNodeNamesAreGraphErrors) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape::of({2}));
  expect_error<GraphError>([&] { b.input("x", DType::kFloat32, Shape::of({2})); }, {"'x'", "graph input"});
  expect_error<GraphError>([&] { b.initializer("x", Tensor::zeros(DType::kFloat32, {2})); }, {"'x'"});
  b.node("Relu", {"x"}, {}, {.name = "act", .outputs = {"y"}});
  expect_error<GraphError>([&] { b.node("Relu", {"x"}, {}, {.name = "act"}); }, {"'act'", "exists already"});
  expect_error<GraphError>([&] { b.node("Relu", {"x"}, {}, {.outputs = {"y"}}); }, {"output 'y'", "Relu 'act'"});
}

TEST(GraphBuilder, UnknownOnnxOpIsRefusedAndCustomDomainIsImported) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape::of({2}));
  expect_error<ArgumentError>([&] { b.node("Rleu", {"x"}); }, {"Rleu", "custom op"});
  auto y = b.node("MyOp", {"x"}, {}, {.domain = "com.example"});
  EXPECT_TRUE(b.type(y[0]).is_unknown());
  b.output(y[0]);
  EXPECT_EQ(b.build().opset("com.example"), 1);
}

TEST(GraphBuilder, AttributeOfTheWrongKindIsAnArgumentErrorNamingIt) {
  GraphBuilder b;
  b.input("x", DType::kFloat32, Shape::of({2, 3}));
  expect_error<ArgumentError>([&] { b.node("Softmax", {"x"}, {ir::Attribute::s("axis", "last")}, {.name = "sm"}); },
                              {"Softmax 'sm'", "axis"});
}

TEST(GraphBuilder, OutputOfAnUnknownNameAndBuildWithoutOutputsAreGraphErrors) {
  GraphBuilder b("g");
  b.input("x", DType::kFloat32, Shape::of({2}));
  expect_error<GraphError>([&] { b.output("nope"); }, {"'nope'"});
  expect_error<GraphError>([&] { b.build(); }, {"graph 'g'", "no outputs"});
  expect_error<ArgumentError>([&] { b.shape("nope"); }, {"'nope'"});
}

}  // namespace
