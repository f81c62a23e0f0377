// Recurrent layers: RNN, GRU and LSTM (shaders/rnn_step.comp), as the CPU engine runs them:
// forward, reverse and bidirectional; layout 0 and 1; sequence_lens; initial states; LSTM
// peepholes and input_forget; GRU linear_before_reset; the activations attribute with its
// alphas and betas; clip. A time step depends on the one before, so each step is one dispatch
// (two for GRU without linear_before_reset: the reset gate first) over every direction,
// batch row and hidden unit, the state kept in float32 in the kernel's scratch.
#include <algorithm>
#include <cctype>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

enum Cell : uint32_t { kRnn = 0, kGru, kLstm };

Cell cell_of(const std::string& op) { return op == "LSTM" ? kLstm : op == "GRU" ? kGru : kRnn; }
size_t activations_of(Cell c) { return c == kRnn ? 1 : c == kGru ? 2 : 3; }

// An activation by name: its code in rnn_step.comp's apply() and default alpha, beta.
struct Named {
  const char* name;
  uint32_t kind;
  float alpha, beta;
};

constexpr Named kActivations[] = {
    {"relu", 0, 0, 0},           {"tanh", 1, 0, 0},          {"sigmoid", 2, 0, 0},       {"affine", 3, 1.0f, 0.0f},
    {"leakyrelu", 4, 0.01f, 0},  {"thresholdedrelu", 5, 1.0f, 0}, {"scaledtanh", 6, 1.0f, 1.0f},
    {"hardsigmoid", 7, 0.2f, 0.5f}, {"elu", 8, 1.0f, 0},     {"softsign", 9, 0, 0},      {"softplus", 10, 0, 0},
};

const Named* find_activation(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Named& a : kActivations)
    if (name == a.name) return &a;
  return nullptr;
}

int directions_of(const ir::Node& n) { return n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1; }

