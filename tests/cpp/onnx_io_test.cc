// ONNX reading and writing: a model built in C++ with every feature the format carries goes
// through serialize/load and save/load (inside, external, over itself) and must come back
// equal to what was built.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "tether/error.h"
#include "tether/onnx.h"

namespace {

using namespace tether::ir;
using tether_test::TempDir;
namespace of = tether_test::onnx_field;
namespace fs = std::filesystem;

// ---- the model --------------------------------------------------------------------------------

template <typename T>
Tensor tensor_of(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
  return Tensor::copy_of(dtype, std::move(dims), values.data(), static_cast<int64_t>(values.size() * sizeof(T)));
}

ValueType f32(std::vector<Dim> dims) { return ValueType::tensor(DType::kFloat32, Shape(std::move(dims))); }

// Sizes of the initializers at least 1024 bytes big: they go to the external file by default.
constexpr int64_t kBigBytes = 300 * 4, kOddBytes = 1037, kBig2Bytes = 200 * 8, kThenBiasBytes = 300 * 4;

std::shared_ptr<Graph> small_graph(const std::string& name) {
  auto g = std::make_shared<Graph>(name);
  Value* in = g->add_input(name + "_in", f32({Dim(1)}));
  Node* n = g->add_node("Identity", {in}, {name + "_out"}, name + "_id");
  g->add_output(n->output(0));
  return g;
}

SparseTensor sparse_of(const std::string& name) {
  SparseTensor sp;
  sp.values = tensor_of<float>(DType::kFloat32, {2}, {1.5f, -2.0f});
  sp.values.set_name(name);
  sp.indices = tensor_of<int64_t>(DType::kInt64, {2}, {1, 6});
  sp.dims = {2, 4};
  return sp;
}

Function add_twice() {
  Function f;
  f.name = "AddTwice";
  f.domain = "local.fn";
  f.attribute_names = {"alpha"};
  f.attribute_defaults = {Attribute::f("beta", 0.5f)};
  f.opset_imports = {{"", 18}};
  f.doc_string = "a + 2b";
  f.metadata = {{"fn.key", "fn.value"}};
  Graph& body = *f.body;
  Value* a = body.add_input("a", ValueType());
  Value* b = body.add_input("b", ValueType());
  Node* add1 = body.add_node("Add", {a, b}, {"s"}, "add1");
  body.declare("s", f32({Dim::symbol("n")}));
  Node* add2 = body.add_node("Add", {add1->output(0), b}, {"out"}, "add2");
  add2->set_attr(Attribute::reference("alpha", AttrKind::kFloat, "alpha"));
  body.add_output(add2->output(0));
  return f;
}

// A model with one of everything: symbolic and denoted dims, float16, string, int4 and sparse
// initializers, big initializers for external data (one in a subgraph), a Constant with a
// tensor attribute, an If whose branches capture an outer value (one returns it directly),
// a call to a local function, a node carrying every attribute kind, and metadata everywhere.
Model build_model() {
  Model m;
  m.ir_version = 9;
  m.producer_name = "tether-tests";
  m.producer_version = "0.0.1";
  m.domain = "test.models";
  m.model_version = 3;
  m.doc_string = "every feature the reader and writer carry";
  m.metadata = {{"author", "tests"}, {"purpose", "round trip"}};
  m.set_opset("", 18);
  m.set_opset("local.fn", 1);
  m.set_opset("test.attrs", 1);
  m.training_info = {std::string("\x0a\x02tr", 4)};
  m.device_configurations = {std::string("\x0a\x03" "cfg", 5)};
  m.functions.push_back(add_twice());

  Graph& g = m.graph();
  g.set_name("main");
  g.set_doc_string("main graph");
  g.metadata() = {{"graph.key", "graph.value"}};

  Dim batch = Dim::symbol("batch");
  batch.set_denotation("DATA_BATCH");
  ValueType xt = f32({batch, Dim(4)});
  xt.set_denotation("TENSOR");
  Value* x = g.add_input("x", xt);
  x->set_doc_string("the input");
  x->metadata() = {{"x.key", "x.value"}};
  Value* cond = g.add_input("cond", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));

  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[i] = 0.5f * static_cast<float>(i);
  Tensor wt = tensor_of(DType::kFloat32, {4, 3}, w);
  wt.set_doc_string("weights");
  wt.metadata() = {{"w.key", "w.value"}};
  Value* wv = g.add_initializer(wt, "w");
  // float16 1.0, 2.0, -2.0 as IEEE half bits.
  g.add_initializer(tensor_of<uint16_t>(DType::kFloat16, {3}, {0x3C00, 0x4000, 0xC000}), "b16");
  g.add_initializer(Tensor::strings({3}, {"cat", "", std::string("b\0n", 3)}), "labels");
  std::vector<float> big(300);
  for (int i = 0; i < 300; ++i) big[i] = 0.25f * static_cast<float>(i) - 7.0f;
  g.add_initializer(tensor_of(DType::kFloat32, {300}, big), "big");
  std::vector<uint8_t> odd(1037);
  for (size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<uint8_t>(i * 7);
  g.add_initializer(tensor_of(DType::kUInt8, {1037}, odd), "odd");
  std::vector<int64_t> big2(200);
  for (int64_t i = 0; i < 200; ++i) big2[i] = i * i - 100;
  g.add_initializer(tensor_of(DType::kInt64, {10, 20}, big2), "big2");
  g.add_initializer(tensor_of<uint8_t>(DType::kInt4, {3}, {0x21, 0x03}), "nib");  // 1, 2, 3
  g.add_initializer(Tensor::zeros(DType::kFloat32, {0, 5}), "empty");
  g.add_sparse_initializer(sparse_of("sp"), "sp");

  Node* konst = g.add_node("Constant", {}, {"c"}, "const");
  Tensor kv = tensor_of<int64_t>(DType::kInt64, {2}, {7, -9});
  kv.set_name("k");
  konst->set_attr(Attribute::tensor("value", kv));

  Node* mm = g.add_node("MatMul", {x, wv}, {"xw"}, "mm");
  Value* xw = mm->output(0);
  g.declare("xw", f32({batch, Dim(3)}));
  xw->set_doc_string("x times w");

  auto then_g = std::make_shared<Graph>("then_g");
  then_g->set_parent(&g);
  std::vector<float> tb(300, 0.125f);
  Value* then_bias = then_g->add_initializer(tensor_of(DType::kFloat32, {300}, tb), "then_bias");
  Node* then_add = then_g->add_node("Add", {xw, then_bias}, {"t"}, "then_add");
  then_add->output(0)->set_type(f32({batch, Dim(3)}));
  then_g->add_output(then_add->output(0));
  auto else_g = std::make_shared<Graph>("else_g");
  else_g->set_parent(&g);
  else_g->add_output(xw);  // a branch may return an outer value directly
  Node* iff = g.add_node("If", {cond}, {"if_out"}, "branch");
  iff->set_attr(Attribute::graph("then_branch", then_g));
  iff->set_attr(Attribute::graph("else_branch", else_g));

  Node* call = g.add_node("AddTwice", {iff->output(0), konst->output(0)}, {"y"}, "call", "local.fn");
  call->set_attr(Attribute::f("alpha", 2.0f));

  Node* ev = g.add_node("Everything", {x, nullptr, cond}, {"ev", ""}, "everything", "test.attrs");
  ev->set_overload("v2");
  ev->set_doc_string("carries every attribute kind");
  ev->metadata() = {{"node.key", "node.value"}};
  ev->device_configurations() = {std::string("\x0a\x01z", 3)};
  Attribute fa = Attribute::f("f", -1.25f);
  fa.set_doc_string("a float");
  ev->set_attr(fa);
  ev->set_attr(Attribute::i("i", -(int64_t{1} << 40)));
  ev->set_attr(Attribute::s("s", std::string("bin\0ary", 7)));
  ev->set_attr(Attribute::tensor("t", tensor_of<uint16_t>(DType::kBFloat16, {2}, {0x3F80, 0xC000})));
  ev->set_attr(Attribute::graph("g", small_graph("gg")));
  ev->set_attr(Attribute::floats("floats", {0.5f, -3.0f}));
  ev->set_attr(Attribute::ints("ints", {1, -2, 3}));
  ev->set_attr(Attribute::strings("strings", {"a", "", "c"}));
  ev->set_attr(Attribute::tensors("tensors", {Tensor::strings({1}, {"s"}), tensor_of<int32_t>(DType::kInt32, {2}, {5, -6})}));
  ev->set_attr(Attribute::graphs("graphs", {small_graph("g1"), small_graph("g2")}));
  ev->set_attr(Attribute::sparse_tensor("sparse", sparse_of("sv")));
  ev->set_attr(Attribute::sparse_tensors("sparses", {sparse_of("s1"), sparse_of("s2")}));
  ev->set_attr(Attribute::type("type", ValueType::sequence(f32({Dim::symbol("n"), Dim()}))));
  ev->set_attr(Attribute::types(
      "types", {ValueType::map(DType::kInt64, ValueType::tensor(DType::kString, Shape())),
                ValueType::optional(ValueType::tensor(DType::kInt8, Shape(std::vector<Dim>{}))),
                ValueType::opaque("com.example", "Thing"),
                ValueType::sparse_tensor(DType::kFloat64, Shape({Dim(3), Dim::symbol("2*k")}))}));

  g.add_output(call->output(0));
  g.add_output(ev->output(0));
  g.quantization_annotations().push_back({"xw", {{"SCALE_TENSOR", "s"}, {"ZERO_POINT_TENSOR", "z"}}});
  return m;
}

// ---- structural comparison: expected (what was built) vs actual (what was read) ----------------

void expect_same_type(const ValueType& e, const ValueType& a, const std::string& where);

void expect_same_shape(const Shape& e, const Shape& a, const std::string& where) {
  ASSERT_EQ(e.has_rank(), a.has_rank()) << where;
  if (!e.has_rank()) return;
  ASSERT_EQ(e.rank(), a.rank()) << where;
  for (size_t i = 0; i < e.rank(); ++i) {
    const Dim& ed = e[i];
    const Dim& ad = a[i];
    const std::string at = where + " dim " + std::to_string(i);
    EXPECT_EQ(ed.is_known(), ad.is_known()) << at;
    EXPECT_EQ(ed.is_symbolic(), ad.is_symbolic()) << at;
    EXPECT_EQ(ed.is_unknown(), ad.is_unknown()) << at;
    if (ed.is_known() && ad.is_known()) {
      EXPECT_EQ(ed.value(), ad.value()) << at;
    }
    EXPECT_EQ(ed.param(), ad.param()) << at;
    EXPECT_EQ(ed.denotation(), ad.denotation()) << at;
  }
}

void expect_same_type(const ValueType& e, const ValueType& a, const std::string& where) {
  ASSERT_EQ(e.kind(), a.kind()) << where;
  EXPECT_EQ(e.dtype(), a.dtype()) << where;
  EXPECT_EQ(e.denotation(), a.denotation()) << where;
  switch (e.kind()) {
    case ValueType::Kind::kTensor:
    case ValueType::Kind::kSparseTensor: expect_same_shape(e.shape(), a.shape(), where); break;
    case ValueType::Kind::kSequence:
    case ValueType::Kind::kOptional:
    case ValueType::Kind::kMap: expect_same_type(e.element(), a.element(), where + " element"); break;
    case ValueType::Kind::kOpaque:
      EXPECT_EQ(e.opaque_domain(), a.opaque_domain()) << where;
      EXPECT_EQ(e.opaque_name(), a.opaque_name()) << where;
      break;
    case ValueType::Kind::kUnknown: break;
  }
}

void expect_same_tensor(const Tensor& e, const Tensor& a, const std::string& where) {
  EXPECT_EQ(e.dtype(), a.dtype()) << where;
  EXPECT_EQ(e.dims(), a.dims()) << where;
  EXPECT_TRUE(e.same_data(a)) << where;
  EXPECT_EQ(e.name(), a.name()) << where;
  EXPECT_EQ(e.doc_string(), a.doc_string()) << where;
  EXPECT_EQ(e.metadata(), a.metadata()) << where;
}

void expect_same_sparse(const SparseTensor& e, const SparseTensor& a, const std::string& where) {
  expect_same_tensor(e.values, a.values, where + " values");
  expect_same_tensor(e.indices, a.indices, where + " indices");
  EXPECT_EQ(e.dims, a.dims) << where;
}

void expect_same_graph(const Graph& e, const Graph& a, const std::string& where, bool compare_name = true);

void expect_same_attr(const Attribute& e, const Attribute& a, const std::string& where) {
  const std::string at = where + " attribute '" + e.name() + "'";
  EXPECT_EQ(e.name(), a.name()) << at;
  ASSERT_EQ(e.kind(), a.kind()) << at;
  EXPECT_EQ(e.ref_attr_name(), a.ref_attr_name()) << at;
  EXPECT_EQ(e.doc_string(), a.doc_string()) << at;
  if (!e.ref_attr_name().empty()) return;
  switch (e.kind()) {
    case AttrKind::kFloat: EXPECT_EQ(e.as_float(), a.as_float()) << at; break;
    case AttrKind::kInt: EXPECT_EQ(e.as_int(), a.as_int()) << at; break;
    case AttrKind::kString: EXPECT_EQ(e.as_string(), a.as_string()) << at; break;
    case AttrKind::kTensor: expect_same_tensor(e.as_tensor(), a.as_tensor(), at); break;
    case AttrKind::kGraph: expect_same_graph(*e.as_graph(), *a.as_graph(), at); break;
    case AttrKind::kFloats: EXPECT_EQ(e.as_floats(), a.as_floats()) << at; break;
    case AttrKind::kInts: EXPECT_EQ(e.as_ints(), a.as_ints()) << at; break;
    case AttrKind::kStrings: EXPECT_EQ(e.as_strings(), a.as_strings()) << at; break;
    case AttrKind::kTensors:
      ASSERT_EQ(e.as_tensors().size(), a.as_tensors().size()) << at;
      for (size_t i = 0; i < e.as_tensors().size(); ++i) expect_same_tensor(e.as_tensors()[i], a.as_tensors()[i], at);
      break;
    case AttrKind::kGraphs:
      ASSERT_EQ(e.as_graphs().size(), a.as_graphs().size()) << at;
      for (size_t i = 0; i < e.as_graphs().size(); ++i) expect_same_graph(*e.as_graphs()[i], *a.as_graphs()[i], at);
      break;
    case AttrKind::kSparseTensor: expect_same_sparse(e.as_sparse_tensor(), a.as_sparse_tensor(), at); break;
    case AttrKind::kSparseTensors:
      ASSERT_EQ(e.as_sparse_tensors().size(), a.as_sparse_tensors().size()) << at;
      for (size_t i = 0; i < e.as_sparse_tensors().size(); ++i)
        expect_same_sparse(e.as_sparse_tensors()[i], a.as_sparse_tensors()[i], at);
      break;
    case AttrKind::kTypeProto: expect_same_type(e.as_type(), a.as_type(), at); break;
    case AttrKind::kTypeProtos:
      ASSERT_EQ(e.as_types().size(), a.as_types().size()) << at;
      for (size_t i = 0; i < e.as_types().size(); ++i) expect_same_type(e.as_types()[i], a.as_types()[i], at);
      break;
    case AttrKind::kUndefined: break;
  }
}

std::vector<std::string> value_names(const std::vector<Value*>& vs) {
  std::vector<std::string> out;
  for (const Value* v : vs) out.push_back(v ? v->name() : "");
  return out;
}

void expect_same_value_info(const Value& e, const Value& a, const std::string& where) {
  expect_same_type(e.type(), a.type(), where + " value '" + e.name() + "'");
  EXPECT_EQ(e.doc_string(), a.doc_string()) << where << " value '" << e.name() << "'";
  EXPECT_EQ(e.metadata(), a.metadata()) << where << " value '" << e.name() << "'";
}

void expect_same_graph(const Graph& e, const Graph& a, const std::string& where, bool compare_name) {
  const std::string at = where + " graph '" + e.name() + "'";
  if (compare_name) {
    EXPECT_EQ(e.name(), a.name()) << at;
  }
  EXPECT_EQ(e.doc_string(), a.doc_string()) << at;
  EXPECT_EQ(e.metadata(), a.metadata()) << at;

  ASSERT_EQ(value_names(e.inputs()), value_names(a.inputs())) << at;
  for (size_t i = 0; i < e.inputs().size(); ++i) expect_same_value_info(*e.inputs()[i], *a.inputs()[i], at);

  ASSERT_EQ(value_names(e.initializers()), value_names(a.initializers())) << at;
  for (size_t i = 0; i < e.initializers().size(); ++i)
    expect_same_tensor(e.initializers()[i]->initializer(), a.initializers()[i]->initializer(),
                       at + " initializer '" + e.initializers()[i]->name() + "'");
  ASSERT_EQ(value_names(e.sparse_initializers()), value_names(a.sparse_initializers())) << at;
  for (size_t i = 0; i < e.sparse_initializers().size(); ++i)
    expect_same_sparse(e.sparse_initializers()[i]->sparse_initializer(),
                       a.sparse_initializers()[i]->sparse_initializer(), at);

  const auto en = e.nodes();
  const auto an = a.nodes();
  ASSERT_EQ(en.size(), an.size()) << at;
  for (size_t k = 0; k < en.size(); ++k) {
    const Node& n = *en[k];
    const Node& m = *an[k];
    const std::string nat = at + " node " + n.describe();
    EXPECT_EQ(n.op_type(), m.op_type()) << nat;
    EXPECT_EQ(n.domain(), m.domain()) << nat;
    EXPECT_EQ(n.name(), m.name()) << nat;
    EXPECT_EQ(n.overload(), m.overload()) << nat;
    EXPECT_EQ(n.doc_string(), m.doc_string()) << nat;
    EXPECT_EQ(n.metadata(), m.metadata()) << nat;
    EXPECT_EQ(n.device_configurations(), m.device_configurations()) << nat;
    EXPECT_EQ(value_names(n.inputs()), value_names(m.inputs())) << nat;
    EXPECT_EQ(value_names(n.outputs()), value_names(m.outputs())) << nat;
    ASSERT_EQ(n.attributes().size(), m.attributes().size()) << nat;
    for (size_t i = 0; i < n.attributes().size(); ++i) expect_same_attr(n.attributes()[i], m.attributes()[i], nat);
    // Inputs resolve to the same graph level as in the built model (outer captures stay outer).
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      if (n.input(i) && m.input(i)) {
        EXPECT_EQ(n.input(i)->graph() == &e, m.input(i)->graph() == &a) << nat << " input " << i;
      }
    }
  }

