// Recurrent layers: RNN, GRU, LSTM. Forward, reverse and bidirectional; layout 0
// ([seq, batch, ...]) and 1 ([batch, seq, ...]); sequence_lens; initial states; LSTM
// peepholes and input_forget; GRU linear_before_reset; the activations attribute with its
// alphas and betas; clip. The input's share of every gate, W x + Wb, is one GEMM per
// direction over all time steps and batch rows (W packed once when constant); then each
// (direction, batch row) runs its recurrence on its own, in parallel, R h as a sum of R's
// columns scaled by h (R stored transposed), in float as onnxruntime's sums.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "util/simd.h"

#include "engine/cpu/cpu.h"
#include "engine/cpu/gemm.h"
#include "util/cpu_features.h"
#include "util/fastmath.h"
#include "util/multiversion.h"

namespace tether::engine::cpu {

namespace {

enum class Cell { kRnn, kGru, kLstm };

int gates_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
int activations_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 2 : 3; }

// The activation functions the recurrent ops accept, by their lower-cased names, with the
// number of alphas and betas each takes and their defaults.
struct Activation {
  enum class Kind { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu, kSoftsign, kSoftplus };
  Kind kind = Kind::kSigmoid;
  float alpha = 0, beta = 0;

  float operator()(float x) const {
    switch (kind) {
      case Kind::kRelu: return x < 0 ? 0.0f : x;
      case Kind::kTanh: return util::fast_tanh(x);
      case Kind::kSigmoid: return util::fast_sigmoid(x);
      case Kind::kAffine: return alpha * x + beta;
      case Kind::kLeakyRelu: return x >= 0 ? x : alpha * x;
      case Kind::kThresholdedRelu: return x > alpha ? x : 0.0f;
      case Kind::kScaledTanh: return alpha * std::tanh(beta * x);
      case Kind::kHardSigmoid: return std::max(0.0f, std::min(1.0f, alpha * x + beta));
      case Kind::kElu: return x >= 0 ? x : alpha * std::expm1(x);
      case Kind::kSoftsign: return x / (1.0f + std::fabs(x));
      case Kind::kSoftplus: return x > 20.0f ? x : std::log1p(std::exp(x));
    }
    return x;
  }
};

// Sigmoid and tanh over arrays (the gates of a step), vectorised.
TETHER_MULTIVERSION void sigmoid_in_place(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = util::fast_sigmoid(x[i]);
}
TETHER_MULTIVERSION void tanh_in_place(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = util::fast_tanh(x[i]);
}

// x[i] = a(x[i]) for i < n: the common activations vectorised, the others element by element.
void apply(const Activation& a, float* x, int64_t n) {
  if (a.kind == Activation::Kind::kSigmoid) return sigmoid_in_place(x, n);
  if (a.kind == Activation::Kind::kTanh) return tanh_in_place(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = a(x[i]);
}

struct ActivationInfo {
  const char* name;
  Activation::Kind kind;
  int uses_alpha, uses_beta;
  float alpha, beta;
};

constexpr ActivationInfo kActivations[] = {
    {"relu", Activation::Kind::kRelu, 0, 0, 0, 0},
    {"tanh", Activation::Kind::kTanh, 0, 0, 0, 0},
    {"sigmoid", Activation::Kind::kSigmoid, 0, 0, 0, 0},
    {"affine", Activation::Kind::kAffine, 1, 1, 1.0f, 0.0f},
    {"leakyrelu", Activation::Kind::kLeakyRelu, 1, 0, 0.01f, 0},
    {"thresholdedrelu", Activation::Kind::kThresholdedRelu, 1, 0, 1.0f, 0},
    {"scaledtanh", Activation::Kind::kScaledTanh, 1, 1, 1.0f, 1.0f},
    {"hardsigmoid", Activation::Kind::kHardSigmoid, 1, 1, 0.2f, 0.5f},
    {"elu", Activation::Kind::kElu, 1, 0, 1.0f, 0},
    {"softsign", Activation::Kind::kSoftsign, 0, 0, 0, 0},
    {"softplus", Activation::Kind::kSoftplus, 0, 0, 0, 0},
};

const ActivationInfo* find_activation(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const ActivationInfo& a : kActivations)
    if (name == a.name) return &a;
  return nullptr;
}

Cell cell_of(const std::string& op) { return op == "LSTM" ? Cell::kLstm : op == "GRU" ? Cell::kGru : Cell::kRnn; }

int directions_of(const ir::Node& n) { return n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1; }

// The activation names of a node, one list per direction, defaults filled in.
std::vector<std::string> activation_names(const ir::Node& n, Cell cell) {
  std::vector<std::string> names;
  if (const ir::Attribute* a = n.attr("activations")) names = a->as_strings();
  const auto per = static_cast<size_t>(activations_of(cell));
  if (names.empty()) {
    if (cell == Cell::kRnn) names = {"Tanh"};
    else if (cell == Cell::kGru) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  // Bidirectional nodes that give one direction's list use it for both, as onnxruntime does.
  if (directions_of(n) == 2 && names.size() == per) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  return names;
}

// Everything one (direction, batch row) sequence needs to read and write.
struct Sequence {
  const float *gx, *rt, *rb, *p, *h0, *c0;  // gx: W x + Wb of each time step; rt: R transposed [h, g * h]
  float *y, *yh, *yc;
  int64_t len, gx_step, y_step;  // elements between consecutive time steps in gx and y
  bool reverse;
};

class RecurrentKernel final : public HostKernel {
 public:
  explicit RecurrentKernel(const KernelInit& init)
      : threads_(init.threads),
        cell_(cell_of(init.node.op_type())),
        hidden_(init.node.attr_int("hidden_size", 0)),
        dirs_(directions_of(init.node)),
        reverse_(init.node.attr_string("direction", "forward") == "reverse"),
        batch_first_(init.node.attr_int("layout", 0) != 0),
        clip_(init.node.attr_float("clip", 0.0f)),
        has_clip_(init.node.attr("clip") != nullptr),
        linear_before_reset_(init.node.attr_int("linear_before_reset", 0) != 0),
        input_forget_(init.node.attr_int("input_forget", 0) != 0),
        name_(init.node.describe()) {
    std::vector<float> alphas, betas;
    if (const ir::Attribute* a = init.node.attr("activation_alpha")) alphas = a->as_floats();
    if (const ir::Attribute* a = init.node.attr("activation_beta")) betas = a->as_floats();
    size_t ai = 0, bi = 0;
    for (const std::string& n : activation_names(init.node, cell_)) {
      const ActivationInfo* info = find_activation(n);
      Activation act{info->kind, info->alpha, info->beta};
      if (info->uses_alpha && ai < alphas.size()) act.alpha = alphas[ai++];
      if (info->uses_beta && bi < betas.size()) act.beta = betas[bi++];
      acts_.push_back(act);
    }
    // Constant weights: W of each direction packed as the GEMM's B ([input, g * h]), R
    // transposed.
    const ir::Tensor* w = init.constant(1);
    const ir::Tensor* r = init.constant(2);
    const int64_t gh = gates_of(cell_) * hidden_;
    if (w != nullptr && w->rank() == 3 && w->dims()[0] == dirs_ && w->dims()[1] == gh) {
      const int64_t input = w->dims()[2];
      for (int64_t d = 0; d < dirs_; ++d)
        packed_w_.push_back(PackedMatrix::pack(w->data<float>() + d * gh * input, input, gh, 1, input, gemm_isa().nr));
    }
    if (r != nullptr && r->dims() == std::vector<int64_t>{dirs_, gh, hidden_}) {
      rt_.resize(static_cast<size_t>(dirs_ * gh * hidden_));
      for (int64_t d = 0; d < dirs_; ++d) transpose_r(r->data<float>() + d * gh * hidden_, gh, hidden_, rt_.data() + d * gh * hidden_);
    }
  }

  bool packs_input(size_t i) const override { return (i == 1 && !packed_w_.empty()) || (i == 2 && !rt_.empty()); }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    Layout l = layout_of(in[0]);
    return 4 * l.floats(dirs_, packed_w_.empty(), rt_.empty(), per_task_floats(), threads_);
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const int64_t seq = x.dims[batch_first_ ? 1 : 0], batch = x.dims[batch_first_ ? 0 : 1], input = x.dims[2];
    const int64_t h = hidden_, g = gates_of(cell_);
    TETHER_CHECK(in[1].dims == (std::vector<int64_t>{dirs_, g * h, input}), "recurrent op: W has an unexpected shape");
    TETHER_CHECK(in[2].dims == (std::vector<int64_t>{dirs_, g * h, h}), "recurrent op: R has an unexpected shape");
    check_optional(in, 3, {dirs_, 2 * g * h}, "B");
    check_optional(in, 4, {batch}, "sequence_lens");
    const std::vector<int64_t> state = batch_first_ ? std::vector<int64_t>{batch, dirs_, h} : std::vector<int64_t>{dirs_, batch, h};
    check_optional(in, 5, state, "initial_h");
    if (cell_ == Cell::kLstm) {
      check_optional(in, 6, state, "initial_c");
      check_optional(in, 7, {dirs_, 3 * h}, "P");
    }
    std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
    if (present(in, 4)) {
      lens = int_values(in[4]);
      for (int64_t l : lens)
        if (l < 0 || l > seq)
          throw ArgumentError(name_ + ": sequence_lens holds " + std::to_string(l) + ", expected 0 to " + std::to_string(seq));
    }
    float* y = out.size() > 0 && out[0].data != nullptr ? out[0].as<float>() : nullptr;
    float* yh = out.size() > 1 && out[1].data != nullptr ? out[1].as<float>() : nullptr;
    float* yc = out.size() > 2 && out[2].data != nullptr ? out[2].as<float>() : nullptr;
    // Y is [seq, dirs, batch, h] or [batch, seq, dirs, h]; states [dirs, batch, h] or [batch, dirs, h].
    const int64_t y_step = batch_first_ ? dirs_ * h : dirs_ * batch * h;
    auto state_at = [&](int64_t d, int64_t b) { return (batch_first_ ? b * dirs_ + d : d * batch + b) * h; };
    const Layout l = layout_of(x);
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    float* gx_all = scratch + l.gx;
    // The input's share of the gates: x's rows (time steps and batch rows, in x's order) times W.
    for (int64_t d = 0; d < dirs_; ++d) {
      GemmB wb;
      if (!packed_w_.empty()) {
        wb.packed = packed_w_[static_cast<size_t>(d)].data();
      } else {
        PackedMatrix::pack_into(scratch + l.w, in[1].as<float>() + d * g * h * input, input, g * h, 1, input, gemm_isa().nr);
        wb.packed = scratch + l.w;
      }
      GemmA xa;
      xa.data = x.as<float>();
      xa.lda = input;
      GemmEpilogue ep;
      ep.col_bias = present(in, 3) ? in[3].as<float>() + d * 2 * g * h : nullptr;
      sgemm(ctx, seq * batch, g * h, input, xa, wb, gx_all + d * seq * batch * g * h, g * h, ep, scratch + l.gemm);
    }
    const float* rt = rt_.data();
    if (rt_.empty()) {
      for (int64_t d = 0; d < dirs_; ++d) transpose_r(in[2].as<float>() + d * g * h * h, g * h, h, scratch + l.r + d * g * h * h);
      rt = scratch + l.r;
    }
    // Fewer sequences than threads: the sequences run one after another, each step's R h
    // shared between the threads (the rows of R a thread reads stay in its cache).
    const int threads = ctx.pool != nullptr ? ctx.pool->threads() : 1;
    const bool split_steps = dirs_ * batch < threads;
    const RunContext step_ctx{split_steps ? ctx.pool : nullptr, nullptr};
    auto sequences = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t d = t / batch, b = t % batch;
        Sequence s{};
        // Row (time k, batch b) of x is row k * batch + b, or b * seq + k batch first.
        s.gx = gx_all + (d * seq * batch + (batch_first_ ? b * seq : b)) * g * h;
        s.gx_step = (batch_first_ ? 1 : batch) * g * h;
        s.rt = rt + d * g * h * h;
        s.rb = present(in, 3) ? in[3].as<float>() + d * 2 * g * h + g * h : nullptr;
        s.p = cell_ == Cell::kLstm && present(in, 7) ? in[7].as<float>() + d * 3 * h : nullptr;
        s.h0 = present(in, 5) ? in[5].as<float>() + state_at(d, b) : nullptr;
        s.c0 = cell_ == Cell::kLstm && present(in, 6) ? in[6].as<float>() + state_at(d, b) : nullptr;
        s.y = y != nullptr ? y + (batch_first_ ? (b * seq * dirs_ + d) * h : (d * batch + b) * h) : nullptr;
        s.yh = yh != nullptr ? yh + state_at(d, b) : nullptr;
        s.yc = yc != nullptr ? yc + state_at(d, b) : nullptr;
        s.len = lens[static_cast<size_t>(b)];
        s.y_step = y_step;
        s.reverse = reverse_ || d == 1;
        if (s.y != nullptr)  // steps past the row's length stay zero
          for (int64_t k = s.len; k < seq; ++k) std::fill_n(s.y + k * y_step, h, 0.0f);
        run_sequence(step_ctx, s, d, scratch + l.tasks + t * per_task_floats());
      }
    };
    if (split_steps) sequences(0, dirs_ * batch);
    else parallel(ctx, dirs_ * batch, 1, sequences);
  }

 private:
  // gh (R h, a row per gate, then the gates in place), the hidden and cell states, and GRU's
  // reset state (LSTM's tanh of the cell state).
  int64_t per_task_floats() const { return gates_of(cell_) * hidden_ + 3 * hidden_; }

  void check_optional(const std::vector<View>& in, size_t i, const std::vector<int64_t>& dims, const char* what) const {
    auto text = [](const std::vector<int64_t>& v) {
      std::string s;
      for (int64_t e : v) s += (s.empty() ? "" : ", ") + std::to_string(e);
      return "[" + s + "]";
    };
    if (present(in, i) && in[i].dims != dims)
      throw ArgumentError(name_ + ": " + what + " has shape " + text(in[i].dims) + ", expected " + text(dims));
  }

  float clipped(float v) const { return has_clip_ ? std::clamp(v, -clip_, clip_) : v; }

  // Scratch of one run, in floats: the gates' input shares of every direction, step and batch
  // row; W packed and R transposed when not constant; sgemm's; each task's.
  struct Layout {
    int64_t seq, batch, input, h, g;
    int64_t gx = 0, w = 0, r = 0, gemm = 0, tasks = 0;
    int64_t floats(int64_t dirs, bool pack_w, bool pack_r, int64_t per_task, int threads) {
      w = gx + round16(dirs * seq * batch * g * h);
      r = w + (pack_w ? round16(PackedMatrix::floats_needed(input, g * h, gemm_isa().nr)) : 0);
      gemm = r + (pack_r ? round16(dirs * g * h * h) : 0);
      tasks = gemm + round16(sgemm_scratch_floats(seq * batch, g * h, input, threads));
      return tasks + dirs * batch * per_task;
    }
    static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }
  };

  Layout layout_of(const View& x) const {
    Layout l{x.dims[batch_first_ ? 1 : 0], x.dims[batch_first_ ? 0 : 1], x.dims[2], hidden_, gates_of(cell_)};
    l.floats(dirs_, packed_w_.empty(), rt_.empty(), per_task_floats(), threads_);
    return l;
  }

  // rt[c * rows + r] = r_[r * cols + c]: R [rows, cols] stored by columns.
  static void transpose_r(const float* r, int64_t rows, int64_t cols, float* rt) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c) rt[c * rows + i] = r[i * cols + c];
  }

  // out[j] = bias[j] + sum over c of v[c] * rt[c * ld + j] for j < rows: rows of R (from its
  // transposed columns, ld apart) times v, each sum in column order.
  // The same on the context's pool, in blocks of 128 rows, when the product is large enough
  // to pay for a hand-off (a few hundred thousand multiply-adds).
  static void matvec_t(const RunContext& ctx, const float* rt, int64_t ld, int64_t rows, int64_t cols, const float* v,
                       const float* bias, float* out) {
    constexpr int64_t kRows = 128;
    if (ctx.pool == nullptr || rows * cols < (1 << 17) || rows < 2 * kRows) {
      matvec_t(rt, ld, rows, cols, v, bias, out);
      return;
    }
    parallel(ctx, (rows + kRows - 1) / kRows, 1, [&](int64_t b0, int64_t b1) {
      const int64_t j0 = b0 * kRows, j1 = std::min(rows, b1 * kRows);
      matvec_t(rt + j0, ld, j1 - j0, cols, v, bias != nullptr ? bias + j0 : nullptr, out + j0);
    });
  }

  static void matvec_t(const float* rt, int64_t ld, int64_t rows, int64_t cols, const float* v, const float* bias,
                       float* out) {
#if defined(__x86_64__)
    static const bool avx512 = util::cpu_features().avx512;
    int64_t j0 = avx512 ? matvec_t_avx512(rt, ld, rows, cols, v, bias, out) : 0;
#else
    const int64_t j0 = 0;
#endif
    if (j0 == rows) return;
    for (int64_t j = j0; j < rows; ++j) out[j] = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float vc = v[c];
      const float* col = rt + c * ld;
      for (int64_t j = j0; j < rows; ++j) out[j] += vc * col[j];
    }
  }