// The node's activation names, one list per direction, defaults filled in; a bidirectional
// node giving one direction's list uses it for both, as onnxruntime does.
std::vector<std::string> activation_names(const ir::Node& n, Cell cell) {
  std::vector<std::string> names;
  if (const ir::Attribute* a = n.attr("activations")) names = a->as_strings();
  if (names.empty()) {
    if (cell == kRnn) names = {"Tanh"};
    else if (cell == kGru) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  if (directions_of(n) == 2 && names.size() == activations_of(cell)) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  return names;
}

// Specialisation constants 1-19 of rnn_step.comp: the cell, then per direction and slot the
// activation's kind, alphas, betas (an explicit alpha or beta replaces the default in order).
std::vector<uint32_t> spec_of(const ir::Node& n, Cell cell) {
  const std::vector<std::string> names = activation_names(n, cell);
  const std::vector<float> alphas = n.attr("activation_alpha") ? n.attr("activation_alpha")->as_floats() : std::vector<float>{};
  const std::vector<float> betas = n.attr("activation_beta") ? n.attr("activation_beta")->as_floats() : std::vector<float>{};
  uint32_t kinds[6] = {2, 1, 1, 2, 1, 1};
  float a[6] = {}, b[6] = {};
  size_t next_alpha = 0, next_beta = 0;
  const size_t per = activations_of(cell);
  for (size_t k = 0; k < names.size(); ++k) {
    const Named* f = find_activation(names[k]);
    const size_t slot = (k / per) * 3 + k % per;
    kinds[slot] = f->kind;
    a[slot] = f->alpha;
    b[slot] = f->beta;
    // Only the functions that take an alpha (a beta) consume one, in order.
    if (f->kind >= 3 && f->kind <= 8)
      if (next_alpha < alphas.size()) a[slot] = alphas[next_alpha++];
    if (f->kind == 3 || f->kind == 6 || f->kind == 7)
      if (next_beta < betas.size()) b[slot] = betas[next_beta++];
  }
  std::vector<uint32_t> spec = {kLocal, cell};
  for (uint32_t k : kinds) spec.push_back(k);
  for (float v : a) spec.push_back(float_bits(v));
  for (float v : b) spec.push_back(float_bits(v));
  return spec;
}

struct RnnPush {
  uint32_t seq, batch, in_size, hidden, dirs, step, phase, flags;
  float clip;
};

enum Flag : uint32_t {
  kBias = 1, kLens = 2, kLens64 = 4, kH0 = 8, kC0 = 16, kPeep = 32, kY = 64, kYH = 128, kYC = 256,
  kBatchFirst = 512, kReverse = 1024, kLinearBeforeReset = 2048, kInputForget = 4096,
};

class RnnKernel final : public GpuKernel {
 public:
  explicit RnnKernel(const KernelInit& init)
      : node_(init.node),
        cell_(cell_of(init.node.op_type())),
        hidden_(init.node.attr_int("hidden_size", 0)),
        dirs_(directions_of(init.node)),
        clip_(init.node.attr("clip") != nullptr ? init.node.attr_float("clip", 0.0f) : 0.0f) {
    flags_ = (init.node.attr_int("layout", 0) != 0 ? kBatchFirst : 0u) |
             (init.node.attr_string("direction", "forward") == "reverse" ? kReverse : 0u) |
             (init.node.attr_int("linear_before_reset", 0) != 0 ? kLinearBeforeReset : 0u) |
             (init.node.attr_int("input_forget", 0) != 0 ? kInputForget : 0u) |
             (init.input_dtype(4) == ir::DType::kInt64 ? kLens64 : 0u);
    spec_ = spec_of(init.node, cell_);
  }
  void prepare(Gpu& gpu) override { pipeline_ = &gpu.pipeline("rnn_step", 13, sizeof(RnnPush), spec_); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& xd = in[0].dims;
    if (xd.size() != 3) throw ArgumentError(node_.describe() + ": X has rank " + std::to_string(xd.size()) + ", expected 3");
    const bool batch_first = (flags_ & kBatchFirst) != 0;
    const int64_t seq = batch_first ? xd[1] : xd[0], batch = batch_first ? xd[0] : xd[1];
    const int64_t n = dirs_ * batch * hidden_;
    check_u32(node_, 4 * n, "the state");
    check_u32(node_, in[0].numel(), "the input");
    check_u32(node_, in[1].numel() + in[2].numel(), "the weights");
    check_u32(node_, seq * n, "the output");
    auto wanted = [&](size_t i) { return i < out.size() && !out[i].dims.empty(); };
    auto bind = [&](const std::vector<GpuTensor>& v, size_t i, bool on) { return on ? v[i].range : rec.unused(); };
    RnnPush p{static_cast<uint32_t>(seq), static_cast<uint32_t>(batch), static_cast<uint32_t>(xd[2]),
              static_cast<uint32_t>(hidden_), static_cast<uint32_t>(dirs_), 0, 0, flags_, clip_};
    // Every input given is checked, empty or not: only an omitted one is absent.
    auto present = [&](size_t i) { return i < node_.inputs().size() && node_.input(i) != nullptr; };
    const int64_t g = cell_ == kGru ? 3 : cell_ == kLstm ? 4 : 1;
    const std::vector<int64_t> states = batch_first ? std::vector<int64_t>{batch, dirs_, hidden_}
                                                    : std::vector<int64_t>{dirs_, batch, hidden_};
    expect(in[1].dims, {dirs_, g * hidden_, xd[2]}, "W");
    expect(in[2].dims, {dirs_, g * hidden_, hidden_}, "R");
    if (present(3)) expect(in[3].dims, {dirs_, 2 * g * hidden_}, "B");
    if (present(4)) expect(in[4].dims, {batch}, "sequence_lens");
    if (present(5)) expect(in[5].dims, states, "initial_h");
    if (cell_ == kLstm && present(6)) expect(in[6].dims, states, "initial_c");
    if (cell_ == kLstm && present(7)) expect(in[7].dims, {dirs_, 3 * hidden_}, "P");
    p.flags |= (present(3) ? kBias : 0u) | (present(4) ? kLens : 0u) | (present(5) ? kH0 : 0u) |
               (present(6) && cell_ == kLstm ? kC0 : 0u) | (present(7) && cell_ == kLstm ? kPeep : 0u) |
               (wanted(0) ? kY : 0u) | (wanted(1) ? kYH : 0u) | (wanted(2) && cell_ == kLstm ? kYC : 0u);
    const Range state = rec.scratch(4 * n * static_cast<int64_t>(sizeof(float)));
    const std::vector<Range> bindings = {
        in[0].range, in[1].range, in[2].range,
        bind(in, 3, p.flags & kBias), bind(in, 4, p.flags & kLens), bind(in, 5, p.flags & kH0),
        bind(in, 6, p.flags & kC0), bind(in, 7, p.flags & kPeep),
        bind(out, 0, p.flags & kY), bind(out, 1, p.flags & kYH), bind(out, 2, p.flags & kYC), state,
        rec.fault(node_.describe() + ": sequence_lens holds a value outside 0 to " + std::to_string(seq) + "; the value")};
    auto phase = [&](uint32_t ph, uint32_t step) {
      p.phase = ph;
      p.step = step;
      dispatch_1d(rec, *pipeline_, bindings, &p, sizeof p, n);
    };
    phase(0, 0);
    const bool reset_first = cell_ == kGru && (flags_ & kLinearBeforeReset) == 0;
    for (int64_t s = 0; s < seq; ++s) {
      if (reset_first) phase(1, static_cast<uint32_t>(s));
      phase(2, static_cast<uint32_t>(s));
    }
    if (p.flags & (kYH | kYC)) phase(3, static_cast<uint32_t>(seq));
  }

 private:
  // The CPU engine's check and message: a wrong shape is the caller's error, not a fallback.
  void expect(const std::vector<int64_t>& dims, const std::vector<int64_t>& want, const char* what) const {
    if (dims == want) return;
    auto text = [](const std::vector<int64_t>& v) {
      std::string s;
      for (int64_t e : v) s += (s.empty() ? "" : ", ") + std::to_string(e);
      return "[" + s + "]";
    };
    throw ArgumentError(node_.describe() + ": " + what + " has shape " + text(dims) + ", expected " + text(want));
  }

  const ir::Node& node_;
  Cell cell_;
  int64_t hidden_;
  int64_t dirs_;
  float clip_;
  uint32_t flags_ = 0;
  std::vector<uint32_t> spec_;
  const Pipeline* pipeline_ = nullptr;
};

std::string rnn_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  const Cell cell = cell_of(n.op_type());
  if (n.attr_int("hidden_size", 0) < 1) return "attribute hidden_size is missing or < 1";
  const std::string dir = n.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return "direction is '" + dir + "'; supported: forward, reverse, bidirectional";
  const std::vector<std::string> names = activation_names(n, cell);
  if (names.size() != activations_of(cell) * static_cast<size_t>(directions_of(n)))
    return "activations has " + std::to_string(names.size()) + " entries, expected " +
           std::to_string(activations_of(cell) * static_cast<size_t>(directions_of(n)));
  for (const std::string& a : names)
    if (find_activation(a) == nullptr) return "activation '" + a + "' is not supported";
  if (n.attr("clip") != nullptr && !(n.attr_float("clip", 0.0f) > 0)) return "clip must be positive";
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    if (n.input(i) == nullptr) continue;
    if (i == 4) {
      if (std::string why = require_dtype(init, 4, {ir::DType::kInt32, ir::DType::kInt64}); !why.empty()) return why;
    } else if (std::string why = require_dtype(init, i, {ir::DType::kFloat32}); !why.empty()) {
      return why;
    }
  }
  if (std::string why = require_rank(init, 0, {3}); !why.empty()) return why;
  return "";
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<RnnKernel>(i); };
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.add(op, make, rnn_check);
}

}  // namespace tether::engine::vulkan