  ASSERT_EQ(value_names(e.outputs()), value_names(a.outputs())) << at;
  for (size_t i = 0; i < e.outputs().size(); ++i) {
    const Value& ev = *e.outputs()[i];
    const Value& av = *a.outputs()[i];
    EXPECT_EQ(ev.graph() == &e, av.graph() == &a) << at << " output '" << ev.name() << "'";
    if (ev.graph() == &e) expect_same_value_info(ev, av, at);
  }

  // Every declared type comes back.
  for (const Value* v : e.values()) {
    if (!v->is_declared()) continue;
    const Value* w = a.find(v->name());
    ASSERT_NE(w, nullptr) << at << " value '" << v->name() << "'";
    EXPECT_TRUE(w->is_declared()) << at << " value '" << v->name() << "'";
    expect_same_value_info(*v, *w, at);
  }

  ASSERT_EQ(e.quantization_annotations().size(), a.quantization_annotations().size()) << at;
  for (size_t i = 0; i < e.quantization_annotations().size(); ++i) {
    EXPECT_EQ(e.quantization_annotations()[i].tensor_name, a.quantization_annotations()[i].tensor_name) << at;
    EXPECT_EQ(e.quantization_annotations()[i].quant_parameter_tensor_names,
              a.quantization_annotations()[i].quant_parameter_tensor_names) << at;
  }
}