#if defined(__x86_64__)
  // The rows in whole blocks of 128 (8 vectors of sums in registers through all the columns:
  // eight independent chains of FMAs); returns the rows done.
  __attribute__((target("avx512f"))) static int64_t matvec_t_avx512(const float* rt, int64_t ld, int64_t rows,
                                                                     int64_t cols, const float* v, const float* bias,
                                                                     float* out) {
    constexpr int kVecs = 8;
    int64_t j0 = 0;
    for (; j0 + 16 * kVecs <= rows; j0 += 16 * kVecs) {
      __m512 acc[kVecs];
      for (int i = 0; i < kVecs; ++i) acc[i] = bias != nullptr ? _mm512_loadu_ps(bias + j0 + 16 * i) : _mm512_setzero_ps();
      for (int64_t c = 0; c < cols; ++c) {
        const __m512 vc = _mm512_set1_ps(v[c]);
        const float* col = rt + c * ld + j0;
        for (int i = 0; i < kVecs; ++i) acc[i] = _mm512_fmadd_ps(vc, _mm512_loadu_ps(col + 16 * i), acc[i]);
      }
      for (int i = 0; i < kVecs; ++i) _mm512_storeu_ps(out + j0 + 16 * i, acc[i]);
    }
    return j0;
  }
#endif

  void run_sequence(const RunContext& ctx, const Sequence& s, int64_t d, float* scratch) const {
    const int64_t h = hidden_, g = gates_of(cell_);
    float* gh = scratch;
    float* hs = gh + g * h;
    float* cs = hs + h;
    float* reset = cs + h;
    if (s.h0 != nullptr) std::copy_n(s.h0, h, hs);
    else std::fill_n(hs, h, 0.0f);
    if (s.c0 != nullptr) std::copy_n(s.c0, h, cs);
    else std::fill_n(cs, h, 0.0f);
    const Activation* act = &acts_[static_cast<size_t>(d * activations_of(cell_))];
    // GRU's candidate without linear_before_reset multiplies R_h by the reset state, not h.
    const int64_t recurrent_rows = cell_ == Cell::kGru && !linear_before_reset_ ? 2 * h : g * h;
    for (int64_t k = 0; k < s.len; ++k) {
      const int64_t t = s.reverse ? s.len - 1 - k : k;
      const float* gx = s.gx + t * s.gx_step;
      matvec_t(ctx, s.rt, g * h, recurrent_rows, h, hs, s.rb, gh);
      if (cell_ == Cell::kRnn) {
        for (int64_t j = 0; j < h; ++j) hs[j] = clipped(gx[j] + gh[j]);
        apply(act[0], hs, h);
      } else if (cell_ == Cell::kGru) {
        gru_step(ctx, gx, gh, hs, reset, s, act);
      } else {
        lstm_step(gx, gh, hs, cs, s.p, act, reset);
      }
      if (s.y != nullptr) std::copy_n(hs, h, s.y + t * s.y_step);
    }
    if (s.yh != nullptr) std::copy_n(hs, h, s.yh);
    if (s.yc != nullptr) std::copy_n(cs, h, s.yc);
  }

  // Gates z, r, h; gh's z and r rows become the activated gates in place.
  void gru_step(const RunContext& ctx, const float* gx, float* gh, float* hs, float* reset, const Sequence& s,
                const Activation* act) const {
    const int64_t h = hidden_;
    for (int64_t j = 0; j < 2 * h; ++j) gh[j] = clipped(gx[j] + gh[j]);  // z, r
    apply(act[0], gh, 2 * h);
    float* cand = gh + 2 * h;
    if (linear_before_reset_) {
      for (int64_t j = 0; j < h; ++j) cand[j] = clipped(gx[2 * h + j] + gh[h + j] * cand[j]);
    } else {
      for (int64_t j = 0; j < h; ++j) reset[j] = gh[h + j] * hs[j];
      matvec_t(ctx, s.rt + 2 * h, 3 * h, h, h, reset, s.rb != nullptr ? s.rb + 2 * h : nullptr, cand);
      for (int64_t j = 0; j < h; ++j) cand[j] = clipped(gx[2 * h + j] + cand[j]);
    }
    apply(act[1], cand, h);
    for (int64_t j = 0; j < h; ++j) hs[j] = (1.0f - gh[j]) * cand[j] + gh[j] * hs[j];
  }

  // Gates i, o, f, c; peepholes P = (i, o, f). gh's rows become the gates in place; `tmp`
  // holds h floats.
  void lstm_step(const float* gx, float* gh, float* hs, float* cs, const float* p, const Activation* act,
                 float* tmp) const {
    const int64_t h = hidden_;
    float* gi = gh;
    float* go = gh + h;
    float* gf = gh + 2 * h;
    float* gc = gh + 3 * h;
    for (int64_t j = 0; j < h; ++j) {
      gi[j] = gx[j] + gi[j] + (p != nullptr ? p[j] * cs[j] : 0.0f);
      gf[j] = gx[2 * h + j] + gf[j] + (p != nullptr ? p[2 * h + j] * cs[j] : 0.0f);
      gc[j] = clipped(gx[3 * h + j] + gc[j]);
      gi[j] = clipped(gi[j]);
      gf[j] = clipped(gf[j]);
    }
    apply(act[0], gi, h);
    if (input_forget_)
      for (int64_t j = 0; j < h; ++j) gf[j] = 1.0f - gi[j];
    else
      apply(act[0], gf, h);
    apply(act[1], gc, h);
    for (int64_t j = 0; j < h; ++j) {
      cs[j] = gf[j] * cs[j] + gi[j] * gc[j];
      go[j] = clipped(gx[h + j] + go[j] + (p != nullptr ? p[h + j] * cs[j] : 0.0f));
      tmp[j] = cs[j];
    }
    apply(act[0], go, h);
    apply(act[2], tmp, h);
    for (int64_t j = 0; j < h; ++j) hs[j] = go[j] * tmp[j];
  }

  int threads_;
  Cell cell_;
  int64_t hidden_;
  int64_t dirs_;
  bool reverse_, batch_first_;
  float clip_;
  bool has_clip_, linear_before_reset_, input_forget_;
  std::vector<Activation> acts_;  // per direction, activations_of(cell_) each
  std::string name_;
  std::vector<PackedMatrix> packed_w_;  // per direction, when W is constant
  std::vector<float> rt_;               // R transposed per direction, when constant
};

