// ops::infer_shapes on small hand-built graphs, against shapes worked out by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tether/error.h"
#include "tether/shape_inference.h"

namespace {

using namespace tether::ir;

// The output size of a convolution or pooling window along one axis (ONNX's formula, floor mode).
int64_t conv_out(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin, int64_t pad_end) {
  return (in + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride + 1;
}

void expect_shape(const Value* v, const std::vector<Dim>& expected) {
  ASSERT_TRUE(v->type().is_tensor()) << v->name();
  const Shape& s = v->type().shape();
  ASSERT_TRUE(s.has_rank()) << v->name();
  ASSERT_EQ(s.rank(), expected.size()) << v->name() << " is " << s.to_string();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(s[i] == expected[i]) << v->name() << " dim " << i << ": " << s.to_string() << " vs expected "
                                     << expected[i].to_string();
}

constexpr int64_t kInH = 33, kInW = 30, kOut = 8, kKh = 3, kKw = 5;
constexpr int64_t kStrideH = 2, kStrideW = 3, kDilH = 1, kDilW = 2;
constexpr int64_t kPadTop = 1, kPadLeft = 2, kPadBottom = 1, kPadRight = 0;

// x[N, 3, 33, 30] -> Conv(8, 3x5, strides 2x3, dilations 1x2, pads 1,2,1,0) -> Relu -> Flatten -> Gemm(10)
struct Cnn {
  Model m;
  Node* conv;
  Node* relu;
  Node* flatten;
  Node* gemm;
  int64_t oh = conv_out(kInH, kKh, kStrideH, kDilH, kPadTop, kPadBottom);
  int64_t ow = conv_out(kInW, kKw, kStrideW, kDilW, kPadLeft, kPadRight);

  explicit Cnn(int64_t flatten_axis = 1) {
    m.set_opset("", 17);
    Graph& g = m.graph();
    Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(kInH), Dim(kInW)})));
    Value* w = g.add_initializer(Tensor::zeros(DType::kFloat32, {kOut, 3, kKh, kKw}), "w");
    Value* b = g.add_initializer(Tensor::zeros(DType::kFloat32, {kOut}), "b");
    conv = g.add_node("Conv", {x, w, b}, {"c"}, "conv");
    conv->set_attr(Attribute::ints("strides", {kStrideH, kStrideW}));
    conv->set_attr(Attribute::ints("dilations", {kDilH, kDilW}));
    conv->set_attr(Attribute::ints("pads", {kPadTop, kPadLeft, kPadBottom, kPadRight}));
    relu = g.add_node("Relu", {conv->output(0)}, {"r"}, "relu");
    flatten = g.add_node("Flatten", {relu->output(0)}, {"f"}, "flatten");
    flatten->set_attr(Attribute::i("axis", flatten_axis));
    const int64_t features = kOut * oh * ow;
    Value* fc_w = g.add_initializer(Tensor::zeros(DType::kFloat32, {10, features}), "fc_w");
    Value* fc_b = g.add_initializer(Tensor::zeros(DType::kFloat32, {10}), "fc_b");
    if (flatten_axis == 1) {
      gemm = g.add_node("Gemm", {flatten->output(0), fc_w, fc_b}, {"y"}, "fc");
      gemm->set_attr(Attribute::i("transB", 1));
      g.add_output(gemm->output(0));
    } else {
      g.add_output(flatten->output(0));
    }
  }
};

TEST(ShapeInference, ConvReluFlattenGemmCarriesTheSymbolicBatch) {
  Cnn net;
  // Worked by hand: H = (33 + 1 + 1 - 1*2 - 1) / 2 + 1 = 17, W = (30 + 2 + 0 - 2*4 - 1) / 3 + 1 = 8.
  ASSERT_EQ(net.oh, 17);
  ASSERT_EQ(net.ow, 8);
  const tether::ops::InferenceReport r = tether::ops::infer_shapes(net.m);
  const Dim n = Dim::symbol("N");
  expect_shape(net.conv->output(0), {n, Dim(8), Dim(17), Dim(8)});
  expect_shape(net.relu->output(0), {n, Dim(8), Dim(17), Dim(8)});
  expect_shape(net.flatten->output(0), {n, Dim(8 * 17 * 8)});
  expect_shape(net.gemm->output(0), {n, Dim(10)});
  EXPECT_EQ(net.gemm->output(0)->type().dtype(), DType::kFloat32);
  EXPECT_EQ(net.gemm->output(0)->type().shape()[0].param(), "N");
  EXPECT_EQ(r.nodes_inferred, 4);
  EXPECT_EQ(r.nodes_skipped, 0);
  EXPECT_TRUE(r.ops_without_inference.empty());
}