void expect_same_model(const Model& e, const Model& a) {
  EXPECT_EQ(e.ir_version, a.ir_version);
  EXPECT_EQ(e.producer_name, a.producer_name);
  EXPECT_EQ(e.producer_version, a.producer_version);
  EXPECT_EQ(e.domain, a.domain);
  EXPECT_EQ(e.model_version, a.model_version);
  EXPECT_EQ(e.doc_string, a.doc_string);
  EXPECT_EQ(e.metadata, a.metadata);
  ASSERT_EQ(e.opset_imports.size(), a.opset_imports.size());
  for (size_t i = 0; i < e.opset_imports.size(); ++i) {
    EXPECT_EQ(e.opset_imports[i].domain, a.opset_imports[i].domain);
    EXPECT_EQ(e.opset_imports[i].version, a.opset_imports[i].version);
  }
  EXPECT_EQ(e.training_info, a.training_info);
  EXPECT_EQ(e.device_configurations, a.device_configurations);
  ASSERT_EQ(e.functions.size(), a.functions.size());
  for (size_t i = 0; i < e.functions.size(); ++i) {
    const Function& ef = e.functions[i];
    const Function& af = a.functions[i];
    const std::string at = "function '" + ef.name + "'";
    EXPECT_EQ(ef.name, af.name) << at;
    EXPECT_EQ(ef.domain, af.domain) << at;
    EXPECT_EQ(ef.overload, af.overload) << at;
    EXPECT_EQ(ef.attribute_names, af.attribute_names) << at;
    ASSERT_EQ(ef.attribute_defaults.size(), af.attribute_defaults.size()) << at;
    for (size_t k = 0; k < ef.attribute_defaults.size(); ++k)
      expect_same_attr(ef.attribute_defaults[k], af.attribute_defaults[k], at);
    ASSERT_EQ(ef.opset_imports.size(), af.opset_imports.size()) << at;
    for (size_t k = 0; k < ef.opset_imports.size(); ++k) {
      EXPECT_EQ(ef.opset_imports[k].domain, af.opset_imports[k].domain) << at;
      EXPECT_EQ(ef.opset_imports[k].version, af.opset_imports[k].version) << at;
    }
    EXPECT_EQ(ef.doc_string, af.doc_string) << at;
    EXPECT_EQ(ef.metadata, af.metadata) << at;
    expect_same_graph(*ef.body, *af.body, at, /*compare_name=*/false);
  }
  expect_same_graph(e.graph(), a.graph(), "model");
}

