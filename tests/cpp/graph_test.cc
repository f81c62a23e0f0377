// Graph, Node and Value: building, use bookkeeping, rewrites, ordering, validation, subgraphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tether/error.h"
#include "tether/graph.h"

namespace {

using namespace tether::ir;

ValueType f32(std::vector<Dim> dims) { return ValueType::tensor(DType::kFloat32, Shape(std::move(dims))); }

std::vector<std::string> names(const std::vector<Node*>& nodes) {
  std::vector<std::string> out;
  for (const Node* n : nodes) out.push_back(n->name());
  return out;
}

bool has_use(const Value* v, const Node* node, size_t index) {
  return std::any_of(v->uses().begin(), v->uses().end(),
                     [&](const Use& u) { return u.node == node && u.index == index; });
}

// x[batch, 4] -> MatMul(w1) -> Add(b1) -> Relu -> MatMul(w2) -> y
struct Mlp {
  Graph g{"mlp"};
  Value* x;
  Value* w1;
  Value* b1;
  Value* w2;
  Node* mm1;
  Node* add;
  Node* relu;
  Node* mm2;

  Mlp() {
    x = g.add_input("x", f32({Dim::symbol("batch"), Dim(4)}));
    w1 = g.add_initializer(Tensor::zeros(DType::kFloat32, {4, 8}), "w1");
    b1 = g.add_initializer(Tensor::zeros(DType::kFloat32, {8}), "b1");
    w2 = g.add_initializer(Tensor::zeros(DType::kFloat32, {8, 2}), "w2");
    mm1 = g.add_node("MatMul", {x, w1}, {"h"}, "mm1");
    add = g.add_node("Add", {mm1->output(0), b1}, {"h1"}, "add");
    relu = g.add_node("Relu", {add->output(0)}, {"r"}, "relu");
    mm2 = g.add_node("MatMul", {relu->output(0), w2}, {"y"}, "mm2");
    g.add_output(mm2->output(0));
  }
};

TEST(Graph, BuildsAnMlpWithInputsInitializersNodesAndOutputs) {
  Mlp m;
  EXPECT_EQ(m.g.inputs(), (std::vector<Value*>{m.x}));
  EXPECT_EQ(m.g.initializers(), (std::vector<Value*>{m.w1, m.b1, m.w2}));
  EXPECT_EQ(names(m.g.nodes()), (std::vector<std::string>{"mm1", "add", "relu", "mm2"}));
  EXPECT_EQ(m.g.num_nodes(), 4u);
  ASSERT_EQ(m.g.outputs().size(), 1u);
  EXPECT_EQ(m.g.outputs()[0]->name(), "y");
  EXPECT_TRUE(m.g.outputs()[0]->is_output());
  EXPECT_TRUE(m.x->is_input());
  EXPECT_TRUE(m.w1->has_initializer());
  EXPECT_EQ(m.w1->initializer().name(), "w1");
  // An initializer's value takes its type from the tensor.
  EXPECT_EQ(m.w1->type().dtype(), DType::kFloat32);
  EXPECT_EQ(m.w1->type().shape().static_sizes(), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(m.g.find("h"), m.mm1->output(0));
  EXPECT_EQ(m.g.find("nope"), nullptr);
  EXPECT_EQ(m.mm1->input(5), nullptr);
  EXPECT_NO_THROW(m.g.validate());
}

TEST(Graph, ProducerAndUsesAreRecorded) {
  Mlp m;
  Value* h = m.g.find("h");
  EXPECT_EQ(h->producer(), m.mm1);
  EXPECT_EQ(h->producer_index(), 0u);
  ASSERT_EQ(h->uses().size(), 1u);
  EXPECT_EQ(h->uses()[0].node, m.add);
  EXPECT_EQ(h->uses()[0].index, 0u);
  EXPECT_EQ(m.x->producer(), nullptr);
  EXPECT_EQ(m.w1->uses().size(), 1u);
  EXPECT_TRUE(has_use(m.w1, m.mm1, 1));
  EXPECT_TRUE(m.g.find("y")->uses().empty());
}

TEST(Graph, ANodeReadingOneValueTwiceRecordsTwoUses) {
  Graph g;
  Value* x = g.add_input("x", f32({Dim(2)}));
  Node* n = g.add_node("Mul", {x, x}, {"sq"});
  ASSERT_EQ(x->uses().size(), 2u);
  EXPECT_TRUE(has_use(x, n, 0));
  EXPECT_TRUE(has_use(x, n, 1));
  n->set_input(1, nullptr);
  ASSERT_EQ(x->uses().size(), 1u);
  EXPECT_TRUE(has_use(x, n, 0));
}

TEST(Graph, SetInputGrowsTheInputListAndMovesTheUse) {
  Mlp m;
  m.relu->set_input(2, m.b1);
  EXPECT_EQ(m.relu->inputs().size(), 3u);
  EXPECT_EQ(m.relu->input(1), nullptr);
  EXPECT_TRUE(has_use(m.b1, m.relu, 2));
  m.relu->set_input(2, m.w2);
  EXPECT_FALSE(has_use(m.b1, m.relu, 2));
  EXPECT_TRUE(has_use(m.w2, m.relu, 2));
}

TEST(Graph, ReplaceAllUsesRedirectsNodeInputsAndGraphOutputs) {
  Mlp m;
  Value* h1 = m.g.find("h1");
  Value* y = m.g.find("y");
  // Skip the Add: Relu reads the MatMul directly.
  m.g.replace_all_uses(h1, m.g.find("h"));
  EXPECT_EQ(m.relu->input(0)->name(), "h");
  EXPECT_TRUE(h1->uses().empty());
  EXPECT_EQ(m.g.find("h")->uses().size(), 2u);

  Node* id = m.g.add_node("Identity", {y}, {"y2"}, "id");
  m.g.replace_all_uses(y, id->output(0));
  EXPECT_EQ(m.g.outputs()[0]->name(), "y2");
  // The Identity itself now reads y2; replace_all_uses moves every use, its own too.
  EXPECT_EQ(id->input(0)->name(), "y2");
}

TEST(Graph, RemoveNodeRefusesWhileAnOutputIsUsedOrIsAGraphOutput) {
  Mlp m;
  EXPECT_THROW(m.g.remove_node(m.add), tether::GraphError);
  EXPECT_THROW(m.g.remove_node(m.mm2), tether::GraphError);
  // The refusals changed nothing.
  EXPECT_EQ(m.g.num_nodes(), 4u);
  EXPECT_EQ(m.g.find("h1")->producer(), m.add);

  m.g.replace_all_uses(m.g.find("h1"), m.g.find("h"));
  m.g.remove_node(m.add);
  EXPECT_EQ(names(m.g.nodes()), (std::vector<std::string>{"mm1", "relu", "mm2"}));
  EXPECT_EQ(m.g.find("h1"), nullptr);
  // The removed node's inputs no longer count it as a use.
  EXPECT_TRUE(m.b1->uses().empty());
  EXPECT_EQ(m.g.find("h")->uses().size(), 1u);
  EXPECT_NO_THROW(m.g.validate());
}

TEST(Graph, RemoveValueOnlyRemovesUnusedValues) {
  Mlp m;
  EXPECT_THROW(m.g.remove_value(m.w1), tether::GraphError);           // used
  EXPECT_THROW(m.g.remove_value(m.g.find("h")), tether::GraphError);  // produced
  EXPECT_THROW(m.g.remove_value(m.g.find("y")), tether::GraphError);  // produced and output
  Value* spare = m.g.add_initializer(Tensor::zeros(DType::kInt64, {1}), "spare");
  Value* decl = m.g.declare("later", f32({Dim(1)}));
  m.g.remove_value(spare);
  m.g.remove_value(decl);
  EXPECT_EQ(m.g.find("spare"), nullptr);
  EXPECT_EQ(m.g.find("later"), nullptr);
  EXPECT_EQ(m.g.initializers(), (std::vector<Value*>{m.w1, m.b1, m.w2}));
  // The name is free again.
  EXPECT_NO_THROW(m.g.add_initializer(Tensor::zeros(DType::kInt64, {1}), "spare"));
}

TEST(Graph, RemovingAnUnusedGraphInputDropsItFromTheInputs) {
  Graph g;
  Value* a = g.add_input("a", f32({Dim(1)}));
  Value* b = g.add_input("b", f32({Dim(1)}));
  g.remove_value(a);
  EXPECT_EQ(g.inputs(), (std::vector<Value*>{b}));
}

TEST(Graph, DuplicateOutputNameIsAGraphError) {
  Mlp m;
  EXPECT_THROW(m.g.add_node("Relu", {m.x}, {"h"}), tether::GraphError);   // a node output
  EXPECT_THROW(m.g.add_node("Relu", {m.x}, {"x"}), tether::GraphError);   // a graph input
  EXPECT_THROW(m.g.add_node("Relu", {m.x}, {"w1"}), tether::GraphError);  // an initializer
  EXPECT_THROW(m.g.add_node("Split", {m.x}, {"p", "p"}), tether::GraphError);
  // Failed calls leave the graph as it was.
  EXPECT_EQ(m.g.num_nodes(), 4u);
  EXPECT_EQ(m.g.find("p"), nullptr);
  EXPECT_EQ(m.x->uses().size(), 1u);
}

TEST(Graph, DuplicateInputOrInitializerIsAGraphError) {
  Mlp m;
  EXPECT_THROW(m.g.add_input("x", f32({})), tether::GraphError);
  EXPECT_THROW(m.g.add_input("h", f32({})), tether::GraphError);
  EXPECT_THROW(m.g.add_initializer(Tensor::zeros(DType::kFloat32, {1}), "w1"), tether::GraphError);
  EXPECT_THROW(m.g.add_initializer(Tensor::zeros(DType::kFloat32, {1}), "h"), tether::GraphError);
  EXPECT_THROW(m.g.add_initializer(Tensor::zeros(DType::kFloat32, {1})), tether::GraphError);  // no name
}

TEST(Graph, InitializerMayGiveAGraphInputItsDefault) {
  Graph g;
  Value* in = g.add_input("scale", f32({Dim(1)}));
  Value* init = g.add_initializer(Tensor::zeros(DType::kFloat32, {1}), "scale");
  EXPECT_EQ(in, init);
  EXPECT_TRUE(in->is_input());
  EXPECT_TRUE(in->has_initializer());
}

TEST(Graph, OmittedOptionalInputsAndOutputsAreNull) {
  Graph g;
  Value* x = g.add_input("x", f32({Dim(1)}));
  Node* n = g.add_node("Dropout", {x, nullptr, nullptr}, {"y", ""});
  EXPECT_EQ(n->inputs().size(), 3u);
  EXPECT_EQ(n->input(1), nullptr);
  ASSERT_EQ(n->outputs().size(), 2u);
  EXPECT_NE(n->output(0), nullptr);
  EXPECT_EQ(n->output(1), nullptr);
}

TEST(Graph, AddNodeBeforeInsertsAtThatPosition) {
  Mlp m;
  Node* n = m.g.add_node("Identity", {m.x}, {"xi"}, "first", "", m.mm1);
  EXPECT_EQ(m.g.nodes().front(), n);
}

TEST(Graph, TopologicalOrderKeepsValidStoredOrder) {
  // Two independent chains interleaved in the stored order: any interleaving is valid, and
  // the stored one must be kept. (A first-in-first-out Kahn sort would give a1 b1 a2 b2, a
  // depth-first one a1 a2 b1 b2.)
  Graph g;
  Value* a = g.add_input("a", f32({Dim(1)}));
  Value* b = g.add_input("b", f32({Dim(1)}));
  Node* a1 = g.add_node("Relu", {a}, {"a1"}, "a1");
  Node* b1 = g.add_node("Relu", {b}, {"b1"}, "b1");
  Node* b2 = g.add_node("Relu", {b1->output(0)}, {"b2"}, "b2");
  Node* a2 = g.add_node("Relu", {a1->output(0)}, {"a2"}, "a2");
  g.add_node("Add", {a2->output(0), b2->output(0)}, {"s"}, "s");
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"a1", "b1", "b2", "a2", "s"}));
  g.sort_topologically();
  EXPECT_EQ(names(g.nodes()), (std::vector<std::string>{"a1", "b1", "b2", "a2", "s"}));
}

