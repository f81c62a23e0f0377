// A structure-aware libFuzzer mutator for ONNX models, linked into load_fuzzer_structured.
//
// Byte-level mutations rarely keep a model parseable while changing what shape inference
// reads. This mutator parses the input as a ModelProto and edits it the way a broken
// exporter or a hostile file would: op types swapped, attributes set to extreme values or to
// the wrong kind, dims and dtypes changed, inputs rewired, nodes copied or dropped. Half of
// the time, and whenever the input is not a ModelProto, it leaves the work to libFuzzer's
// byte mutations, so both kinds of input keep evolving.
//
// One mutation breaks a shape contract: it looks the node's op up in the relations of
// contract_relations.inc (written by contracts.py --emit-cpp from its table, the one source
// of truth) and breaks one, resizing a dim of an initializer or of a declared input, the
// length of a shape tensor or of an ints attribute, or the value of an int attribute bounded
// by a dim. Value and attribute mutations alone seldom change two inputs' shapes apart.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tether_onnx.pb.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

namespace pb = tether::onnx_pb;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

const int64_t kInts[] = {0, 1, -1, 2, 3, -2, 4, 7, 64, 255, 65536, 2147483647, -2147483648LL, (int64_t{1} << 32) + 1,
                         int64_t{1} << 62, kI64Max, kI64Min, kI64Max - 1, kI64Min + 1, 1000000000000000LL, 28, 29, 99};
const float kFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e30f, -1e30f, 1e-30f, 3.4e38f,
                         std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
const char* const kOps[] = {
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
    "BatchNormalization", "LayerNormalization", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "LSTM", "GRU",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMul", "MatMulInteger", "Gemm", "Einsum",
    "Shape", "Size", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "ScatterND", "Expand", "Tile", "Pad", "TopK", "NonZero", "OneHot", "ReduceMean",
    "ReduceSum", "ArgMax", "Constant", "ConstantOfShape", "Range", "EyeLike", "RandomNormal", "RandomUniformLike",
    "If", "Loop", "Add", "Sub", "Mul", "Div", "Min", "Max", "Equal", "Where", "Cast", "CastLike", "Identity",
    "Dropout", "Relu", "Softmax", "PRelu", "Not", "Unknown"};
const char* const kAttrNames[] = {
    "axis", "axes", "perm", "kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "ceil_mode",
    "value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings",
    "sparse_value", "to", "dtype", "shape", "k", "split", "num_outputs", "starts", "ends", "allowzero", "start",
    "end", "batch_dims", "blocksize", "hidden_size", "direction", "layout", "output_dtype", "stash_type",
    "output_shape", "output_padding", "transA", "transB", "equation", "keepdims", "noop_with_empty_axes",
    "keep_aspect_ratio_policy", "then_branch", "else_branch", "body"};
const char* const kStrings[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bidirectional", "stretch", "",
                                "...ij->...ji", "ij,jk->ik", "......", "a->b->c", "bij,bkj->bik", "i,i", "x"};
const char* const kDimParams[] = {"N", "batch", "2*N", "N*N", "(a + b)", "999999999999999999*N", "N*M*K", "",
                                  "0", "-1", "N*N*N*N*N*N*N*N"};

// A relation the ONNX spec states between an op's inputs (or an input and an attribute).
struct ContractRelation {
  const char* op;
  const char* kind;
  char target;  // 'i' a dim of an input, 's' a scalar input, 'v' a 1-D input's length, '@' an ints attribute's length, '#' an int attribute
  int input;
  int tied;  // changed alike (-1: none)
  int dim;   // negative: from the end; kDimOffAxis, kDimAxis
  const char* attr;
};
constexpr int kDimOffAxis = 1000;
constexpr int kDimAxis = 1001;
const ContractRelation kRelations[] = {
#include "contract_relations.inc"
};

enum Variant { kLarger, kSmaller, kWide, kZero, kRankUp, kRankDown, kEmpty, kOne, kVariants };
constexpr int64_t kWideDim = 65536;
constexpr int64_t kMaxInitializerElements = 1 << 16;