// Spot checks of a read model against literal values, independent of the comparison above.
void expect_literal_values(const Model& m) {
  const Graph& g = m.graph();
  const Value* b16 = g.find("b16");
  ASSERT_NE(b16, nullptr);
  ASSERT_EQ(b16->initializer().dtype(), DType::kFloat16);
  const uint16_t* h = b16->initializer().data<uint16_t>();
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x4000);
  EXPECT_EQ(h[2], 0xC000);
  EXPECT_EQ(g.find("labels")->initializer().string_values(),
            (std::vector<std::string>{"cat", "", std::string("b\0n", 3)}));
  EXPECT_EQ(g.find("big")->initializer().data<float>()[299], 0.25f * 299 - 7.0f);
  EXPECT_EQ(g.find("big2")->initializer().data<int64_t>()[199], 199 * 199 - 100);
  EXPECT_EQ(g.find("nib")->initializer().nbytes(), 2);
  const Tensor& k = g.find("c")->producer()->attr("value")->as_tensor();
  EXPECT_EQ(k.data<int64_t>()[0], 7);
  EXPECT_EQ(k.data<int64_t>()[1], -9);
  // The If branches read xw from the main graph, and that use is recorded on it.
  const Value* xw = g.find("xw");
  const Node* iff = g.find("if_out")->producer();
  const Graph& then_g = *iff->attr("then_branch")->as_graph();
  const Graph& else_g = *iff->attr("else_branch")->as_graph();
  EXPECT_EQ(then_g.parent(), &g);
  ASSERT_EQ(else_g.outputs().size(), 1u);
  EXPECT_EQ(else_g.outputs()[0], xw);
  const Node* then_add = then_g.find("t")->producer();
  ASSERT_EQ(then_add->input(0), xw);
  bool recorded = false;
  for (const Use& u : xw->uses()) recorded |= u.node == then_add && u.index == 0;
  EXPECT_TRUE(recorded);
  EXPECT_EQ(g.find("x")->type().shape()[0].param(), "batch");
  EXPECT_EQ(g.find("x")->type().shape()[0].denotation(), "DATA_BATCH");
}

