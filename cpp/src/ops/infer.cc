// The inference driver: walks graphs in topological order and merges each rule's result with
// what the model already declared.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ops/infer_context.h"
#include "ops/type_overlay.h"
#include "tether/shape_inference.h"

namespace tether::ops {

namespace {

const ValueType kUnknownType;

std::string where(const ir::Node& node) { return "graph '" + node.graph()->name() + "': " + node.describe(); }

}  // namespace

// ---- InferState, TypeOverlay ----------------------------------------------------------------

const ValueType& InferState::type_of(const ir::Value& v) const { return overlay ? overlay->type_of(v) : v.type(); }

void InferState::set_type(ir::Value& v, ValueType type) {
  if (overlay != nullptr) overlay->set(v, std::move(type));
  else v.set_type(std::move(type));
}

namespace {

// True when `a` is the static tensor type `b` (denotations included): only such types are
// compared, as static shapes are what a model inferred at compile mostly holds.
bool same_static_tensor(const ValueType& a, const ValueType& b) {
  if (!a.is_tensor() || !b.is_tensor() || a.dtype() != b.dtype() || a.denotation() != b.denotation()) return false;
  const Shape& x = a.shape();
  const Shape& y = b.shape();
  if (!x.has_rank() || !y.has_rank() || x.rank() != y.rank()) return false;
  for (size_t k = 0; k < x.rank(); ++k)
    if (!x[k].is_known() || !x[k].same_as(y[k]) || x[k].denotation() != y[k].denotation()) return false;
  return true;
}

}  // namespace

void TypeOverlay::set(const ir::Value& v, ValueType type) {
  if (same_static_tensor(type, v.type())) types_.erase(&v);
  else types_[&v] = std::move(type);
}

// ---- InferContext ---------------------------------------------------------------------------

InferContext::InferContext(const ir::Node& node, InferState& state)
    : node_(node), state_(state), outputs_(node.outputs().size()) {}

const ValueType& InferContext::input_type(size_t i) const {
  const ir::Value* v = node_.input(i);
  return v ? state_.type_of(*v) : kUnknownType;
}

std::optional<size_t> InferContext::input_rank(size_t i) const {
  const Shape& s = input_shape(i);
  if (!input_type(i).is_tensor() || !s.has_rank()) return std::nullopt;
  return s.rank();
}

const ir::Tensor* InferContext::input_constant(size_t i) const {
  const ir::Value* v = node_.input(i);
  if (v == nullptr) return nullptr;
  if (v->has_initializer() && !v->is_input()) return &v->initializer();
  auto it = state_.constants.find(v);
  return it == state_.constants.end() ? nullptr : it->second;
}

std::optional<std::vector<int64_t>> InferContext::input_ints(size_t i) const {
  const ir::Tensor* t = input_constant(i);
  if (t == nullptr) {
    // Shape arithmetic that ends in known numbers (pads or axes computed from static dims)
    // is as good as a constant.
    auto it = state_.shape_values.find(node_.input(i));
    if (it == state_.shape_values.end()) return std::nullopt;
    std::vector<int64_t> out;
    for (const SymInt& e : it->second) {
      auto k = e.known();
      if (!k) return std::nullopt;
      out.push_back(*k);
    }
    return out;
  }
  const int64_t n = t->num_elements();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  if (t->dtype() == DType::kInt64) {
    out.assign(t->data<int64_t>(), t->data<int64_t>() + n);
  } else if (t->dtype() == DType::kInt32) {
    for (int64_t k = 0; k < n; ++k) out.push_back(t->data<int32_t>()[k]);
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<SymInt>> InferContext::input_values(size_t i) const {
  const ir::Value* v = node_.input(i);
  if (v == nullptr) return std::nullopt;
  auto it = state_.shape_values.find(v);
  if (it != state_.shape_values.end()) return it->second;
  const ir::Tensor* t = input_constant(i);
  // Shape-like tensors are short; larger constants are data, not worth tracking entry by entry.
  if (t == nullptr || t->rank() > 1 || t->num_elements() > 256) return std::nullopt;
  auto ints = input_ints(i);
  if (!ints) return std::nullopt;
  std::vector<SymInt> out;
  out.reserve(ints->size());
  for (int64_t x : *ints) out.push_back(SymInt::of(x));
  return out;
}

void InferContext::set_output(size_t i, ValueType type) {
  if (i < outputs_.size() && node_.output(i) != nullptr) outputs_[i] = std::move(type);
}

void InferContext::set_output_values(size_t i, std::vector<SymInt> values) {
  if (const ir::Value* v = node_.output(i)) state_.shape_values[v] = std::move(values);
}

void InferContext::set_output_constant(size_t i, ir::Tensor tensor) {
  const ir::Value* v = node_.output(i);
  if (v == nullptr) return;
  state_.owned.push_back(std::make_shared<ir::Tensor>(std::move(tensor)));
  const ir::Tensor* t = state_.owned.back().get();
  state_.constants[v] = t;
  set_output(i, t->dtype(), Shape::of(t->dims()));
}

void InferContext::fail(const std::string& why) const { throw ShapeError(where(node_) + ": " + why); }

size_t InferContext::axis(int64_t axis, size_t rank, std::string_view what) const {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

std::vector<size_t> InferContext::distinct_axes(const std::vector<int64_t>& axes, size_t rank, std::string_view what) const {
  std::vector<size_t> out;
  std::vector<bool> seen(rank, false);
  for (int64_t a : axes) {
    const size_t k = axis(a, rank, std::string("an entry of ") + std::string(what));
    if (seen[k]) fail(std::string(what) + " name axis " + std::to_string(k) + " twice");
    seen[k] = true;
    out.push_back(k);
  }
  return out;
}

Dim InferContext::dim(int64_t size, std::string_view what) const {
  if (size < 0) fail(std::string(what) + " is " + std::to_string(size) + "; sizes must be >= 0");
  return Dim(size);
}

int64_t InferContext::add(int64_t a, int64_t b, std::string_view what) const {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    fail(std::string(what) + " overflows int64 (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return r;
}

int64_t InferContext::mul(int64_t a, int64_t b, std::string_view what) const {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(std::string(what) + " overflows int64 (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return r;
}

DType InferContext::attr_dtype(std::string_view name, DType fallback) const {
  const int64_t code = attr_int(name, 0);
  if (code == 0) return fallback;
  if (code < 0 || code > ir::kMaxDType)
    fail("attribute '" + std::string(name) + "' is " + std::to_string(code) + ", which is no data type (1 to " +
         std::to_string(ir::kMaxDType) + ")");
  return static_cast<DType>(code);
}

// ---- Registry -------------------------------------------------------------------------------

namespace {
std::string key(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return std::string(domain) + ":" + std::string(op_type);
}
}  // namespace

void Registry::add(std::string_view op_type, InferFn fn, std::string_view domain) { rules_[key(domain, op_type)] = fn; }

InferFn Registry::find(std::string_view domain, std::string_view op_type) const {
  auto it = rules_.find(key(domain, op_type));
  return it == rules_.end() ? nullptr : it->second;
}

std::vector<std::string> Registry::ops() const {
  std::vector<std::string> out;
  for (const auto& [k, fn] : rules_) out.push_back(k.front() == ':' ? k.substr(1) : k);
  std::sort(out.begin(), out.end());
  return out;
}

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_elementwise(reg);
    register_conv(reg);
    register_pool(reg);
    register_norm(reg);
    register_resize(reg);
    register_rnn(reg);
    register_attention(reg);
    register_quantize(reg);
    register_matmul(reg);
    register_shape(reg);
    register_reduce(reg);
    register_misc(reg);
    register_fused(reg);
    register_matmul_nbits(reg);
    register_ms_transformer(reg);
    register_vision(reg);
    register_signal(reg);
    return reg;
  }();
  return r;
}

// ---- helpers --------------------------------------------------------------------------------

void check_unidirectional(const InferContext& ctx, const Shape& from, const Shape& to, const std::string& what) {
  if (!from.has_rank() || !to.has_rank()) return;
  bool fits = from.rank() <= to.rank();
  for (size_t k = 1; fits && k <= from.rank(); ++k) {
    const Dim& d = from[from.rank() - k];
    const Dim& t = to[to.rank() - k];
    fits = !(d.is_known() && t.is_known() && d.value() != t.value() && d.value() != 1);
  }
  if (!fits) ctx.fail(what + " of shape " + from.to_string() + " does not broadcast to " + to.to_string());
}

Shape broadcast_shapes(const InferContext& ctx, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) {
    if (!s.has_rank()) return Shape();
    rank = std::max(rank, s.rank());
  }
  std::vector<Dim> out(rank);
  for (size_t k = 0; k < rank; ++k) {
    // A known size other than 1 settles the axis. Otherwise only one symbol, with nothing
    // unknown beside it, does: a symbol or an unknown dim may be 1 at run time.
    std::optional<int64_t> known;
    std::vector<const Dim*> symbols;
    bool unknown = false;
    for (const Shape& s : shapes) {
      if (k + s.rank() < rank) continue;  // this shape has no dim here: it broadcasts
      const Dim& d = s[k + s.rank() - rank];
      if (d.is_known()) {
        if (d.value() == 1) continue;
        if (known && *known != d.value())
          ctx.fail("cannot broadcast dim " + std::to_string(*known) + " with " + d.to_string() + " (axis " +
                   std::to_string(k) + " of the broadcast shape)");
        known = d.value();
      } else if (d.is_symbolic()) {
        symbols.push_back(&d);
      } else {
        unknown = true;
      }
    }
    const bool one_symbol = !symbols.empty() && std::all_of(symbols.begin(), symbols.end(),
                                                            [&](const Dim* d) { return d->same_as(*symbols[0]); });
    if (known) out[k] = Dim(*known);
    else if (one_symbol && !unknown) out[k] = *symbols[0];
    else if (symbols.empty() && !unknown) out[k] = Dim(1);
  }
  return Shape(std::move(out));
}

void check_same_dtype(const InferContext& ctx, const std::vector<size_t>& inputs) {
  std::optional<size_t> first;
  for (size_t i : inputs) {
    if (ctx.input_dtype(i) == DType::kUndefined) continue;
    if (!first) {
      first = i;
      continue;
    }
    if (ctx.input_dtype(i) == ctx.input_dtype(*first)) continue;
    auto describe = [&](size_t k) {
      return "input " + std::to_string(k) + " '" + ctx.node().input(k)->name() + "' is " +
             std::string(ir::dtype_name(ctx.input_dtype(k)));
    };
    ctx.fail(describe(*first) + " but " + describe(i) + "; " + ctx.node().op_type() +
             " takes one element type for these inputs (convert one with Cast)");
  }
}

void check_same_dtype(const InferContext& ctx) {
  std::vector<size_t> all(ctx.num_inputs());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  check_same_dtype(ctx, all);
}

Dim product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  Dim p(1);
  for (size_t i = begin; i < std::min(end, dims.size()); ++i) p = p * dims[i];
  return p;
}

std::string float_text(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Shape shape_of_rank(const Dim& length, size_t min_rank) {
  if (!length.is_known() || length.value() > kMaxRankFromLength) return Shape();
  return Shape(std::vector<Dim>(std::max(min_rank, static_cast<size_t>(length.value()))));
}

// ---- driver ---------------------------------------------------------------------------------

namespace {

// Merges an inferred type into a declared one. Known dims must agree; otherwise the more
// precise side wins, and the declared side on ties (the model's own names for symbols).
ValueType merge(const ValueType& declared, const ValueType& inferred, bool overwrite, const ir::Node& node,
                const ir::Value& v) {
  if (inferred.is_unknown()) return declared;
  if (declared.is_unknown() || overwrite) return inferred;
  if (declared.kind() != inferred.kind() || !declared.is_tensor()) return declared;
  auto conflict = [&](const std::string& what) {
    throw ShapeError(where(node) + ": output '" + v.name() + "' is declared " + declared.to_string() +
                     " but inference gives " + inferred.to_string() + " (" + what + ")");
  };
  DType dt = declared.dtype();
  if (dt == DType::kUndefined) dt = inferred.dtype();
  else if (inferred.dtype() != DType::kUndefined && inferred.dtype() != dt) conflict("element types differ");
  const Shape& ds = declared.shape();
  const Shape& is = inferred.shape();
  Shape shape = ds;
  if (!ds.has_rank()) {
    shape = is;
  } else if (is.has_rank()) {
    if (ds.rank() != is.rank()) conflict("ranks differ");
    for (size_t k = 0; k < ds.rank(); ++k) {
      const Dim& a = ds[k];
      const Dim& b = is[k];
      if (a.is_known() && b.is_known() && a.value() != b.value()) conflict("dim " + std::to_string(k) + " differs");
      if (a.is_unknown() || (b.is_known() && !a.is_known())) shape.mutable_dims()[k] = b;
    }
  }
  ValueType out = ValueType::tensor(dt, std::move(shape));
  out.set_denotation(declared.denotation());
  return out;
}

std::vector<ir::Graph*> subgraphs(const ir::Node& n) {
  std::vector<ir::Graph*> out;
  for (const ir::Attribute& a : n.attributes()) {
    if (!a.ref_attr_name().empty()) continue;
    if (a.kind() == ir::AttrKind::kGraph) out.push_back(a.as_graph().get());
    if (a.kind() == ir::AttrKind::kGraphs)
      for (const auto& g : a.as_graphs()) out.push_back(g.get());
  }
  return out;
}

// Sizes and values a run found for this node's outputs replace what inference gave.
void pin_outputs(const ir::Node& node, InferState& state) {
  if (state.pinned_values.empty() && state.pinned_dims.empty()) return;
  for (ir::Value* out : node.outputs()) {
    if (out == nullptr) continue;
    if (auto it = state.pinned_values.find(out); it != state.pinned_values.end()) {
      state.constants[out] = it->second;
      state.shape_values.erase(out);
      state.set_type(*out, ValueType::tensor(it->second->dtype(), Shape::of(it->second->dims())));
    } else if (auto d = state.pinned_dims.find(out); d != state.pinned_dims.end()) {
      state.set_type(*out, ValueType::tensor(state.type_of(*out).dtype(), Shape::of(*d->second)));
    }
  }
}

// A Loop or Scan body's inputs take their types from the node's inputs where the body leaves
// them undeclared (ONNX allows that): Loop's iteration number and condition, the loop-carried
// values; Scan's states and one step of each scan input.
void type_body_inputs(const ir::Node& node, InferState& state) {
  const int64_t opset = state.opset;
  const bool onnx_domain = node.domain().empty() || node.domain() == "ai.onnx";
  if (!onnx_domain || (node.op_type() != "Loop" && node.op_type() != "Scan")) return;
  const ir::Attribute* a = node.attr("body");
  if (a == nullptr || a->kind() != ir::AttrKind::kGraph) return;
  const std::vector<ir::Value*>& ins = a->as_graph()->inputs();
  auto fill = [&](size_t k, ValueType t) {
    if (k < ins.size() && state.type_of(*ins[k]).dtype() == DType::kUndefined && t.dtype() != DType::kUndefined)
      state.set_type(*ins[k], std::move(t));
  };
  auto type_of = [&](size_t i) { return node.input(i) != nullptr ? state.type_of(*node.input(i)) : ValueType(); };
  if (node.op_type() == "Loop") {
    fill(0, ValueType::tensor(DType::kInt64, Shape::of({})));
    fill(1, ValueType::tensor(DType::kBool, Shape::of({})));
    for (size_t i = 2; i < node.inputs().size(); ++i) fill(i, type_of(i));
    return;
  }
  const auto scans = static_cast<size_t>(node.attr_int("num_scan_inputs", 0));
  if (opset < 9 || scans > node.inputs().size()) return;  // opset 8: a batch axis, sequence_lens first
  const size_t states = node.inputs().size() - scans;
  const std::vector<int64_t> axes = node.attr_ints("scan_input_axes", std::vector<int64_t>(scans, 0));
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    ValueType t = type_of(i);
    if (i >= states && t.shape().has_rank() && i - states < axes.size()) {
      std::vector<ir::Dim> dims = t.shape().dims();
      const auto r = static_cast<int64_t>(dims.size());
      const int64_t ax = axes[i - states] < 0 ? axes[i - states] + r : axes[i - states];
      if (ax < 0 || ax >= r) continue;
      dims.erase(dims.begin() + ax);
      t = ValueType::tensor(t.dtype(), Shape(std::move(dims)));
    }
    fill(i, std::move(t));
  }
}

// Only ONNX's control-flow ops take graphs as attributes (If's branches, Loop's, Scan's and
// SequenceMap's bodies, as in ONNX's schemas). The values a graph attribute reads from the
// enclosing graph become extra inputs of its node, so a graph on another op would pass them to
// a kernel that takes them for its own optional inputs.
void check_graph_attributes(const ir::Node& node) {
  static const std::set<std::pair<std::string_view, std::string_view>> kGraphAttrs = {
      {"If", "then_branch"}, {"If", "else_branch"}, {"Loop", "body"}, {"Scan", "body"}, {"SequenceMap", "body"}};
  for (const ir::Attribute& a : node.attributes())
    if ((a.kind() == ir::AttrKind::kGraph || a.kind() == ir::AttrKind::kGraphs) &&
        kGraphAttrs.count({node.op_type(), a.name()}) == 0)
      throw ShapeError(where(node) + ": attribute '" + a.name() + "' holds a graph; " + node.op_type() +
                       " takes no graph there");
}

// The inputs every version of an ONNX op types as integers or bool (index_types.inc, from
// ONNX's schemas: Reshape's shape, Gather's indices, Where's condition) hold one of those
// dtypes; kernels read them as such.
void check_index_types(const ir::Node& node, const InferState& state) {
  struct IndexInput {
    const char* op;
    size_t input;
    uint64_t dtypes;  // bit k: DType k (ONNX's TensorProto numbering)
  };
  static const IndexInput kTable[] = {
#include "ops/index_types.inc"
  };
  static const std::unordered_multimap<std::string_view, const IndexInput*> index = [] {
    std::unordered_multimap<std::string_view, const IndexInput*> m;
    for (const IndexInput& e : kTable) m.emplace(e.op, &e);
    return m;
  }();
  const auto [first, last] = index.equal_range(node.op_type());
  for (auto it = first; it != last; ++it) {
    const IndexInput& e = *it->second;
    const ir::Value* v = e.input < node.inputs().size() ? node.input(e.input) : nullptr;
    if (v == nullptr || !state.type_of(*v).is_tensor()) continue;
    const DType dtype = state.type_of(*v).dtype();
    const auto dt = static_cast<unsigned>(dtype);
    if (dtype == DType::kUndefined || (dt < 64 && (e.dtypes >> dt & 1) != 0)) continue;
    std::string allowed;
    for (unsigned k = 0; k < 64; ++k)
      if ((e.dtypes >> k & 1) != 0) allowed += (allowed.empty() ? "" : " or ") + std::string(dtype_name(static_cast<DType>(k)));
    throw ShapeError(where(node) + ": input " + std::to_string(e.input) + " ('" + v->name() + "') is " +
                     std::string(dtype_name(dtype)) + "; " + node.op_type() + " takes " + allowed + " there");
  }
}

// The inputs that the version of an ONNX op the opset selects types with one variable (Add's
// A and B, ScatterND's data and updates, every input of Concat) have one element type
// (same_types.inc, generated from ONNX's schemas): kernels read them as one.
void check_same_types(const ir::Node& node, const InferState& state) {
  const int64_t opset = state.opset;
  struct Group {
    const char* op;
    int64_t since;
    uint64_t inputs;   // bit i: input i
    int variadic_from; // and every input from here on; -1: none
  };
  static const Group kTable[] = {
#include "ops/same_types.inc"
  };
  static const std::unordered_map<std::string_view, std::vector<const Group*>> index = [] {
    std::unordered_map<std::string_view, std::vector<const Group*>> m;
    for (const Group& g : kTable) m[g.op].push_back(&g);  // in order of version
    return m;
  }();
  const auto it = index.find(node.op_type());
  if (it == index.end()) return;
  int64_t since = 0;
  for (const Group* g : it->second)
    if (g->since <= opset) since = g->since;
  for (const Group* g : it->second) {
    if (g->since != since) continue;
    const ir::Value* first = nullptr;
    size_t first_at = 0;
    DType first_dtype = DType::kUndefined;
    for (size_t i = 0; i < node.inputs().size(); ++i) {
      const bool member = (i < 64 && (g->inputs >> i & 1) != 0) || (g->variadic_from >= 0 && i >= static_cast<size_t>(g->variadic_from));
      const ir::Value* v = member ? node.input(i) : nullptr;
      if (v == nullptr || !state.type_of(*v).is_tensor()) continue;
      const DType dtype = state.type_of(*v).dtype();
      if (dtype == DType::kUndefined) continue;
      if (first == nullptr) {
        first = v;
        first_at = i;
        first_dtype = dtype;
      } else if (dtype != first_dtype) {
        throw ShapeError(where(node) + ": input " + std::to_string(first_at) + " ('" + first->name() + "') is " +
                         std::string(dtype_name(first_dtype)) + " but input " + std::to_string(i) + " ('" + v->name() +
                         "') is " + std::string(dtype_name(dtype)) + "; " + node.op_type() +
                         " takes one element type for these inputs (convert one with Cast)");
      }
    }
  }
}

// A node of the ONNX domain has the inputs the version of its op that the model's opset
// selects requires, and no more inputs or outputs than it allows (arity.inc, generated from
// ONNX's schemas); the op's rule and kernels can then index them.
void check_arity(const ir::Node& node, int64_t opset) {
  struct Arity {
    const char* op;
    int64_t since;    // the op's version; 0: the loosest over all versions
    int min_inputs;   // input positions
    int min_present;  // leading inputs that must be given
    int max_inputs;
    int min_outputs;  // leading outputs that must be listed and named
    int max_outputs;
  };
  static const Arity kTable[] = {
#include "ops/arity.inc"
  };
  static const std::unordered_map<std::string_view, std::vector<const Arity*>> index = [] {
    std::unordered_map<std::string_view, std::vector<const Arity*>> m;
    for (const Arity& a : kTable) m[a.op].push_back(&a);  // in order of version, 0 first
    return m;
  }();
  const auto it = index.find(node.op_type());
  if (it == index.end()) return;
  const Arity* chosen = it->second.front();
  for (const Arity* a : it->second)
    if (a->since > 0 && a->since <= opset) chosen = a;
  const Arity& a = *chosen;
  if (node.inputs().size() < static_cast<size_t>(a.min_inputs))
    throw ShapeError(where(node) + ": " + node.op_type() + " takes at least " + std::to_string(a.min_inputs) +
                     " inputs, got " + std::to_string(node.inputs().size()));
  for (int k = 0; k < a.min_present; ++k)
    if (node.input(static_cast<size_t>(k)) == nullptr)
      throw ShapeError(where(node) + ": input " + std::to_string(k) + " is required (" + node.op_type() + " needs its first " +
                       std::to_string(a.min_present) + "), but it is empty");
  if (node.inputs().size() > static_cast<size_t>(a.max_inputs))
    throw ShapeError(where(node) + ": " + std::to_string(node.inputs().size()) + " inputs; " + node.op_type() +
                     " takes at most " + std::to_string(a.max_inputs));
  for (int k = 0; k < a.min_outputs; ++k)
    if (static_cast<size_t>(k) >= node.outputs().size() || node.output(static_cast<size_t>(k)) == nullptr)
      throw ShapeError(where(node) + ": output " + std::to_string(k) + " is required (" + node.op_type() + " makes " +
                       std::to_string(a.min_outputs) + "), but it is " +
                       (static_cast<size_t>(k) >= node.outputs().size() ? "not listed" : "empty"));
  if (node.outputs().size() > static_cast<size_t>(a.max_outputs))
    throw ShapeError(where(node) + ": " + std::to_string(node.outputs().size()) + " outputs; " + node.op_type() +
                     " has at most " + std::to_string(a.max_outputs));
}

void infer_graph(const ir::Graph& g, InferState& state, const InferenceOptions& options, InferenceReport& report,
                 std::set<std::string>& missing);

// One node: its subgraphs, its rule, its outputs merged with what they held.
void infer_node(ir::Node* node, InferState& state, const InferenceOptions& options, InferenceReport& report,
                std::set<std::string>& missing) {
  bool subgraphs_ok = true;
  type_body_inputs(*node, state);
  for (ir::Graph* sub : subgraphs(*node)) {
    if (!options.tolerate_subgraph_errors) {
      infer_graph(*sub, state, options, report, missing);
      continue;
    }
    try {
      infer_graph(*sub, state, options, report, missing);
    } catch (const ShapeError&) {
      subgraphs_ok = false;
    }
  }
  if (!subgraphs_ok) {
    pin_outputs(*node, state);
    return;
  }
  const bool onnx_domain = node->domain().empty() || node->domain() == "ai.onnx";
  InferFn rule = registry().find(node->domain(), node->op_type());
  if (rule == nullptr) {
    ++report.nodes_skipped;
    missing.insert(onnx_domain ? node->op_type() : node->domain() + ":" + node->op_type());
    pin_outputs(*node, state);
    return;
  }
  if (onnx_domain) {
    check_arity(*node, state.opset);
    check_index_types(*node, state);
    check_same_types(*node, state);
    check_graph_attributes(*node);
  }
  InferContext ctx(*node, state);
  try {
    rule(ctx);
  } catch (const ShapeError&) {
    throw;
  } catch (const ModelError& e) {  // a bad attribute kind and the like
    throw ShapeError(where(*node) + ": " + e.what());
  }
  for (size_t i = 0; i < ctx.outputs().size(); ++i) {
    ir::Value* out = node->output(i);
    if (out == nullptr) continue;  // an omitted output: the ones after it still get their types
    // No tensor holds more elements than int64 counts (kernels and the planner multiply
    // dims): past any memory limit, so the session's memory error, before anything overflows.
    if (const ValueType& t = ctx.outputs()[i]; t.is_tensor() && t.shape().has_rank()) {
      if (auto sizes = t.shape().static_sizes(); sizes && !ir::checked_num_elements(*sizes))
        throw MemoryLimitError(where(*node) + ": output '" + out->name() + "' of shape " + t.shape().to_string() +
                               " would hold more elements than int64 counts");
    }
    ValueType merged = merge(state.type_of(*out), ctx.outputs()[i], options.overwrite, *node, *out);
    if (!merged.is_unknown()) state.set_type(*out, std::move(merged));
  }
  ++report.nodes_inferred;
  pin_outputs(*node, state);
}

void infer_graph(const ir::Graph& g, InferState& state, const InferenceOptions& options, InferenceReport& report,
                 std::set<std::string>& missing) {
  for (ir::Node* node : g.topological_order()) infer_node(node, state, options, report, missing);
}

}  // namespace

// The newest ONNX opset of the schemas arity.inc was generated from (onnx 1.23.2). A later
// opset may change what an op computes, so a model that asks for one is refused rather than
// run with the semantics of an older version.
constexpr int64_t kNewestOpset = 28;

namespace {

InferenceReport run_inference(const ir::Model& model, const InferenceOptions& options, TypeOverlay* overlay) {
  InferState state;
  state.overlay = overlay;
  state.opset = model.opset("");
  if (state.opset < 0) state.opset = 1;
  if (state.opset > kNewestOpset)
    throw ModelError("the model imports ONNX opset " + std::to_string(state.opset) + "; tether knows opsets 1 to " +
                           std::to_string(kNewestOpset));
  for (const auto& [name, tensor] : options.input_values) {
    const ir::Value* v = model.graph().find(name);
    if (v == nullptr || !v->is_input()) throw ArgumentError("input_values: '" + name + "' is not a graph input");
    state.constants[v] = tensor;
  }
  for (const auto& [name, tensor] : options.output_values) {
    const ir::Value* v = model.graph().find(name);
    if (v == nullptr || v->producer() == nullptr) throw ArgumentError("output_values: '" + name + "' is not a node output");
    state.pinned_values[v] = tensor;
  }
  for (const auto& [name, dims] : options.output_dims) {
    const ir::Value* v = model.graph().find(name);
    if (v == nullptr || v->producer() == nullptr) throw ArgumentError("output_dims: '" + name + "' is not a node output");
    state.pinned_dims[v] = &dims;
  }
  InferenceReport report;
  std::set<std::string> missing;
  infer_graph(model.graph(), state, options, report, missing);
  report.ops_without_inference.assign(missing.begin(), missing.end());
  return report;
}

}  // namespace

InferenceReport infer_shapes(ir::Model& model, const InferenceOptions& options) {
  return run_inference(model, options, nullptr);
}

InferenceReport infer_shapes(const ir::Model& model, const InferenceOptions& options, TypeOverlay& types) {
  return run_inference(model, options, &types);
}

// ---- Inference that starts from the previous run (InferenceMemo) ------------------------------

namespace {

bool same_shape_values(const std::vector<SymInt>* a, const std::vector<SymInt>* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a->size() != b->size()) return false;
  for (size_t k = 0; k < a->size(); ++k) {
    const auto x = (*a)[k].known(), y = (*b)[k].known();
    if (!x || !y || *x != *y) return false;  // a symbol may stand for another size now
  }
  return true;
}

bool same_constant(const ir::Tensor* a, const ir::Tensor* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a == b) return true;
  return a->dtype() == b->dtype() && a->dtype() != DType::kString && a->dims() == b->dims() && a->nbytes() == b->nbytes() &&
         std::memcmp(a->raw_data(), b->raw_data(), static_cast<size_t>(a->nbytes())) == 0;
}

template <typename Map>
auto find_or_null(const Map& m, const ir::Value* v) -> decltype(&m.begin()->second) {
  auto it = m.find(v);
  return it == m.end() ? nullptr : &it->second;
}

// True when what inference knows of `v` now is what it knew in the memo's run: the same static
// type (`before`), the same known shape values, the same constant. Anything not fully known counts as changed.
bool unchanged(const ir::Value& v, const ValueType& before, const InferState& state, const InferenceMemo& memo) {
  if (!same_static_tensor(state.type_of(v), before)) return false;
  if (!same_shape_values(find_or_null(state.shape_values, &v), find_or_null(memo.shape_values, &v))) return false;
  const ir::Tensor* const* now = find_or_null(state.constants, &v);
  const std::shared_ptr<const ir::Tensor>* then = find_or_null(memo.constants, &v);
  return same_constant(now ? *now : nullptr, then ? then->get() : nullptr);
}

bool has_subgraphs(const ir::Graph& g) {
  for (const ir::Node* n : g.nodes())
    if (!subgraphs(*n).empty()) return true;
  return false;
}

// Keeps in `memo` what the run that `state` ends found.
void record(InferenceMemo& memo, const ir::Model& model, InferState& state, const InferenceOptions& options) {
  memo.input_bytes.clear();
  for (const auto& [name, tensor] : options.input_values) {
    const auto* bytes = static_cast<const std::byte*>(tensor->raw_data());
    memo.input_bytes[model.graph().find(name)].assign(bytes, bytes + tensor->nbytes());
  }
  std::unordered_map<const ir::Tensor*, std::shared_ptr<ir::Tensor>> owner;
  for (const auto& t : state.owned) owner.emplace(t.get(), t);
  memo.constants.clear();
  for (const auto& [v, t] : state.constants)
    if (auto it = owner.find(t); it != owner.end()) memo.constants.emplace(v, it->second);
  memo.shape_values = std::move(state.shape_values);
  memo.valid = true;
}

}  // namespace