TEST(ShapeInference, FlattenAtAxisZeroMultipliesTheBatchSymbolIn) {
  Cnn net(0);
  tether::ops::infer_shapes(net.m);
  // [1, N * 8 * 17 * 8] = [1, 1088*N]
  expect_shape(net.flatten->output(0), {Dim(1), Dim::symbol("1088*N")});
}

TEST(ShapeInference, FlattenAtAxisTwoSplitsAfterTheChannels) {
  Cnn net(2);
  tether::ops::infer_shapes(net.m);
  expect_shape(net.flatten->output(0), {Dim::symbol("N") * Dim(8), Dim(17 * 8)});
}

TEST(ShapeInference, CeilModePoolKeepsPartialWindowsButNotOnesStartingInThePadding) {
  // MaxPool 2x2, stride 2, on H = 5 with one row of padding above and below, W = 7 unpadded.
  // H windows start at -1, 1, 3 (floor: 3) and, in ceil mode, also at 5, which lies wholly in
  // the end padding and is dropped: 3 either way.
  // W windows start at 0, 2, 4 (floor: 3); ceil mode adds the one at 6, which covers real data: 4.
  for (int64_t ceil : {0, 1}) {
    Model m;
    Graph& g = m.graph();
    Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({1, 1, 5, 7})));
    Node* pool = g.add_node("MaxPool", {x}, {"p"}, "pool");
    pool->set_attr(Attribute::ints("kernel_shape", {2, 2}));
    pool->set_attr(Attribute::ints("strides", {2, 2}));
    pool->set_attr(Attribute::ints("pads", {1, 0, 1, 0}));
    pool->set_attr(Attribute::i("ceil_mode", ceil));
    g.add_output(pool->output(0));
    tether::ops::infer_shapes(m);
    expect_shape(pool->output(0), {Dim(1), Dim(1), Dim(3), Dim(ceil ? 4 : 3)});
  }
}

TEST(ShapeInference, OpWithoutARuleIsSkippedAndReported) {
  Model m;
  Graph& g = m.graph();
  Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({2, 3})));
  Node* mystery = g.add_node("Mystery", {x}, {"y"}, "m", "com.example");
  Node* relu = g.add_node("Relu", {mystery->output(0)}, {"z"}, "relu");
  g.add_output(relu->output(0));
  const auto r = tether::ops::infer_shapes(m);
  EXPECT_EQ(r.nodes_skipped, 1);
  EXPECT_EQ(r.nodes_inferred, 1);
  EXPECT_EQ(r.ops_without_inference, (std::vector<std::string>{"com.example:Mystery"}));
  EXPECT_TRUE(mystery->output(0)->type().is_unknown());
}

TEST(ShapeInference, ChannelMismatchIsAShapeErrorNamingTheNode) {
  Model m;
  Graph& g = m.graph();
  Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({1, 3, 8, 8})));
  Value* w = g.add_initializer(Tensor::zeros(DType::kFloat32, {4, 5, 3, 3}), "w");
  Node* conv = g.add_node("Conv", {x, w}, {"y"}, "stem.conv");
  g.add_output(conv->output(0));
  try {
    tether::ops::infer_shapes(m);
    FAIL() << "expected a ShapeError";
  } catch (const tether::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("stem.conv"), std::string::npos) << e.what();
  }
}

TEST(ShapeInference, InferredShapeContradictingADeclaredOneIsAShapeError) {
  Model m;
  Graph& g = m.graph();
  Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({2, 3})));
  Node* relu = g.add_node("Relu", {x}, {"y"}, "relu");
  relu->output(0)->set_type(ValueType::tensor(DType::kFloat32, Shape::of({2, 4})));
  g.add_output(relu->output(0));
  EXPECT_THROW(tether::ops::infer_shapes(m), tether::ShapeError);
  tether::ops::InferenceOptions overwrite;
  overwrite.overwrite = true;
  tether::ops::infer_shapes(m, overwrite);
  expect_shape(relu->output(0), {Dim(2), Dim(3)});
}

}  // namespace