// ---- what the saved file says about external data, read with the test's own wire reader ------

struct ExternalRef {
  std::string name, location;
  int64_t offset = -1, length = -1;
  bool has_raw_data = false;
};

void collect_external(const std::string& graph_bytes, std::vector<ExternalRef>& out, std::set<std::string>& inside);

void collect_from_tensor(const std::string& tensor, std::vector<ExternalRef>& out, std::set<std::string>& inside) {
  ExternalRef r;
  bool external = false;
  for (const auto& f : tether_test::parse_fields(tensor)) {
    if (f.number == of::kTensorName) r.name = f.payload;
    if (f.number == of::kTensorRawData) r.has_raw_data = true;
    if (f.number == of::kTensorDataLocation) external = f.value == 1;
    if (f.number == of::kTensorExternalData) {
      std::string key, value;
      for (const auto& e : tether_test::parse_fields(f.payload)) {
        if (e.number == of::kEntryKey) key = e.payload;
        if (e.number == of::kEntryValue) value = e.payload;
      }
      if (key == "location") r.location = value;
      if (key == "offset") r.offset = std::stoll(value);
      if (key == "length") r.length = std::stoll(value);
    }
  }
  if (external) out.push_back(r);
  else inside.insert(r.name);
}

void collect_external(const std::string& graph_bytes, std::vector<ExternalRef>& out, std::set<std::string>& inside) {
  for (const auto& f : tether_test::parse_fields(graph_bytes)) {
    if (f.number == of::kGraphInitializer) collect_from_tensor(f.payload, out, inside);
    if (f.number == of::kGraphNode)
      for (const auto& attr : tether_test::fields_numbered(f.payload, of::kNodeAttribute))
        for (const auto& g : tether_test::fields_numbered(attr.payload, of::kAttributeG))
          collect_external(g.payload, out, inside);
  }
}