TEST(Graph, TopologicalOrderSortsAnOutOfOrderGraph) {
  Graph g;
  Value* x = g.add_input("x", f32({Dim(1)}));
  // Built back to front with `before`: the stored order is the reverse of the data flow.
  Node* c = g.add_node("Relu", {}, {"c"}, "c");
  Node* b = g.add_node("Relu", {}, {"b"}, "b", "", c);
  Node* a = g.add_node("Relu", {x}, {"a"}, "a", "", b);
  // Now rewire so that data flows c -> b -> a, against the stored order a, b, c.
  a->set_input(0, b->output(0));
  b->set_input(0, c->output(0));
  c->set_input(0, x);
  EXPECT_EQ(names(g.nodes()), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"c", "b", "a"}));
  g.sort_topologically();
  EXPECT_EQ(names(g.nodes()), (std::vector<std::string>{"c", "b", "a"}));
}

TEST(Graph, TopologicalOrderMovesOnlyWhatMustMove) {
  // Stored: p (reads q), q, r. Only p must move after q; r keeps its place after them.
  Graph g;
  Value* x = g.add_input("x", f32({Dim(1)}));
  Value* qv = g.declare("q", f32({Dim(1)}));
  g.add_node("Relu", {qv}, {"p"}, "p");
  g.add_node("Relu", {x}, {"q"}, "q");
  g.add_node("Relu", {x}, {"r"}, "r");
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"q", "p", "r"}));
}

