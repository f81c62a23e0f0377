// Channels-last float convolutions. tether's float convolution kernel reads each input pixel's
// channels as one contiguous run and writes each output pixel's channels alike
// (engine/cpu/conv_nhwc.h), so this pass gives 2-D float convolutions (any group,
// constant weights) the ai.tether FusedConv form with channels_last = 1, X and Y [N, H, W, C],
// between a Transpose to channels last and one back. The nodes after them that do not care
// about the layout follow them to channels last: element-wise ops (their other operands,
// when they broadcast per channel or are scalars, are laid out to match), max and average
// pooling, global pooling, Concat over channels; Transposes of Transposes are merged, and
// those that undo each other go. A CNN then runs channels last from its first convolution to
// its last, with a Transpose at each end and wherever a node that needs the ONNX layout reads
// a channels-last value.
//
// A value that is a graph output or kept (CompileOptions::keep) keeps its layout: those nodes
// are left as they are, so what callers read is always the ONNX layout.
#include <algorithm>

#include "ops/conv_geometry.h"
#include "passes/layout.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

using ir::DType;

bool float32(const ir::Value* v) { return v != nullptr && v->type().dtype() == DType::kFloat32; }

// A 2-D float Conv or FusedConv the channels-last kernel runs: constant 4-D weights (any
// group), and an output the caller does not read.
bool convertible(const ir::Node& n) {
  const bool fused = n.domain() == "ai.tether" && n.op_type() == "FusedConv";
  if (!is_onnx(n, "Conv") && !fused) return false;
  if (n.attr_int("channels_last", 0) != 0 || n.output(0) == nullptr || n.inputs().size() < 2) return false;
  const ir::Value* x = n.input(0);
  const ir::Value* y = n.output(0);
  if (!rank4(x) || !rank4(y) || !float32(x) || !float32(y) || is_any_output(*y)) return false;
  std::optional<ir::Tensor> w = constant_of(n.input(1));
  if (!w || w->rank() != 4 || w->dtype() != DType::kFloat32) return false;
  const int64_t group = n.attr_int("group", 1);
  return group >= 1 && w->dims()[0] % group == 0 && x->type().shape()[1].is_known() &&
         x->type().shape()[1].value() == group * w->dims()[1];
}

// `v` channels last: the output of a Transpose to channels last that already reads it (several
// convolutions of one input share it), else of a new one.
ir::Value* to_last(ir::Graph& g, ir::Value* v) {
  for (const ir::Use& u : v->uses())
    if (u.node != nullptr && u.node->graph() == &g && is_transpose(u.node, kToLast) && u.node->output(0) != nullptr)
      return u.node->output(0);
  return transpose_of(g, v, kToLast, "_nhwc");
}

void convert_conv(ir::Model& model, ir::Node* n) {
  ir::Graph& g = model.graph();
  std::vector<ir::Attribute> attributes = n->attributes();
  attributes.push_back(ir::Attribute::i("channels_last", 1));
  std::vector<ir::Value*> inputs = n->inputs();
  inputs[0] = to_last(g, inputs[0]);
  // FusedConv's summand is laid out as the output.
  if (inputs.size() > 3 && inputs[3] != nullptr) inputs[3] = to_last(g, inputs[3]);
  ir::Node* c = replace_chain(g, {n}, "FusedConv", "ai.tether", inputs, attributes);
  import_tether_opset(model);
  output_last(g, c);
}

// Element-wise ops of one input whose output has its input's shape.
bool is_unary(const ir::Node& n) {
  static const char* const kOps[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish",
                                     "Erf", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Softplus",
                                     "Softsign", "Elu", "Selu", "Celu", "Mish", "Gelu", "Floor", "Ceil", "Round",
                                     "Sign", "Sin", "Cos", "Identity"};
  for (const char* op : kOps)
    if (is_onnx(n, op)) return true;
  return n.domain() == "ai.tether" && n.op_type() == "Gelu";  // fuse_gelu's, before opset 20
}