std::vector<ExternalRef> external_refs(const std::string& model_path, std::set<std::string>* inside_out = nullptr) {
  const std::string bytes = tether_test::read_file(model_path);
  const auto graphs = tether_test::fields_numbered(bytes, of::kModelGraph);
  EXPECT_EQ(graphs.size(), 1u);
  std::vector<ExternalRef> out;
  std::set<std::string> inside;
  for (const auto& g : graphs) collect_external(g.payload, out, inside);
  if (inside_out) *inside_out = inside;
  return out;
}

const Tensor& initializer_named(const Model& m, const std::string& name) {
  if (const Value* v = m.graph().find(name)) return v->initializer();
  for (const Node* n : m.graph().nodes())
    if (const Attribute* a = n->attr("then_branch"))
      if (const Value* v = a->as_graph()->find(name)) return v->initializer();
  throw std::runtime_error("no initializer " + name);
}

// Checks the layout of an external data file against the tensors of `built`.
void expect_external_layout(const Model& built, const std::string& model_path, const std::string& data_name,
                            int64_t alignment, const std::set<std::string>& expected_external) {
  std::set<std::string> inside;
  const auto refs = external_refs(model_path, &inside);
  std::set<std::string> names;
  for (const auto& r : refs) names.insert(r.name);
  EXPECT_EQ(names, expected_external);
  const std::string data_path = (fs::path(model_path).parent_path() / data_name).string();
  ASSERT_TRUE(fs::exists(data_path)) << data_path;
  const std::string data = tether_test::read_file(data_path);
  int64_t end = 0;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& r : refs) {
    EXPECT_EQ(r.location, data_name) << r.name;
    EXPECT_FALSE(r.has_raw_data) << r.name;
    EXPECT_EQ(r.offset % alignment, 0) << r.name << " at " << r.offset;
    const Tensor& t = initializer_named(built, r.name);
    EXPECT_EQ(r.length, t.nbytes()) << r.name;
    ASSERT_LE(r.offset + r.length, static_cast<int64_t>(data.size())) << r.name;
    // The bytes in the file are the tensor's bytes.
    EXPECT_EQ(std::memcmp(data.data() + r.offset, t.raw_data(), static_cast<size_t>(t.nbytes())), 0) << r.name;
    spans.emplace_back(r.offset, r.offset + r.length);
    end = std::max(end, r.offset + r.length);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlapping tensors";
  EXPECT_EQ(static_cast<int64_t>(data.size()), end);
}

// ---- tests --------------------------------------------------------------------------------------

TEST(OnnxIo, BuiltModelIsValid) {
  Model m = build_model();
  EXPECT_NO_THROW(m.graph().validate());
}

TEST(OnnxIo, SerializeThenLoadFromBytesGivesTheSameModel) {
  const Model built = build_model();
  const std::string bytes = serialize_model(built);
  const Model read = load_model_from_bytes(bytes.data(), bytes.size());
  expect_same_model(built, read);
  expect_literal_values(read);
  EXPECT_EQ(read.source_path, "");
}

TEST(OnnxIo, LoadFromBytesCopiesSoTheBytesMayBeFreed) {
  const Model built = build_model();
  auto bytes = std::make_unique<std::string>(serialize_model(built));
  const Model read = load_model_from_bytes(bytes->data(), bytes->size());
  std::memset(bytes->data(), 0xEE, bytes->size());
  bytes.reset();
  expect_same_model(built, read);
  expect_literal_values(read);
}

TEST(OnnxIo, SerializedModelStartsWithIrVersionAndHasOneGraph) {
  // Read with the test's own wire reader, not tether's.
  const Model built = build_model();
  const std::string bytes = serialize_model(built);
  const auto ir = tether_test::fields_numbered(bytes, of::kModelIrVersion);
  ASSERT_EQ(ir.size(), 1u);
  EXPECT_EQ(ir[0].value, 9u);
  const auto graphs = tether_test::fields_numbered(bytes, of::kModelGraph);
  ASSERT_EQ(graphs.size(), 1u);
  const auto names = tether_test::fields_numbered(graphs[0].payload, of::kGraphName);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].payload, "main");
  // Every initializer keeps its data inside, in raw_data or (strings) string_data.
  std::set<std::string> inside;
  std::vector<ExternalRef> refs;
  collect_external(graphs[0].payload, refs, inside);
  EXPECT_TRUE(refs.empty());
  EXPECT_EQ(inside, (std::set<std::string>{"w", "b16", "labels", "big", "odd", "big2", "nib", "empty", "then_bias"}));
}