TEST(Graph, CycleIsAGraphErrorNamingTheNodesInFlowOrder) {
  Graph g("loopy");
  Value* x = g.add_input("x", f32({Dim(1)}));
  Value* cv = g.declare("c_out", f32({Dim(1)}));
  // Data flows A -> B -> C -> A; D feeds A from outside the cycle.
  Node* d = g.add_node("Relu", {x}, {"d_out"}, "D");
  Node* a = g.add_node("Add", {d->output(0), cv}, {"a_out"}, "A");
  Node* b = g.add_node("Relu", {a->output(0)}, {"b_out"}, "B");
  g.add_node("Relu", {b->output(0)}, {"c_out"}, "C");
  try {
    g.topological_order();
    FAIL() << "expected a GraphError";
  } catch (const tether::GraphError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("loopy"), std::string::npos) << msg;
    // The cycle is named as a closed path along the data flow, starting anywhere on it.
    const std::vector<std::string> rotations = {
        "Add 'A' -> Relu 'B' -> Relu 'C' -> Add 'A'",
        "Relu 'B' -> Relu 'C' -> Add 'A' -> Relu 'B'",
        "Relu 'C' -> Add 'A' -> Relu 'B' -> Relu 'C'",
    };
    EXPECT_TRUE(std::any_of(rotations.begin(), rotations.end(),
                            [&](const std::string& r) { return msg.find(r) != std::string::npos; }))
        << msg;
    EXPECT_EQ(msg.find("'D'"), std::string::npos) << "D is not on the cycle: " << msg;
  }
  EXPECT_THROW(g.sort_topologically(), tether::GraphError);
  EXPECT_THROW(g.validate(), tether::GraphError);
}