bool is_binary(const ir::Node& n) {
  static const char* const kOps[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"};
  for (const char* op : kOps)
    if (is_onnx(n, op)) return n.inputs().size() == 2;
  return false;
}

// Known static dims of `v`, or empty.
std::vector<int64_t> static_dims(const ir::Value* v) {
  if (v == nullptr || !v->type().shape().is_static()) return {};
  std::vector<int64_t> d;
  for (size_t i = 0; i < v->type().shape().rank(); ++i) d.push_back(v->type().shape()[i].value());
  return d;
}

// What operand `v` of an element-wise node becomes when the node runs channels last on a
// 4-D output with `channels` channels: the channels-last value it came from, itself when it
// is one value broadcast everywhere, the same values laid out as [1, 1, 1, C] or [1, 1, C]
// when it varies along the channels only, a Transpose of it when it is a 4-D value of
// [N, C, 1, 1]; nullptr when it cannot follow.
ir::Value* operand_last(ir::Graph& g, ir::Value* v, int64_t channels) {
  if (from_channels_last(v)) return v->producer()->input(0);
  const std::vector<int64_t> d = static_dims(v);
  if (!v->type().shape().has_rank() || (v->type().shape().is_static() && d.empty() && v->type().shape().rank() > 0))
    return nullptr;
  int64_t numel = 1;
  for (int64_t e : d) numel *= e;
  if (v->type().shape().is_static() && numel == 1) return v;
  // [C, 1, 1] or [1, C, 1, 1] (or [N, C, 1, 1] computed).
  const bool per_channel = (d.size() == 3 && d[0] == channels && d[1] == 1 && d[2] == 1) ||
                           (d.size() == 4 && d[1] == channels && d[2] == 1 && d[3] == 1);
  if (!per_channel) return nullptr;
  if (std::optional<ir::Tensor> c = constant_of(v)) {
    if (d.size() == 4 && d[0] != 1) return nullptr;
    // Only dims of size 1 move: the values keep their order.
    std::vector<int64_t> dims = d.size() == 3 ? std::vector<int64_t>{1, 1, channels} : std::vector<int64_t>{1, 1, 1, channels};
    ir::Value* out = g.add_initializer(ir::Tensor::from_buffer(c->dtype(), dims, c->buffer()),
                                       unique_name(g, v->name() + "_nhwc"));
    return out;
  }
  if (d.size() != 4) return nullptr;
  return to_last(g, v);
}

bool same_shape(const ir::Shape& a, const ir::Shape& b) {
  if (!a.has_rank() || !b.has_rank() || a.rank() != b.rank()) return false;
  for (size_t i = 0; i < a.rank(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

// The node's output as the ONNX layout has it [N, C, H, W] (static or not).
const ir::Shape& shape_of(const ir::Node& n) { return n.output(0)->type().shape(); }

bool follow_elementwise(ir::Graph& g, ir::Node* n) {
  if (!rank4(n->output(0)) || !float32(n->output(0))) return false;
  const ir::Shape& y = shape_of(*n);
  if (!y[1].is_known()) return false;
  const int64_t channels = y[1].value();
  bool any = false;
  for (const ir::Value* in : n->inputs())
    any = any || (from_channels_last(in) && same_shape(in->type().shape(), y));
  if (!any) return false;
  if (is_unary(*n)) {
    if (!from_channels_last(n->input(0))) return false;
    for (size_t i = 1; i < n->inputs().size(); ++i) {
      const ir::Value* v = n->input(i);
      if (v != nullptr && !(constant_of(v) && constant_of(v)->num_elements() == 1)) return false;
    }
    n->set_input(0, n->input(0)->producer()->input(0));
    return true;
  }
  std::vector<ir::Value*> adapted;
  for (ir::Value* in : n->inputs()) {
    ir::Value* a = operand_last(g, in, channels);
    if (a == nullptr) return false;
    adapted.push_back(a);
  }
  for (size_t i = 0; i < adapted.size(); ++i) n->set_input(i, adapted[i]);
  return true;
}

// MaxPool / AveragePool (2-D, one output) and GlobalAveragePool / GlobalMaxPool of a
// channels-last value become their ai.tether channels-last forms.
ir::Node* follow_pool(ir::Model& model, ir::Node* n) {
  const bool windowed = is_onnx(*n, "MaxPool") || is_onnx(*n, "AveragePool");
  const bool global = is_onnx(*n, "GlobalAveragePool") || is_onnx(*n, "GlobalMaxPool");
  if (!windowed && !global) return nullptr;
  if (!float32(n->output(0)) || !rank4(n->output(0)) || !from_channels_last(n->input(0))) return nullptr;
  if (n->outputs().size() > 1 && n->output(1) != nullptr) return nullptr;
  if (n->attr_int("storage_order", 0) != 0) return nullptr;
  if (is_onnx(*n, "AveragePool"))
    for (int64_t d : n->attr_ints("dilations"))
      if (d != 1) return nullptr;
  std::vector<ir::Attribute> attributes = n->attributes();
  attributes.push_back(ir::Attribute::i("channels_last", 1));
  ir::Node* p = replace_chain(model.graph(), {n}, n->op_type(), "ai.tether", {n->input(0)->producer()->input(0)},
                              attributes);
  import_tether_opset(model);
  return p;
}

bool follow_concat(ir::Node* n) {
  if (!is_onnx(*n, "Concat") || !rank4(n->output(0))) return false;
  const int64_t axis = n->attr_int("axis", 0);
  if (axis != 1 && axis != -3) return false;
  for (const ir::Value* in : n->inputs())
    if (!from_channels_last(in)) return false;
  for (size_t i = 0; i < n->inputs().size(); ++i) n->set_input(i, n->input(i)->producer()->input(0));
  n->set_attr(ir::Attribute::i("axis", 3));
  return true;
}

// ReduceMean / ReduceSum / ReduceMax / ReduceMin keeping dims (global pooling as timm writes it)
// of a channels-last value: the same reduction over the axes where those dims now lie.
bool follow_reduce(ir::Graph& g, ir::Node* n) {
  if (!is_onnx(*n, "ReduceMean") && !is_onnx(*n, "ReduceSum") && !is_onnx(*n, "ReduceMax") &&
      !is_onnx(*n, "ReduceMin"))
    return false;
  if (n->attr_int("keepdims", 1) != 1 || !rank4(n->output(0)) || !from_channels_last(n->input(0))) return false;
  const bool from_input = n->attr("axes") == nullptr && n->input(1) != nullptr;
  std::vector<int64_t> axes;
  if (from_input) {
    std::optional<ir::Tensor> t = constant_of(n->input(1));
    if (!t || t->dtype() != DType::kInt64) return false;
    axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
  } else {
    axes = n->attr_ints("axes");
  }
  if (axes.empty()) return false;  // all dims, or none: left as it is
  for (int64_t& a : axes) {
    if (a < -4 || a > 3) return false;
    a = kToFirst[static_cast<size_t>(a < 0 ? a + 4 : a)];
  }
  std::sort(axes.begin(), axes.end());
  if (from_input) {
    ir::Tensor t = ir::Tensor::zeros(DType::kInt64, {static_cast<int64_t>(axes.size())});
    std::copy(axes.begin(), axes.end(), t.mutable_data<int64_t>());
    n->set_input(1, g.add_initializer(std::move(t), unique_name(g, n->input(1)->name() + "_nhwc")));
  } else {
    n->set_attr(ir::Attribute::ints("axes", axes));
  }
  n->set_input(0, n->input(0)->producer()->input(0));
  return true;
}

// A 1-D tensor of 4 values (scales, sizes, a shape) reordered by `perm`: a constant when it is
// one, else a Gather.
ir::Value* permuted_vector(ir::Graph& g, ir::Value* v, const std::vector<int64_t>& perm) {
  if (std::optional<ir::Tensor> t = constant_of(v)) {
    ir::Tensor out = ir::Tensor::zeros(t->dtype(), {4});
    const size_t esize = static_cast<size_t>(ir::dtype_bits(t->dtype()) / 8);
    const auto* src = static_cast<const std::byte*>(t->raw_data());
    auto* dst = static_cast<std::byte*>(out.mutable_raw_data());
    for (size_t i = 0; i < 4; ++i)
      std::copy(src + static_cast<size_t>(perm[i]) * esize, src + (static_cast<size_t>(perm[i]) + 1) * esize,
                dst + i * esize);
    return g.add_initializer(std::move(out), unique_name(g, v->name() + "_nhwc"));
  }
  ir::Tensor index = ir::Tensor::zeros(DType::kInt64, {4});
  std::copy(perm.begin(), perm.end(), index.mutable_data<int64_t>());
  ir::Value* indices = g.add_initializer(std::move(index), unique_name(g, v->name() + "_perm"));
  const std::string name = unique_name(g, v->name() + "_permuted");
  ir::Node* gather = g.add_node("Gather", {v, indices}, {name}, name);
  gather->output(0)->set_type(v->type());
  return gather->output(0);
}

// Resize (and Upsample) of a channels-last value: the same resize with its constant scales or
// sizes in the order of the channels-last dims.
bool follow_resize(ir::Graph& g, ir::Node* n) {
  if (!is_onnx(*n, "Resize") && !is_onnx(*n, "Upsample")) return false;
  if (!rank4(n->output(0)) || !from_channels_last(n->input(0)) || n->attr("axes") != nullptr) return false;
  if (n->attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize") return false;
  if (n->attr("scales") != nullptr) return false;  // Upsample-7's attribute
  // Scales or sizes: the input past X with 4 values (roi, before them from opset 11, and the
  // one of scales and sizes not used are empty).
  size_t slot = 0;
  for (size_t i = 1; i < n->inputs().size(); ++i) {
    const ir::Value* v = n->input(i);
    if (v == nullptr) continue;
    const ir::Shape& shape = v->type().shape();
    if (shape.has_rank() && shape.rank() == 1 && shape[0].is_known() && shape[0].value() == 4) {
      slot = i;
      continue;
    }
    const std::optional<ir::Tensor> t = constant_of(v);
    if (!t || t->num_elements() != 0) return false;
  }
  if (slot == 0) return false;
  n->set_input(slot, permuted_vector(g, n->input(slot), kToLast));
  n->set_input(0, n->input(0)->producer()->input(0));
  return true;
}

// Shape of a channels-last value (start and end too): its Shape, gathered back into the ONNX order.
bool follow_shape(ir::Graph& g, ir::Node* n) {
  if (!is_onnx(*n, "Shape") || !from_channels_last(n->input(0)) || is_any_output(*n->output(0))) return false;
  auto clamp = [](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + 4 : v, 0, 4); };
  const int64_t start = clamp(n->attr_int("start", 0)), end = clamp(n->attr_int("end", 4));
  std::vector<int64_t> dims;  // which dims of the channels-last shape, in the ONNX order
  for (int64_t i = start; i < end; ++i) dims.push_back(kToFirst[static_cast<size_t>(i)]);
  ir::Value* nchw = n->output(0);
  ir::Value* tmp = park_uses(g, nchw);
  ir::Value* last = n->input(0)->producer()->input(0);
  const std::string name = unique_name(g, nchw->name() + "_nhwc");
  ir::Node* shape = g.add_node("Shape", {last}, {name}, name);
  shape->output(0)->set_type(ir::ValueType::tensor(DType::kInt64, ir::Shape::of({4})));
  ir::Tensor index = ir::Tensor::zeros(DType::kInt64, {static_cast<int64_t>(dims.size())});
  std::copy(dims.begin(), dims.end(), index.mutable_data<int64_t>());
  ir::Value* indices = g.add_initializer(std::move(index), unique_name(g, name + "_perm"));
  const std::string gname = unique_name(g, nchw->name() + "_permuted");
  ir::Node* gather = g.add_node("Gather", {shape->output(0), indices}, {gname}, gname);
  gather->output(0)->set_type(nchw->type());
  g.remove_node(n);
  unpark(g, tmp, gather->output(0));
  return true;
}

// Split over channels of a channels-last value: the same split over axis 3.
bool follow_split(ir::Node* n) {
  if (!is_onnx(*n, "Split") || !from_channels_last(n->input(0)) || !rank4(n->input(0))) return false;
  const int64_t axis = n->attr_int("axis", 0);
  if (axis != 1 && axis != -3) return false;
  n->set_input(0, n->input(0)->producer()->input(0));
  n->set_attr(ir::Attribute::i("axis", 3));
  return true;
}

// ConvTranspose of a channels-last value whose kernel equals its stride (no padding, dilation
// or groups), with constant float weights: ai.tether ConvTranspose with channels_last = 1.
ir::Node* follow_conv_transpose(ir::Model& model, ir::Node* n) {
  if (!is_onnx(*n, "ConvTranspose") || !rank4(n->output(0)) || !float32(n->output(0))) return nullptr;
  if (!from_channels_last(n->input(0))) return nullptr;
  const std::optional<ir::Tensor> w = constant_of(n->input(1));
  if (!w || w->dtype() != DType::kFloat32 || w->rank() != 4 || !ops::conv_transpose_is_patch_scatter(*n, w->dims()))
    return nullptr;
  std::vector<ir::Value*> inputs = n->inputs();
  inputs[0] = inputs[0]->producer()->input(0);
  std::vector<ir::Attribute> attributes = n->attributes();
  attributes.push_back(ir::Attribute::i("channels_last", 1));
  ir::Node* t = replace_chain(model.graph(), {n}, "ConvTranspose", "ai.tether", inputs, attributes);
  import_tether_opset(model);
  return t;
}

// Moves `n` to channels last when it can follow its inputs there; returns the node that now
// computes its output (n itself, or its replacement), or nullptr.
ir::Node* follow(ir::Model& model, ir::Node* n) {
  if (!n->domain().empty() || n->outputs().empty() || n->output(0) == nullptr) return nullptr;
  for (const ir::Value* out : n->outputs())
    if (out != nullptr && is_any_output(*out)) return nullptr;
  if (ir::Node* p = follow_pool(model, n)) return p;
  if (ir::Node* t = follow_conv_transpose(model, n)) return t;
  if (follow_concat(n) || follow_split(n) || follow_reduce(model.graph(), n) || follow_resize(model.graph(), n))
    return n;
  if ((is_unary(*n) || is_binary(*n)) && follow_elementwise(model.graph(), n)) return n;
  return nullptr;
}

}  // namespace

int channels_last_float_convs(ir::Model& model) {
  ir::Graph& g = model.graph();
  std::vector<ir::Node*> convs;
  for (ir::Node* n : g.topological_order())
    if (convertible(*n)) convs.push_back(n);
  if (convs.empty()) return 0;
  for (ir::Node* n : convs) convert_conv(model, n);
  int converted = static_cast<int>(convs.size());
  g.sort_topologically();
  merge_transposes(g);
  // In topological order a node's inputs have been moved before it is looked at.
  for (ir::Node* n : g.topological_order()) {
    if (follow_shape(g, n)) continue;
    if (ir::Node* moved = follow(model, n)) {
      for (size_t i = 0; i < moved->outputs().size(); ++i)
        if (moved->output(i) != nullptr) output_last(g, moved, i);
      ++converted;
    }
  }
  g.sort_topologically();
  merge_transposes(g);
  remove_dead_nodes(g);
  return converted;
}

}  // namespace tether::passes