InferenceReport infer_shapes(const ir::Model& model, const InferenceOptions& options, TypeOverlay& types,
                             InferenceMemo& memo) {
  const ir::Graph& g = model.graph();
  size_t typed_inputs = 0;
  for (const ir::Value* in : g.inputs()) typed_inputs += types.holds(*in);
  // Only a run like the memo's can start from it: no pinned outputs, no bodies (whose values
  // the memo does not hold), and an overlay that holds the inputs' types alone.
  if (memo.bodies < 0) {
    memo.order = g.topological_order();
    memo.bodies = has_subgraphs(g) ? 1 : 0;
  }
  const bool usable = options.output_values.empty() && options.output_dims.empty() && types.size() == typed_inputs &&
                      memo.bodies == 0;
  if (!usable) {
    memo.valid = false;
    InferenceReport report = infer_shapes(model, options, types);
    memo.types = std::move(types);
    types = TypeOverlay{};
    return report;
  }
  InferState state;
  state.overlay = &types;
  state.opset = model.opset("");
  if (state.opset < 0) state.opset = 1;
  if (state.opset > kNewestOpset) {
    memo.valid = false;
    return infer_shapes(model, options, types);  // throws the opset error
  }
  std::unordered_set<const ir::Value*> changed;
  for (const auto& [name, tensor] : options.input_values) {
    const ir::Value* v = g.find(name);
    if (v == nullptr || !v->is_input()) throw ArgumentError("input_values: '" + name + "' is not a graph input");
    state.constants[v] = tensor;
    const auto* bytes = static_cast<const std::byte*>(tensor->raw_data());
    const auto* then = find_or_null(memo.input_bytes, v);
    if (then == nullptr || !std::equal(then->begin(), then->end(), bytes, bytes + tensor->nbytes())) changed.insert(v);
  }
  const bool from_memo = memo.valid;
  memo.valid = false;  // until this run is done
  if (from_memo) {
    // The memo's overlay becomes this run's (no copy), the inputs' types set anew.
    TypeOverlay inputs = std::move(types);
    types = std::move(memo.types);
    for (const ir::Value* in : g.inputs()) {
      if (!same_static_tensor(inputs.type_of(*in), types.type_of(*in))) changed.insert(in);
      if (memo.input_bytes.count(in) != 0 && options.input_values.count(in->name()) == 0) changed.insert(in);
      types.set(*in, inputs.type_of(*in));
    }
  }
  InferenceReport report;
  std::set<std::string> missing;
  int64_t reused = 0;
  std::vector<ValueType> before;
  for (ir::Node* node : memo.order) {
    bool same_inputs = from_memo;
    for (const ir::Value* in : node->inputs()) same_inputs = same_inputs && (in == nullptr || changed.count(in) == 0);
    if (same_inputs) {
      // Inputs as last time: so are the outputs (every rule is a function of its inputs' types,
      // shape values and constants, and the node's attributes).
      for (const ir::Value* out : node->outputs()) {
        if (out == nullptr) continue;
        // Moved, not copied: the memo's run is replaced by this one at the end.
        if (auto sv = memo.shape_values.find(out); sv != memo.shape_values.end()) state.shape_values[out] = std::move(sv->second);
        if (const auto* c = find_or_null(memo.constants, out)) {
          state.owned.push_back(std::const_pointer_cast<ir::Tensor>(*c));
          state.constants[out] = c->get();
        }
      }
      ++reused;
      ++report.nodes_inferred;
      continue;
    }
    // From the compiled type, as a run without the memo starts; the memo's run's kept to compare.
    before.clear();
    for (ir::Value* out : node->outputs()) {
      before.push_back(out != nullptr ? types.type_of(*out) : ValueType());
      if (out != nullptr) state.set_type(*out, out->type());
    }
    infer_node(node, state, options, report, missing);
    for (size_t k = 0; k < node->outputs().size(); ++k) {
      const ir::Value* out = node->output(k);
      if (out != nullptr && (!from_memo || !unchanged(*out, before[k], state, memo))) changed.insert(out);
    }
  }
  report.ops_without_inference.assign(missing.begin(), missing.end());
  record(memo, model, state, options);
  memo.types = std::move(types);
  types = TypeOverlay{};
  memo.nodes_reused = reused;
  memo.nodes_inferred = static_cast<int64_t>(memo.order.size()) - reused;
  return report;
}

}  // namespace tether::ops