TEST(Graph, SelfLoopIsACycle) {
  Graph g;
  Value* v = g.declare("v", f32({Dim(1)}));
  g.add_node("Relu", {v}, {"v"}, "self");
  try {
    g.topological_order();
    FAIL() << "expected a GraphError";
  } catch (const tether::GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("Relu 'self' -> Relu 'self'"), std::string::npos) << e.what();
  }
}

TEST(Graph, ValidateCatchesAnUndefinedInput) {
  Mlp m;
  Value* ghost = m.g.declare("ghost", f32({Dim(8)}));
  EXPECT_FALSE(ghost->is_defined());
  EXPECT_TRUE(ghost->is_declared());
  m.g.add_node("Add", {m.g.find("r"), ghost}, {"z"}, "uses_ghost");
  try {
    m.g.validate();
    FAIL() << "expected a GraphError";
  } catch (const tether::GraphError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ghost"), std::string::npos) << msg;
    EXPECT_NE(msg.find("uses_ghost"), std::string::npos) << msg;
  }
}

TEST(Graph, ValidateCatchesAnUndefinedOutput) {
  Graph g;
  g.add_output(g.declare("nothing", ValueType()));
  EXPECT_THROW(g.validate(), tether::GraphError);
}

TEST(Graph, ValueOfAnotherGraphIsRejected) {
  Graph g1("one"), g2("two");
  Value* x = g1.add_input("x", f32({Dim(1)}));
  EXPECT_THROW(g2.add_node("Relu", {x}, {"y"}), tether::GraphError);
  EXPECT_THROW(g2.add_output(x), tether::GraphError);
  Node* n = g2.add_node("Relu", {}, {"y"});
  EXPECT_THROW(n->set_input(0, x), tether::GraphError);
  EXPECT_TRUE(x->uses().empty());
}