TEST(OnnxIo, OutOfOrderGraphIsWrittenInTopologicalOrder) {
  Model m;
  m.set_opset("", 18);
  Graph& g = m.graph();
  Value* x = g.add_input("x", f32({Dim(2)}));
  Node* second = g.add_node("Relu", {}, {"b"}, "second");
  Node* first = g.add_node("Neg", {x}, {"a"}, "first", "", second);
  second->set_input(0, g.find("a"));
  g.add_output(second->output(0));
  // Stored order is already first, second; now make it wrong by inserting a consumer early.
  Node* early = g.add_node("Abs", {second->output(0)}, {"c"}, "early", "", first);
  g.add_output(early->output(0));
  const std::string bytes = serialize_model(m);
  const Model read = load_model_from_bytes(bytes.data(), bytes.size());
  std::vector<std::string> order;
  for (const Node* n : read.graph().nodes()) order.push_back(n->name());
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second", "early"}));
}

TEST(OnnxIo, SaveWithExternalNeverWritesOneFile) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions opts;
  opts.external_data = ExternalData::kNever;
  const std::string path = dir.file("m.onnx");
  SaveResult r = save_model(built, path, opts);
  EXPECT_EQ(r.files, (std::vector<std::string>{path}));
  EXPECT_EQ(r.external_bytes, 0);
  EXPECT_EQ(tether_test::list_dir(dir.path()), (std::vector<std::string>{"m.onnx"}));
  EXPECT_TRUE(external_refs(path).empty());
  const Model read = load_model(path);
  EXPECT_EQ(read.source_path, path);
  expect_same_model(built, read);
  expect_literal_values(read);
}

TEST(OnnxIo, SaveWithExternalAutoKeepsASmallModelInOneFile) {
  TempDir dir;
  const Model built = build_model();
  const std::string path = dir.file("auto.onnx");
  SaveResult r = save_model(built, path);
  EXPECT_EQ(r.files.size(), 1u);
  EXPECT_EQ(tether_test::list_dir(dir.path()), (std::vector<std::string>{"auto.onnx"}));
  expect_same_model(built, load_model(path));
}

TEST(OnnxIo, SaveWithExternalAlwaysWritesAlignedTensorsToTheDataFile) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;  // default threshold 1024, alignment 4096
  const std::string path = dir.file("m.onnx");
  SaveResult r = save_model(built, path, opts);
  EXPECT_EQ(r.files, (std::vector<std::string>{path, dir.file("m.onnx.data")}));
  EXPECT_EQ(r.external_bytes, kBigBytes + kOddBytes + kBig2Bytes + kThenBiasBytes);
  EXPECT_EQ(tether_test::list_dir(dir.path()), (std::vector<std::string>{"m.onnx", "m.onnx.data"}));
  // Tensors under 1024 bytes stay inside; the subgraph's big initializer goes out too.
  expect_external_layout(built, path, "m.onnx.data", 4096, {"big", "odd", "big2", "then_bias"});
  const Model read = load_model(path);
  expect_same_model(built, read);
  expect_literal_values(read);
}

TEST(OnnxIo, SaveWithLocationInASubfolderAndSmallAlignment) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;
  opts.location = "weights/all.bin";
  opts.size_threshold = 0;
  opts.alignment = 64;
  const std::string path = dir.file("m.onnx");
  SaveResult r = save_model(built, path, opts);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_TRUE(fs::exists(dir.path() / "weights" / "all.bin"));
  // Threshold 0: every raw tensor with bytes goes out; strings and the empty tensor cannot.
  expect_external_layout(built, path, "weights/all.bin", 64, {"w", "b16", "big", "odd", "big2", "nib", "then_bias"});
  expect_same_model(built, load_model(path));
}

TEST(OnnxIo, AlignedExternalWeightsAreMappedAndCopiedOnWrite) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;
  const std::string path = dir.file("m.onnx");
  save_model(built, path, opts);
  const std::string data_before = tether_test::read_file(dir.file("m.onnx.data"));
  Model read = load_model(path);
  Tensor& big = read.graph().find("big")->mutable_initializer();
  // Used in place: the buffer borrows the mapped file.
  EXPECT_FALSE(big.buffer()->writable());
  big.mutable_data<float>()[0] = 1234.0f;
  EXPECT_TRUE(big.buffer()->writable());
  EXPECT_EQ(big.data<float>()[0], 1234.0f);
  EXPECT_EQ(tether_test::read_file(dir.file("m.onnx.data")), data_before);
}

TEST(OnnxIo, SavingOverTheLoadedFilesKeepsTheData) {
  TempDir dir;
  const Model built = build_model();
  const std::string path = dir.file("m.onnx");
  SaveOptions first;
  first.external_data = ExternalData::kAlways;
  save_model(built, path, first);

  // The loaded model's weights borrow the mapped files it is about to be saved over. The new
  // layout differs (other alignment, more tensors outside), so writing in place would scramble them.
  Model loaded = load_model(path);
  SaveOptions second;
  second.external_data = ExternalData::kAlways;
  second.alignment = 64;
  second.size_threshold = 16;
  save_model(loaded, path, second);
  EXPECT_EQ(tether_test::list_dir(dir.path()), (std::vector<std::string>{"m.onnx", "m.onnx.data"}));
  expect_same_model(built, loaded);  // the first load still reads its own (old) bytes
  expect_external_layout(built, path, "m.onnx.data", 64, {"w", "big", "odd", "big2", "then_bias"});
  const Model reread = load_model(path);
  expect_same_model(built, reread);

  // And back into one file, over the files it was just loaded from.
  SaveOptions inside;
  inside.external_data = ExternalData::kNever;
  save_model(reread, path, inside);
  EXPECT_TRUE(external_refs(path).empty());
  expect_same_model(built, load_model(path));
}

