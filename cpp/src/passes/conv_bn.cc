// Conv + BatchNormalization folding: at inference BN is a per-channel affine map, which the
// conv's weights and bias can absorb.
#include <cmath>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

struct BnMatch {
  ir::Node* conv;
  ir::Tensor w, b;  // b invalid when the conv has no bias
  ir::Tensor scale, shift, mean, var;
  double epsilon;
  int64_t cout;
};

bool float_vector(const ir::Tensor& t, int64_t n) {
  return t.dtype() == ir::DType::kFloat32 && t.rank() == 1 && t.dims()[0] == n;
}

// BN that computes (x - mean) / sqrt(var + eps) * scale + shift with constant parameters:
// inference mode, per channel, the running-statistics outputs unread.
bool is_inference_bn(const ir::Node& bn) {
  if (!is_onnx(bn, "BatchNormalization") || bn.attr_int("training_mode", 0) != 0 || bn.attr_int("spatial", 1) != 1)
    return false;
  for (size_t i = 1; i < bn.outputs().size(); ++i)
    if (bn.output(i) != nullptr && (!bn.output(i)->uses().empty() || is_any_output(*bn.output(i)))) return false;
  return bn.output(0) != nullptr;
}

std::optional<BnMatch> match(ir::Node& bn) {
  if (!is_inference_bn(bn) || bn.input(0) == nullptr) return std::nullopt;
  ir::Node* conv = bn.input(0)->producer();
  if (conv == nullptr || !(is_onnx(*conv, "Conv") || is_onnx(*conv, "ConvTranspose"))) return std::nullopt;
  if (bn.input(0) != conv->output(0) || !only_reader(*conv->output(0), bn)) return std::nullopt;
  auto w = constant_of(conv->input(1));
  if (!w || w->dtype() != ir::DType::kFloat32 || w->rank() < 3) return std::nullopt;
  const bool transpose = conv->op_type() == "ConvTranspose";
  const int64_t group = conv->attr_int("group", 1);
  const int64_t cout = transpose ? w->dims()[1] * group : w->dims()[0];
  if (w->num_elements() == 0 || group < 1 || (transpose && w->dims()[0] % group != 0)) return std::nullopt;
  BnMatch m{conv, *w, {}, {}, {}, {}, {}, bn.attr_float("epsilon", 1e-5f), cout};
  if (conv->input(2) != nullptr) {
    auto b = constant_of(conv->input(2));
    if (!b || !float_vector(*b, cout)) return std::nullopt;
    m.b = *b;
  }
  ir::Tensor* params[] = {&m.scale, &m.shift, &m.mean, &m.var};
  for (size_t i = 0; i < 4; ++i) {
    auto t = constant_of(bn.input(i + 1));
    if (!t || !float_vector(*t, cout)) return std::nullopt;
    *params[i] = *t;
  }
  return m;
}

// W'[oc, ...] = W[oc, ...] * s[oc] and b'[oc] = (b[oc] - mean[oc]) * s[oc] + shift[oc], with
// s = scale / sqrt(var + eps), in double. ConvTranspose's weight is [cin, cout / group, k...].
std::pair<ir::Tensor, ir::Tensor> fold_weights(const BnMatch& m, bool transpose) {
  std::vector<double> s(static_cast<size_t>(m.cout));
  for (int64_t c = 0; c < m.cout; ++c)
    s[c] = static_cast<double>(m.scale.data<float>()[c]) / std::sqrt(static_cast<double>(m.var.data<float>()[c]) + m.epsilon);
  ir::Tensor w = ir::Tensor::zeros(ir::DType::kFloat32, m.w.dims());
  const float* src = m.w.data<float>();
  float* dst = w.mutable_data<float>();
  const int64_t d0 = m.w.dims()[0], d1 = m.w.dims()[1];
  const int64_t inner = m.w.num_elements() / (d0 * d1);
  const int64_t cout_g = transpose ? d1 : 0, cin_g = transpose ? d0 / (m.cout / cout_g) : 0;
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j) {
      const int64_t oc = transpose ? (i / cin_g) * cout_g + j : i;
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t at = (i * d1 + j) * inner + k;
        dst[at] = static_cast<float>(static_cast<double>(src[at]) * s[oc]);
      }
    }
  ir::Tensor b = ir::Tensor::zeros(ir::DType::kFloat32, {m.cout});
  float* bd = b.mutable_data<float>();
  for (int64_t c = 0; c < m.cout; ++c) {
    const double b0 = m.b.is_valid() ? m.b.data<float>()[c] : 0.0;
    bd[c] = static_cast<float>((b0 - m.mean.data<float>()[c]) * s[c] + m.shift.data<float>()[c]);
  }
  return {std::move(w), std::move(b)};
}

}  // namespace

int fold_conv_batchnorm(ir::Graph& g) {
  int folded = 0;
  for (ir::Node* bn : g.topological_order()) {
    std::optional<BnMatch> m = match(*bn);
    if (!m) continue;
    ir::Node* conv = m->conv;
    const bool transpose = conv->op_type() == "ConvTranspose";
    auto [w, b] = fold_weights(*m, transpose);
    ir::Value* wv = g.add_initializer(std::move(w), unique_name(g, conv->input(1)->name() + "_bn"));
    ir::Value* bv = g.add_initializer(std::move(b), unique_name(g, bn->output(0)->name() + "_bias"));
    replace_chain(g, {conv, bn}, conv->op_type(), "", {conv->input(0), wv, bv}, conv->attributes());
    ++folded;
  }
  return folded;
}

}  // namespace tether::passes