std::string recurrent_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  const Cell cell = cell_of(n.op_type());
  if (n.attr_int("hidden_size", 0) < 1) return "attribute hidden_size is missing or < 1";
  const std::string dir = n.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return "direction is '" + dir + "'; supported: forward, reverse, bidirectional";
  const std::vector<std::string> names = activation_names(n, cell);
  const size_t want = static_cast<size_t>(activations_of(cell) * directions_of(n));
  if (names.size() != want)
    return "activations has " + std::to_string(names.size()) + " entries, expected " + std::to_string(want);
  for (const std::string& a : names)
    if (find_activation(a) == nullptr)
      return "activation '" + a + "' is not supported (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
             "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus are)";
  if (n.attr("clip") != nullptr && !(n.attr_float("clip", 0.0f) > 0)) return "clip must be positive";
  for (size_t i = 0; i < init.input_types.size(); ++i) {
    if (n.input(i) == nullptr) continue;
    if (i == 4) {
      if (std::string why = require_dtype(init, 4, {DType::kInt32, DType::kInt64}); !why.empty()) return why;
    } else if (init.input_dtype(i) != DType::kFloat32) {
      return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.input_dtype(i))) + "; supported: float32";
    }
  }
  return "";
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<RecurrentKernel>(i); };
  TETHER_ADD(r, "RNN", make, recurrent_check);
  TETHER_ADD(r, "GRU", make, recurrent_check);
  TETHER_ADD(r, "LSTM", make, recurrent_check);
}

}  // namespace tether::engine::cpu