TEST(Graph, AttributesCanBeSetReplacedAndRemoved) {
  Graph g;
  Value* x = g.add_input("x", f32({Dim(1)}));
  Node* n = g.add_node("Conv", {x}, {"y"}, "conv");
  n->set_attr(Attribute::ints("strides", {2, 2}));
  n->set_attr(Attribute::i("group", 1));
  n->set_attr(Attribute::i("group", 4));
  EXPECT_EQ(n->attributes().size(), 2u);
  EXPECT_EQ(n->attr_int("group", 0), 4);
  EXPECT_EQ(n->attr_ints("strides"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(n->attr_float("alpha", 0.25f), 0.25f);
  EXPECT_EQ(n->attr_string("auto_pad", "NOTSET"), "NOTSET");
  EXPECT_THROW(n->attr_float("group", 0.0f), tether::ModelError);  // wrong kind
  EXPECT_TRUE(n->remove_attr("group"));
  EXPECT_FALSE(n->remove_attr("group"));
  EXPECT_EQ(n->attr("group"), nullptr);
  EXPECT_EQ(n->describe(), "Conv 'conv'");
}

TEST(Graph, UnnamedNodeIsDescribedByItsPosition) {
  Graph g;
  Value* x = g.add_input("x", f32({Dim(1)}));
  g.add_node("Relu", {x}, {"a"});
  Node* n = g.add_node("Sigmoid", {x}, {"b"}, "", "com.example");
  EXPECT_EQ(n->describe(), "com.example:Sigmoid #1");
}

// ---- subgraphs ------------------------------------------------------------------------------

// main: x -> Relu -> r; If(cond) whose branches both read r from the enclosing graph.
struct WithIf {
  Graph g{"main"};
  Value* x;
  Value* cond;
  Node* relu;
  Node* iff;
  std::shared_ptr<Graph> then_g = std::make_shared<Graph>("then");
  std::shared_ptr<Graph> else_g = std::make_shared<Graph>("else");
  Node* then_node;
  Node* else_node;

  WithIf() {
    x = g.add_input("x", f32({Dim(2)}));
    cond = g.add_input("cond", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));
    relu = g.add_node("Relu", {x}, {"r"}, "relu");
    Value* r = relu->output(0);
    then_g->set_parent(&g);
    then_node = then_g->add_node("Neg", {r}, {"t"}, "neg");
    then_g->add_output(then_node->output(0));
    else_g->set_parent(&g);
    else_node = else_g->add_node("Abs", {r}, {"e"}, "abs");
    else_g->add_output(else_node->output(0));
    iff = g.add_node("If", {cond}, {"out"}, "if");
    iff->set_attr(Attribute::graph("then_branch", then_g));
    iff->set_attr(Attribute::graph("else_branch", else_g));
    g.add_output(iff->output(0));
  }
};

TEST(Subgraph, UsesInsideBranchesAreRecordedOnTheOuterValue) {
  WithIf w;
  Value* r = w.g.find("r");
  ASSERT_EQ(r->uses().size(), 2u);
  EXPECT_TRUE(has_use(r, w.then_node, 0));
  EXPECT_TRUE(has_use(r, w.else_node, 0));
  EXPECT_EQ(w.then_g->parent(), &w.g);
  EXPECT_EQ(w.then_g->resolve("r"), r);
  EXPECT_EQ(w.then_g->find("r"), nullptr);
  EXPECT_EQ(w.g.resolve("t"), nullptr);  // an inner value is invisible outside
  EXPECT_NO_THROW(w.g.validate());
}

TEST(Subgraph, CapturedValueKeepsItsProducerFromBeingRemoved) {
  WithIf w;
  EXPECT_THROW(w.g.remove_node(w.relu), tether::GraphError);
}

TEST(Subgraph, TopologicalOrderCountsTheCaptureAsADependency) {
  WithIf w;
  // Put the If first: nothing among its own inputs says it must follow the Relu, only the
  // branches' capture of r does.
  Node* late_if = w.g.add_node("If", {w.cond}, {"out2"}, "if_first", "", w.relu);
  auto sub = std::make_shared<Graph>("sub");
  sub->set_parent(&w.g);
  Node* inner = sub->add_node("Identity", {w.g.find("r")}, {"i"}, "inner");
  sub->add_output(inner->output(0));
  late_if->set_attr(Attribute::graph("then_branch", sub));
  EXPECT_EQ(names(w.g.nodes()).front(), "if_first");
  EXPECT_EQ(names(w.g.topological_order()), (std::vector<std::string>{"relu", "if_first", "if"}));
}

TEST(Subgraph, NestedSubgraphCaptureCountsForTheOutermostNode) {
  Graph g("main");
  Value* x = g.add_input("x", f32({Dim(1)}));
  Value* cond = g.add_input("cond", ValueType::tensor(DType::kBool, Shape(std::vector<Dim>{})));
  Node* outer_if = g.add_node("If", {cond}, {"o"}, "outer_if");
  Node* relu = g.add_node("Relu", {x}, {"r"}, "relu");
  auto mid = std::make_shared<Graph>("mid");
  mid->set_parent(&g);
  auto deep = std::make_shared<Graph>("deep");
  deep->set_parent(mid.get());
  Node* reader = deep->add_node("Identity", {relu->output(0)}, {"d"}, "deep_reader");
  deep->add_output(reader->output(0));
  Node* inner_if = mid->add_node("If", {cond}, {"m"}, "inner_if");
  inner_if->set_attr(Attribute::graph("then_branch", deep));
  mid->add_output(inner_if->output(0));
  outer_if->set_attr(Attribute::graph("then_branch", mid));
  EXPECT_EQ(deep->parent(), mid.get());
  EXPECT_TRUE(has_use(relu->output(0), reader, 0));
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"relu", "outer_if"}));
}