TEST(OnnxIo, SaveRejectsBadOptions) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions bad_threshold;
  bad_threshold.size_threshold = -1;
  EXPECT_THROW(save_model(built, dir.file("a.onnx"), bad_threshold), tether::ArgumentError);
  SaveOptions bad_alignment;
  bad_alignment.alignment = 0;
  EXPECT_THROW(save_model(built, dir.file("a.onnx"), bad_alignment), tether::ArgumentError);
  for (const char* location : {"../escape.data", "/tmp/absolute.data"}) {
    SaveOptions bad_location;
    bad_location.external_data = ExternalData::kAlways;
    bad_location.location = location;
    EXPECT_THROW(save_model(built, dir.file("a.onnx"), bad_location), tether::ArgumentError) << location;
  }
  EXPECT_THROW(save_model(built, dir.file("folder/"), SaveOptions()), tether::ArgumentError);
  EXPECT_TRUE(tether_test::list_dir(dir.path()).empty());
}

TEST(OnnxIo, SaveIntoAMissingFolderIsAWriteError) {
  TempDir dir;
  EXPECT_THROW(save_model(build_model(), dir.file("no/such/folder/m.onnx")), tether::WriteError);
}

TEST(OnnxIo, LoadFromBytesWithBaseDirFindsExternalData) {
  TempDir dir;
  const Model built = build_model();
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;
  save_model(built, dir.file("m.onnx"), opts);
  const std::string bytes = tether_test::read_file(dir.file("m.onnx"));
  EXPECT_THROW(load_model_from_bytes(bytes.data(), bytes.size()), tether::ExternalDataError);
  LoadOptions lo;
  lo.base_dir = dir.path().string();
  expect_same_model(built, load_model_from_bytes(bytes.data(), bytes.size(), lo));
}

TEST(OnnxIo, SparseInitializerNamedOnlyByTheGraphRoundTrips) {
  // add_sparse_initializer takes the name; the values tensor need not carry it.
  Model m;
  m.set_opset("", 18);
  SparseTensor sp = sparse_of("");
  Value* v = m.graph().add_sparse_initializer(sp, "weights");
  m.graph().add_output(v);
  const std::string bytes = serialize_model(m);
  const Model read = load_model_from_bytes(bytes.data(), bytes.size());
  ASSERT_EQ(read.graph().sparse_initializers().size(), 1u);
  const Value* rv = read.graph().sparse_initializers()[0];
  EXPECT_EQ(rv->name(), "weights");
  EXPECT_TRUE(rv->sparse_initializer().values.same_data(sp.values));
  EXPECT_TRUE(rv->sparse_initializer().indices.same_data(sp.indices));
  EXPECT_EQ(rv->sparse_initializer().dims, sp.dims);
}

TEST(OnnxIo, SparseInitializerWithoutANameTakesTheValuesName) {
  Graph g;
  Value* v = g.add_sparse_initializer(sparse_of("from_values"), "");
  EXPECT_EQ(v->name(), "from_values");
}

// ---- clone ---------------------------------------------------------------------------------

TEST(Clone, CloneIsStructurallyEqualAndSerializesToTheSameBytes) {
  const Model built = build_model();
  const Model copy = built.clone();
  expect_same_model(built, copy);
  EXPECT_EQ(serialize_model(copy), serialize_model(built));
}

TEST(Clone, CloneSharesWeightBuffersButNotStructure) {
  Model built = build_model();
  Model copy = built.clone();
  const Value* w = built.graph().initializers().front();
  const Value* wc = copy.graph().find(w->name());
  ASSERT_NE(wc, nullptr);
  EXPECT_NE(w, wc);
  EXPECT_EQ(w->initializer().buffer(), wc->initializer().buffer());
  // Changing the copy leaves the original as it was.
  const std::string before = serialize_model(built);
  copy.graph().set_name("changed");
  copy.graph().set_outputs({});
  EXPECT_EQ(serialize_model(built), before);
}

TEST(Clone, SubgraphsOfTheCloneReadTheClonesOuterValues) {
  const Model built = build_model();
  const Model copy = built.clone();
  for (const Node* n : copy.graph().nodes())
    for (const Attribute& a : n->attributes())
      if (a.kind() == AttrKind::kGraph) {
        EXPECT_EQ(a.as_graph()->parent(), &copy.graph());
        for (const Node* inner : a.as_graph()->nodes())
          for (const Value* v : inner->inputs())
            if (v != nullptr && v->graph() != a.as_graph().get()) {
              EXPECT_EQ(v->graph(), &copy.graph());
            }
      }
}

}  // namespace