// Bytes per element of the dtypes whose initializers the contract mutation resizes; 0 for others.
size_t element_size(int32_t data_type) {
  switch (data_type) {
    case 2: case 3: case 9: return 1;                 // uint8, int8, bool
    case 4: case 5: case 10: case 16: return 2;       // uint16, int16, float16, bfloat16
    case 1: case 6: case 12: return 4;                // float, int32, uint32
    case 7: case 11: case 13: return 8;               // int64, double, uint64
    default: return 0;
  }
}

// A tensor's values as raw little-endian bytes, whatever field holds them.
std::string raw_values(const pb::TensorProto& t, size_t esize) {
  if (!t.raw_data().empty()) return t.raw_data();
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  for (float v : t.float_data()) put(&v, 4);
  for (int64_t v : t.int64_data()) put(&v, 8);
  for (double v : t.double_data()) put(&v, 8);
  for (uint64_t v : t.uint64_data()) put(&v, esize == 4 ? 4 : 8);
  for (int32_t v : t.int32_data()) put(&v, std::min<size_t>(esize, 4));  // narrow types keep their low bytes
  return out;
}

class Mutator {
 public:
  explicit Mutator(unsigned seed) : rng_(seed) {}

  void mutate(pb::ModelProto& m) {
    graphs_.clear();  // the previous mutation may have dropped a subgraph
    collect_graphs(m);
    if (graphs_.empty()) return;
    pb::GraphProto& g = *graphs_[pick(graphs_.size())];
    switch (pick(14)) {
      case 0: if (auto* n = node(g)) n->set_op_type(kOps[pick(std::size(kOps))]); break;
      case 1: if (auto* n = node(g)) extreme_attribute(*n); break;
      case 2: if (auto* n = node(g)) add_attribute(*n, g); break;
      case 3: if (auto* n = node(g); n && n->attribute_size() > 0) remove(*n->mutable_attribute(), pick(n->attribute_size())); break;
      case 4: if (auto* vi = value_info(g)) mutate_type(*vi->mutable_type()); break;
      case 5: mutate_initializer(g); break;
      case 6: if (auto* n = node(g)) rewire(*n, g); break;
      case 7: if (auto* n = node(g)) duplicate(*n, g); break;
      case 8: if (g.node_size() > 0) remove(*g.mutable_node(), pick(g.node_size())); break;
      case 9: if (m.opset_import_size() > 0) m.mutable_opset_import(0)->set_version(pick_of({1, 7, 9, 10, 11, 13, 17, 18, 20, 22})); break;
      case 10: if (auto* n = node(g)) n->add_output(fresh_name()); break;
      case 11: if (auto* n = node(g)) n->add_input(pick(4) == 0 ? std::string() : any_name(g)); break;
      case 12: if (auto* n = node(g)) break_contract(*n, g); break;
      default: if (auto* n = node(g); n && n->output_size() > 0) g.add_output()->set_name(n->output(pick(n->output_size()))); break;
    }
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  int64_t pick_of(std::initializer_list<int64_t> v) { return *(v.begin() + pick(v.size())); }
  int64_t extreme_int() { return pick(4) == 0 ? static_cast<int64_t>(rng_()) - (1 << 30) : kInts[pick(std::size(kInts))]; }
  float extreme_float() { return kFloats[pick(std::size(kFloats))]; }
  std::string fresh_name() { return "m" + std::to_string(rng_() % 1000); }

  template <typename Field>
  void remove(Field& f, int i) {
    f.SwapElements(i, f.size() - 1);
    f.RemoveLast();
  }

  void collect_graphs(pb::ModelProto& m) {
    if (m.has_graph()) collect(*m.mutable_graph());
  }
  void collect(pb::GraphProto& g) {
    graphs_.push_back(&g);
    for (auto& n : *g.mutable_node())
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) collect(*a.mutable_g());
        for (auto& sub : *a.mutable_graphs()) collect(sub);
      }
  }

  pb::NodeProto* node(pb::GraphProto& g) { return g.node_size() ? g.mutable_node(pick(g.node_size())) : nullptr; }

  pb::ValueInfoProto* value_info(pb::GraphProto& g) {
    const int n = g.input_size() + g.output_size() + g.value_info_size();
    if (n == 0) return nullptr;
    int k = static_cast<int>(pick(n));
    if (k < g.input_size()) return g.mutable_input(k);
    k -= g.input_size();
    if (k < g.output_size()) return g.mutable_output(k);
    return g.mutable_value_info(k - g.output_size());
  }

  std::string any_name(const pb::GraphProto& g) {
    std::vector<std::string> names;
    for (const auto& v : g.input()) names.push_back(v.name());
    for (const auto& t : g.initializer()) names.push_back(t.name());
    for (const auto& n : g.node())
      for (const auto& o : n.output()) names.push_back(o);
    return names.empty() ? fresh_name() : names[pick(names.size())];
  }

  void extreme_attribute(pb::NodeProto& n) {
    if (n.attribute_size() == 0) return;
    pb::AttributeProto& a = *n.mutable_attribute(pick(n.attribute_size()));
    switch (a.type()) {
      case pb::AttributeProto::INT: a.set_i(extreme_int()); break;
      case pb::AttributeProto::FLOAT: a.set_f(extreme_float()); break;
      case pb::AttributeProto::INTS:
        if (a.ints_size() == 0 || pick(4) == 0) a.add_ints(extreme_int());
        else a.set_ints(pick(a.ints_size()), extreme_int());
        break;
      case pb::AttributeProto::FLOATS:
        if (a.floats_size() == 0 || pick(4) == 0) a.add_floats(extreme_float());
        else a.set_floats(pick(a.floats_size()), extreme_float());
        break;
      case pb::AttributeProto::STRING: a.set_s(kStrings[pick(std::size(kStrings))]); break;
      case pb::AttributeProto::TENSOR: mutate_tensor(*a.mutable_t()); break;
      default:  // the kind says one thing and the fields another
        a.set_type(static_cast<pb::AttributeProto::AttributeType>(pick_of({1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13})));
    }
  }

  void add_attribute(pb::NodeProto& n, const pb::GraphProto& g) {
    pb::AttributeProto& a = *n.add_attribute();
    a.set_name(kAttrNames[pick(std::size(kAttrNames))]);
    switch (pick(6)) {
      case 0: a.set_type(pb::AttributeProto::INT); a.set_i(extreme_int()); break;
      case 1:
        a.set_type(pb::AttributeProto::INTS);
        for (size_t k = pick(5); k > 0; --k) a.add_ints(pick(2) ? extreme_int() : static_cast<int64_t>(pick(5)) - 2);
        break;
      case 2: a.set_type(pb::AttributeProto::FLOAT); a.set_f(extreme_float()); break;
      case 3: a.set_type(pb::AttributeProto::STRING); a.set_s(kStrings[pick(std::size(kStrings))]); break;
      case 4: {
        a.set_type(pb::AttributeProto::GRAPH);
        if (pick(2) == 0) break;  // a graph attribute that holds nothing
        pb::GraphProto copy = g;  // copied first: `a` lies inside g
        *a.mutable_g() = std::move(copy);
        break;
      }
      default: {
        a.set_type(pb::AttributeProto::TENSOR);
        pb::TensorProto& t = *a.mutable_t();
        t.set_data_type(pick(2) ? 7 : 1);
        t.add_dims(1);
        if (t.data_type() == 7) t.add_int64_data(extreme_int());
        else t.add_float_data(extreme_float());
      }
    }
  }

  void mutate_type(pb::TypeProto& t) {
    if (!t.has_tensor_type() || pick(8) == 0) {
      t.mutable_tensor_type()->set_elem_type(static_cast<int32_t>(pick(30)));
      return;
    }
    auto& tt = *t.mutable_tensor_type();
    auto& s = *tt.mutable_shape();
    switch (pick(5)) {
      case 0: tt.set_elem_type(static_cast<int32_t>(pick(30))); break;
      case 1: s.add_dim()->set_dim_value(pick(3) ? static_cast<int64_t>(pick(5)) : extreme_int()); break;
      case 2: if (s.dim_size() > 0) remove(*s.mutable_dim(), pick(s.dim_size())); break;
      case 3: if (s.dim_size() > 0) s.mutable_dim(pick(s.dim_size()))->set_dim_param(kDimParams[pick(std::size(kDimParams))]); break;
      default: if (s.dim_size() > 0) s.mutable_dim(pick(s.dim_size()))->set_dim_value(extreme_int());
    }
  }

  void mutate_tensor(pb::TensorProto& t) {
    if (t.int64_data_size() > 0) t.set_int64_data(pick(t.int64_data_size()), extreme_int());
    else if (t.float_data_size() > 0) t.set_float_data(pick(t.float_data_size()), extreme_float());
    else if (t.int32_data_size() > 0) t.set_int32_data(pick(t.int32_data_size()), static_cast<int32_t>(extreme_int()));
    else if (t.raw_data().size() >= 8 && t.data_type() == 7) {
      std::string raw = t.raw_data();
      const int64_t v = extreme_int();
      std::memcpy(&raw[8 * pick(raw.size() / 8)], &v, 8);
      t.set_raw_data(raw);
    } else if (t.raw_data().size() >= 4 && t.data_type() == 1) {
      std::string raw = t.raw_data();
      const float v = extreme_float();
      std::memcpy(&raw[4 * pick(raw.size() / 4)], &v, 4);
      t.set_raw_data(raw);
    } else if (t.dims_size() > 0) {
      t.set_dims(pick(t.dims_size()), pick(2) ? static_cast<int64_t>(pick(4)) : extreme_int());
    }
  }

  void mutate_initializer(pb::GraphProto& g) {
    if (g.initializer_size() == 0) return;
    pb::TensorProto& t = *g.mutable_initializer(pick(g.initializer_size()));
    if (pick(6) == 0) t.set_data_type(static_cast<int32_t>(pick(30)));
    else mutate_tensor(t);
  }

  void rewire(pb::NodeProto& n, const pb::GraphProto& g) {
    if (n.input_size() == 0) {
      n.add_input(any_name(g));
      return;
    }
    n.set_input(pick(n.input_size()), pick(5) == 0 ? std::string() : any_name(g));
  }

  // ---- shape contracts ----------------------------------------------------------------------
  void break_contract(pb::NodeProto& n, pb::GraphProto& g) {
    std::vector<const ContractRelation*> rows;
    for (const auto& r : kRelations)
      if (n.op_type() == r.op) rows.push_back(&r);
    if (rows.empty()) return;
    const ContractRelation& r = *rows[pick(rows.size())];
    const auto v = static_cast<Variant>(pick(kVariants));
    if (r.target == '@' || r.target == '#') {
      pb::AttributeProto* a = nullptr;
      for (auto& x : *n.mutable_attribute())
        if (x.name() == r.attr) a = &x;
      if (a == nullptr) {
        a = n.add_attribute();
        a->set_name(r.attr);
        a->set_type(r.target == '@' ? pb::AttributeProto::INTS : pb::AttributeProto::INT);
        if (r.target == '@')
          for (int k = 0; k < 2; ++k) a->add_ints(1);
      }
      if (r.target == '@') resize_ints(*a, v);
      else a->set_i(pick_of({a->i() + 1, a->i() - 1, kWideDim, 0, 1, -kWideDim}));
      return;
    }
    int64_t axis = 0;
    for (const auto& x : n.attribute())
      if (x.name() == "axis") axis = x.i();
    for (int idx : {r.input, r.tied})
      if (idx >= 0 && idx < n.input_size() && !n.input(idx).empty()) resize_input(g, n.input(idx), r, v, axis);
  }

  void resize_ints(pb::AttributeProto& a, Variant v) {
    a.set_type(pb::AttributeProto::INTS);
    switch (v) {
      case kLarger: case kRankUp: a.add_ints(a.name() == "pads" || a.name() == "output_padding" ? 0 : 1); break;
      case kSmaller: case kRankDown: if (a.ints_size() > 0) a.mutable_ints()->RemoveLast(); break;
      case kWide: if (a.ints_size() > 0) a.set_ints(0, kWideDim); else a.add_ints(kWideDim); break;
      case kZero: case kEmpty: a.clear_ints(); break;
      default: while (a.ints_size() > 1) a.mutable_ints()->RemoveLast();
    }
  }

  // The dims `r` and `v` make of `dims`; false when the variant does not apply.
  bool new_dims(std::vector<int64_t>& dims, const ContractRelation& r, Variant v, int64_t axis) {
    const auto rank = static_cast<int64_t>(dims.size());
    if (r.target == 's') {
      static const std::vector<int64_t> kShapes[kVariants] = {{2}, {2}, {kWideDim}, {0}, {1, 1}, {2}, {0}, {1}};
      dims = kShapes[v];
      return true;
    }
    if (r.target == 'v') {
      if (rank != 1) return false;
      switch (v) {
        case kLarger: ++dims[0]; return true;
        case kSmaller: if (dims[0] == 0) return false; --dims[0]; return true;
        case kZero: case kEmpty: dims[0] = 0; return true;
        case kRankUp: dims.insert(dims.begin(), 1); return true;
        case kRankDown: if (dims[0] != 1) return false; dims.clear(); return true;
        default: dims[0] = 1; return true;
      }
    }
    if (rank == 0) return false;
    if (axis < 0) axis += rank;
    int64_t d = r.dim == kDimAxis ? axis : r.dim == kDimOffAxis ? (axis == 0 ? 1 : 0) : r.dim < 0 ? rank + r.dim : r.dim;
    if (d < 0 || d >= rank) return false;
    switch (v) {
      case kLarger: ++dims[d]; break;
      case kSmaller: if (dims[d] <= 1) return false; --dims[d]; break;
      case kWide: dims[d] = kWideDim; break;
      case kZero: dims[d] = 0; break;
      case kRankUp: dims.insert(dims.begin(), 2); break;
      case kRankDown: dims.erase(dims.begin()); break;
      case kEmpty: dims = {0}; break;
      default: dims[d] = 1;
    }
    return true;
  }

  void resize_input(pb::GraphProto& g, const std::string& name, const ContractRelation& r, Variant v, int64_t axis) {
    for (auto& t : *g.mutable_initializer()) {
      if (t.name() != name) continue;
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      if (!new_dims(dims, r, v, axis)) return;
      resize_initializer(t, dims, r.target == 'v' && v == kWide);
      return;
    }
    for (auto& in : *g.mutable_input()) {
      if (in.name() != name || !in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
      auto& shape = *in.mutable_type()->mutable_tensor_type()->mutable_shape();
      std::vector<int64_t> dims;
      for (const auto& d : shape.dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : 3);
      if (!new_dims(dims, r, v, axis)) return;
      shape.clear_dim();
      for (int64_t d : dims) shape.add_dim()->set_dim_value(d);
      return;
    }
  }

  // Gives `t` the dims `dims`, its values repeated to fill them (indices stay in range);
  // `wide_value` sets the first value to 65536 instead (a shape tensor's entry).
  void resize_initializer(pb::TensorProto& t, const std::vector<int64_t>& dims, bool wide_value) {
    const size_t esize = element_size(t.data_type());
    if (esize == 0) return;
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0 || d > kMaxInitializerElements) return;
      n *= d;
      if (n > kMaxInitializerElements) return;
    }
    const std::string old = raw_values(t, esize);
    std::string raw(static_cast<size_t>(n) * esize, '\0');
    const size_t old_n = old.size() / esize;
    for (int64_t i = 0; i < n && old_n > 0; ++i)
      std::memcpy(&raw[static_cast<size_t>(i) * esize], &old[(static_cast<size_t>(i) % old_n) * esize], esize);
    if (wide_value && n > 0) {
      if (t.data_type() == 7) std::memcpy(&raw[0], &kWideDim, 8);
      else if (t.data_type() == 6) { const int32_t w = kWideDim; std::memcpy(&raw[0], &w, 4); }
      else if (t.data_type() == 1) { const float w = kWideDim; std::memcpy(&raw[0], &w, 4); }
    }
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.clear_uint64_data();
    t.clear_dims();
    for (int64_t d : dims) t.add_dims(d);
    t.set_raw_data(raw);
  }

  void duplicate(const pb::NodeProto& n, pb::GraphProto& g) {
    pb::NodeProto copy = n;
    for (auto& o : *copy.mutable_output())
      if (!o.empty()) o += "_" + std::to_string(rng_() % 100);
    *g.add_node() = std::move(copy);
  }

  std::mt19937_64 rng_;
  std::vector<pb::GraphProto*> graphs_;
};

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  pb::ModelProto m;
  if (seed % 2 == 0 || !m.ParseFromArray(data, static_cast<int>(size))) return LLVMFuzzerMutate(data, size, max_size);
  Mutator mutator(seed);
  for (unsigned k = 1 + seed % 3; k > 0; --k) mutator.mutate(m);
  const std::string out = m.SerializeAsString();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