TEST(Subgraph, ReplacingTheBranchAttributeDetachesItsUses) {
  WithIf w;
  Value* r = w.g.find("r");
  Node* else_node = w.else_node;
  w.else_g.reset();  // the attribute holds the only reference now
  w.iff->set_attr(Attribute::graph("else_branch", std::make_shared<Graph>("empty")));
  ASSERT_EQ(r->uses().size(), 1u);
  EXPECT_TRUE(has_use(r, w.then_node, 0));
  EXPECT_FALSE(has_use(r, else_node, 0));
}

TEST(Subgraph, RemovingTheBranchAttributeDetachesItsUses) {
  WithIf w;
  Value* r = w.g.find("r");
  w.then_g.reset();
  w.else_g.reset();
  EXPECT_TRUE(w.iff->remove_attr("then_branch"));
  EXPECT_EQ(r->uses().size(), 1u);
  EXPECT_TRUE(w.iff->remove_attr("else_branch"));
  EXPECT_TRUE(r->uses().empty());
  // With no capture left, the Relu can go (after its value stops being needed).
  EXPECT_NO_THROW(w.g.remove_node(w.relu));
}

TEST(Subgraph, RemovingTheIfNodeDetachesItsBranchesUses) {
  WithIf w;
  Value* r = w.g.find("r");
  w.then_g.reset();
  w.else_g.reset();
  w.g.set_outputs({});
  w.g.remove_node(w.iff);
  EXPECT_TRUE(r->uses().empty());
  EXPECT_TRUE(w.cond->uses().empty());
}

TEST(Subgraph, ReplaceAllUsesReachesNodesInsideBranches) {
  WithIf w;
  Value* r = w.g.find("r");
  Node* sig = w.g.add_node("Sigmoid", {w.x}, {"s"}, "sig");
  w.g.replace_all_uses(r, sig->output(0));
  EXPECT_TRUE(r->uses().empty());
  EXPECT_EQ(w.then_node->input(0), sig->output(0));
  EXPECT_EQ(w.else_node->input(0), sig->output(0));
  EXPECT_EQ(sig->output(0)->uses().size(), 2u);
  EXPECT_NO_THROW(w.g.remove_node(w.relu));
  EXPECT_NO_THROW(w.g.validate());
}

TEST(Subgraph, BranchOutputNamingAnOuterValueFollowsReplaceAllUses) {
  // ONNX lets a branch output an enclosing graph's value directly, without a node.
  WithIf w;
  Value* r = w.g.find("r");
  w.else_g->set_outputs({r});
  Node* sig = w.g.add_node("Sigmoid", {w.x}, {"s"}, "sig");
  w.g.replace_all_uses(r, sig->output(0));
  ASSERT_EQ(w.else_g->outputs().size(), 1u);
  EXPECT_EQ(w.else_g->outputs()[0], sig->output(0));
}

TEST(Subgraph, BranchOutputNamingAnOuterValueKeepsItFromBeingRemoved) {
  WithIf w;
  Value* r = w.g.find("r");
  Value* spare = w.g.add_initializer(Tensor::zeros(DType::kFloat32, {2}), "spare");
  // The branches' nodes read x now; r and spare are read only as branch outputs.
  w.then_node->set_input(0, w.x);
  w.else_node->set_input(0, w.x);
  w.then_g->set_outputs({spare});
  w.else_g->set_outputs({r});
  EXPECT_TRUE(r->uses().empty());
  EXPECT_THROW(w.g.remove_value(spare), tether::GraphError);
  EXPECT_THROW(w.g.remove_node(w.relu), tether::GraphError);
  EXPECT_EQ(w.g.find("r"), r);
  EXPECT_EQ(r->producer(), w.relu);
}

}  // namespace
