// Model opsets, Attribute kinds and typed access, ValueType printing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tether/error.h"
#include "tether/model.h"

namespace {

using namespace tether::ir;

TEST(Model, OpsetTreatsAiOnnxAsTheDefaultDomain) {
  Model m;
  EXPECT_EQ(m.opset(""), -1);
  m.set_opset("ai.onnx", 17);
  EXPECT_EQ(m.opset(""), 17);
  EXPECT_EQ(m.opset("ai.onnx"), 17);
  m.set_opset("", 19);
  ASSERT_EQ(m.opset_imports.size(), 1u);
  EXPECT_EQ(m.opset("ai.onnx"), 19);
  m.set_opset("com.microsoft", 1);
  EXPECT_EQ(m.opset_imports.size(), 2u);
  EXPECT_EQ(m.opset("com.microsoft"), 1);
  EXPECT_EQ(m.opset("ai.onnx.ml"), -1);
}

TEST(Model, NewModelHasAnEmptyMainGraphAndIrVersion10) {
  Model m;
  EXPECT_EQ(m.ir_version, 10);
  EXPECT_EQ(m.graph().num_nodes(), 0u);
  EXPECT_EQ(m.graph().parent(), nullptr);
}

TEST(Model, MovingAModelKeepsItsGraph) {
  Model a;
  Value* x = a.graph().add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({1})));
  a.graph().add_node("Relu", {x}, {"y"}, "relu");
  Model b = std::move(a);
  ASSERT_EQ(b.graph().num_nodes(), 1u);
  EXPECT_EQ(b.graph().nodes()[0]->input(0), x);
  EXPECT_EQ(x->graph(), &b.graph());
}

TEST(Attribute, FactoriesSetKindAndValue) {
  EXPECT_EQ(Attribute::f("a", 1.5f).kind(), AttrKind::kFloat);
  EXPECT_EQ(Attribute::f("a", 1.5f).as_float(), 1.5f);
  EXPECT_EQ(Attribute::i("a", -3).as_int(), -3);
  EXPECT_EQ(Attribute::s("a", "x").as_string(), "x");
  EXPECT_EQ(Attribute::ints("a", {1, 2}).as_ints(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Attribute::floats("a", {0.5f}).as_floats(), (std::vector<float>{0.5f}));
  EXPECT_EQ(Attribute::strings("a", {"p", "q"}).as_strings(), (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(Attribute::tensor("a", Tensor::zeros(DType::kInt8, {2})).as_tensor().nbytes(), 2);
  auto g = std::make_shared<Graph>("body");
  EXPECT_EQ(Attribute::graph("a", g).as_graph(), g);
  EXPECT_EQ(Attribute::graphs("a", {g, g}).as_graphs().size(), 2u);
  EXPECT_EQ(Attribute::type("a", ValueType::tensor(DType::kInt64)).as_type().dtype(), DType::kInt64);
  EXPECT_EQ(Attribute::types("a", {ValueType(), ValueType()}).kind(), AttrKind::kTypeProtos);
  EXPECT_EQ(Attribute::tensors("a", {}).kind(), AttrKind::kTensors);
  EXPECT_EQ(Attribute::sparse_tensor("a", SparseTensor{}).kind(), AttrKind::kSparseTensor);
  EXPECT_EQ(Attribute::sparse_tensors("a", {}).kind(), AttrKind::kSparseTensors);
}

TEST(Attribute, WrongKindAccessIsAModelErrorNamingTheAttribute) {
  const Attribute a = Attribute::i("group", 2);
  try {
    a.as_float();
    FAIL() << "expected a ModelError";
  } catch (const tether::ModelError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("group"), std::string::npos) << msg;
    EXPECT_NE(msg.find("int"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float"), std::string::npos) << msg;
  }
  EXPECT_THROW(a.as_ints(), tether::ModelError);
  EXPECT_THROW(a.as_graph(), tether::ModelError);
  EXPECT_THROW(Attribute().as_int(), tether::ModelError);
}

TEST(Attribute, ReferenceHasAKindButNoValue) {
  const Attribute r = Attribute::reference("alpha", AttrKind::kFloat, "scale");
  EXPECT_EQ(r.kind(), AttrKind::kFloat);
  EXPECT_EQ(r.ref_attr_name(), "scale");
  try {
    r.as_float();
    FAIL() << "expected a ModelError";
  } catch (const tether::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("scale"), std::string::npos) << e.what();
  }
}

TEST(Attribute, KindNamesFollowOnnx) {
  EXPECT_EQ(attr_kind_name(AttrKind::kFloat), "float");
  EXPECT_EQ(attr_kind_name(AttrKind::kInts), "ints");
  EXPECT_EQ(attr_kind_name(AttrKind::kGraphs), "graphs");
  EXPECT_EQ(attr_kind_name(AttrKind::kSparseTensor), "sparse_tensor");
  EXPECT_EQ(attr_kind_name(AttrKind::kTypeProtos), "type_protos");
  EXPECT_EQ(static_cast<int>(AttrKind::kTypeProtos), 14);
}

TEST(ValueType, ToStringDescribesEveryKind) {
  const ValueType t = ValueType::tensor(DType::kFloat32, Shape({Dim::symbol("batch"), Dim(10)}));
  EXPECT_EQ(t.to_string(), "float32[batch, 10]");
  EXPECT_EQ(ValueType::tensor(DType::kInt64).to_string(), "int64[...]");
  EXPECT_EQ(ValueType::sequence(t).to_string(), "seq(float32[batch, 10])");
  EXPECT_EQ(ValueType::map(DType::kString, ValueType::tensor(DType::kFloat32, Shape::of({}))).to_string(),
            "map(string, float32[])");
  EXPECT_EQ(ValueType::optional(t).to_string(), "optional(float32[batch, 10])");
  EXPECT_EQ(ValueType::sparse_tensor(DType::kFloat64, Shape::of({3})).to_string(), "sparse(float64[3])");
  EXPECT_EQ(ValueType::opaque("com.example", "Thing").to_string(), "opaque(com.example.Thing)");
  EXPECT_EQ(ValueType().to_string(), "?");
}

TEST(ValueType, ElementOfATypeWithoutOneIsAnInternalError) {
  EXPECT_THROW(ValueType::tensor(DType::kFloat32).element(), tether::InternalError);
  EXPECT_EQ(ValueType::sequence(ValueType::tensor(DType::kInt8)).element().dtype(), DType::kInt8);
  EXPECT_EQ(ValueType::map(DType::kInt64, ValueType::tensor(DType::kInt8)).dtype(), DType::kInt64);
}

}  // namespace

TEST(Attribute, GraphAttributesRejectNullGraphs) {
  using tether::ir::Attribute;
  EXPECT_THROW(Attribute::graph("then_branch", nullptr), tether::ArgumentError);
  EXPECT_THROW(Attribute::graphs("branches", {std::make_shared<tether::ir::Graph>("a"), nullptr}),
               tether::ArgumentError);
}
