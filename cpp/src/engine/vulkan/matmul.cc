// Gemm, MatMul (batched, numpy broadcasting of the batch dims) and the fused FusedGemm and
// FusedMatMul: on GPUs by the shared-memory tiles of shaders/gemm_tiled.comp, on lavapipe by
// the vec4 forms, else by shaders/gemm.comp; also the GEMM conv.cc uses for 1x1 convolutions.
#include "engine/vulkan/matmul.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>

#include "engine/vulkan/instance.h"
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// The tile edge: 16 x 16 invocations where the device runs 256 in a workgroup.
uint32_t gemm_tile(const Device& device) { return device.max_workgroup() >= 256 ? 16 : 8; }

// Outputs per invocation along rows and columns of the blocked pipeline.
constexpr uint32_t kBlock = 4;

// gemm_vec4.comp: rows per invocation, columns per invocation (2 vec4s), invocations per
// workgroup; gemm_vec4_nt.comp's rows and columns per invocation.
constexpr uint32_t kVecRows = 8, kVecCols = 8, kVecGroup = 64;
constexpr uint32_t kNtRows = 4, kNtCols = 4;

// The tiles of gemm_tiled.glsl, largest first: rows, columns, step along K, and outputs per
// invocation along rows and columns (a workgroup has (bm / tm) (bn / tn) invocations).
struct Tile {
  uint32_t bm, bn, bk, tm, tn;
  uint32_t invocations() const { return (bm / tm) * (bn / tn); }
};
constexpr Tile kTiles[] = {{128, 128, 8, 8, 8}, {64, 64, 16, 4, 4}, {32, 32, 32, 4, 4}};
static_assert(std::size(kTiles) == std::tuple_size_v<decltype(TiledPipelines::tiles)>);

// The tiles of gemm_coop.glsl, largest first: rows, columns, step along K, and a subgroup's
// rows and columns (a workgroup has (bm / wm) (bn / wn) subgroups of 32 invocations). A step
// of 32 stages 16 halves of each operand per invocation in all three.
struct CoopTile {
  uint32_t bm, bn, bk, wm, wn;
  uint32_t invocations() const { return (bm / wm) * (bn / wn) * 32; }
  uint32_t shared_bytes() const { return (bm * (bk + 8) + bk * (bn + 8)) * 2 + (bm / wm) * (bn / wn) * 1024; }
};
constexpr CoopTile kCoopTiles[] = {{128, 128, 32, 64, 32}, {64, 64, 32, 32, 32}, {32, 32, 32, 16, 16}};
static_assert(std::size(kCoopTiles) == std::tuple_size_v<decltype(TiledPipelines::tiles)>);

// Invocations a product should give the device to hide memory latency: a GPU has tens to about
// 150 compute units, each best with several hundred invocations in flight. The largest tile
// that makes this many is taken; else the tile that makes the most (the larger on a tie: it
// reads less per multiply-add), split along K until it makes this many.
constexpr int64_t kFillInvocations = 65536;
// A split along K: at most 16 runs, each at least 256 of K long (a few steps of every tile),
// partial sums at most 64 MiB.
constexpr int64_t kMaxSplits = 16, kMinSplitK = 256, kMaxSplitBytes = int64_t{64} << 20;

// gemm_reduce.comp's push constants.
struct ReducePush {
  uint32_t total, M, N, S, G, bias_rs, bias_cs;
  float alpha, beta;
};

// The vec4 GEMM reads A's and B's rows and writes C's as whole vec4s: K, N, the row strides and
// the batch strides multiples of 4, neither operand transposed, each range 16-byte aligned.
// With `nt`, the form for a transposed B: B's rows (b_cs apart) run along K, and C is written
// by floats (N any).
bool vec4_fits(const GemmPush& p, bool nt, const std::vector<int64_t>& a_bs, const std::vector<int64_t>& b_bs,
               const std::vector<const Range*>& ranges) {
  if (p.a_cs != 1 || p.K % 4 != 0 || p.a_rs % 4 != 0) return false;
  if (nt ? (p.b_rs != 1 || p.b_cs % 4 != 0) : (p.b_cs != 1 || p.N % 4 != 0 || p.b_rs % 4 != 0)) return false;
  for (int64_t s : a_bs)
    if (s % 4 != 0) return false;
  for (int64_t s : b_bs)
    if (s % 4 != 0) return false;
  for (const Range* r : ranges)
    if (r->offset % 16 != 0) return false;
  return true;
}

}  // namespace

TiledPipelines tiled_pipelines(Gpu& gpu, const std::string& shader, uint32_t push_bytes, const std::vector<uint32_t>& spec) {
  TiledPipelines out;
  const bool coop = gpu.fp16 && gpu.device.cooperative_matrix();
  // Float16 products when TETHER_VULKAN_FP16_ARITHMETIC=1 (read when a model is compiled) on a
  // device that computes in float16 and has no tensor cores; else float32 products of the
  // float16 operands. Off by default: rounding every multiply-add to float16 about doubles
  // precision fp16's error on some CNNs (docs/vulkan.md, Float16 products).
  const bool half = gpu.fp16 && !coop && gpu.device.float16_arithmetic() && env_is_one("TETHER_VULKAN_FP16_ARITHMETIC");
  for (size_t i = 0; i < out.tiles.size(); ++i) {
    std::vector<uint32_t> s;
    if (coop) {
      const CoopTile& t = kCoopTiles[i];
      if (t.invocations() > gpu.device.max_workgroup() || t.shared_bytes() > gpu.device.limits().maxComputeSharedMemorySize)
        continue;
      out.shapes[i] = {t.bm, t.bn, t.invocations()};
      s = {t.invocations()};
      s.insert(s.end(), spec.begin(), spec.end());
      for (uint32_t v : {t.bm, t.bn, t.bk, t.wm, t.wn}) s.push_back(v);
    } else {
      const Tile& t = kTiles[i];
      if (t.invocations() > gpu.device.max_workgroup()) continue;
      out.shapes[i] = {t.bm, t.bn, t.invocations()};
      s = {t.invocations()};
      s.insert(s.end(), spec.begin(), spec.end());
      for (uint32_t v : {t.bm, t.bn, t.bk, t.tm, t.tn}) s.push_back(v);
    }
    out.tiles[i] = &gpu.pipeline(coop ? shader + "_coop" : half ? shader + "_half" : shader, 6, push_bytes, s);
  }
  std::vector<uint32_t> s{kLocal};
  s.insert(s.end(), spec.begin(), spec.end());
  out.reduce = &gpu.pipeline("gemm_reduce", 4, sizeof(ReducePush), s);
  return out;
}

bool record_tiled(Recorder& rec, const TiledPipelines& p, const std::vector<Range>& bindings, const void* push,
                  size_t push_bytes, int64_t m, int64_t n, int64_t k, int64_t batches, const TiledEpilogue& epilogue) {
  const VkPhysicalDeviceLimits& limits = rec.device().limits();
  const Pipeline* pick = nullptr;
  int64_t gx = 0, gy = 0, invocations = 0;
  for (size_t i = 0; i < p.tiles.size(); ++i) {
    if (p.tiles[i] == nullptr) continue;
    const TiledPipelines::Shape& t = p.shapes[i];
    const int64_t x = (n + t.bn - 1) / t.bn, y = (m + t.bm - 1) / t.bm;
    if (x > limits.maxComputeWorkGroupCount[0] || y > limits.maxComputeWorkGroupCount[1] ||
        batches > limits.maxComputeWorkGroupCount[2])
      continue;
    const int64_t v = x * y * batches * t.invocations;
    if (pick != nullptr && v <= invocations) continue;
    pick = p.tiles[i];
    gx = x;
    gy = y;
    invocations = v;
    if (v >= kFillInvocations) break;
  }
  if (pick == nullptr) return false;
  if (m == 0 || n == 0 || batches == 0) return true;
  // Too few invocations even so: split K, as far as each run keeps kMinSplitK and the partial
  // sums fit their bounds.
  const int64_t outputs = batches * m * n;
  int64_t splits = 1;
  if (invocations < kFillInvocations)
    splits = std::min({kMaxSplits, (kFillInvocations + invocations - 1) / invocations, k / kMinSplitK,
                       kMaxSplitBytes / (outputs * 4), int64_t{limits.maxComputeWorkGroupCount[2]} / batches,
                       int64_t{std::numeric_limits<uint32_t>::max()} / outputs});
  std::vector<Range> b = bindings;
  if (splits < 2) {
    b.push_back(rec.unused());
    rec.dispatch(*pick, b, push, push_bytes, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(batches));
    return true;
  }
  const Range partial = rec.scratch(outputs * splits * 4);
  b.push_back(partial);
  rec.dispatch(*pick, b, push, push_bytes, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy),
               static_cast<uint32_t>(batches * splits));
  const ReducePush r{static_cast<uint32_t>(outputs), static_cast<uint32_t>(m), static_cast<uint32_t>(n),
                     static_cast<uint32_t>(splits),  epilogue.groups,          epilogue.bias_rs,
                     epilogue.bias_cs,               epilogue.alpha,           epilogue.beta};
  dispatch_1d(rec, *p.reduce, {partial, bindings[2], bindings[3], bindings[4]}, &r, sizeof r, outputs);
  return true;
}

GemmPipeline gemm_pipeline(Gpu& gpu, const Activation& act, bool bias, bool sum) {
  const uint32_t ts = gemm_tile(gpu.device);
  std::vector<uint32_t> spec{ts};
  for (uint32_t v : act.spec()) spec.push_back(v);
  spec.push_back(bias ? 1 : 0);
  spec.push_back(sum ? 1 : 0);
  spec.push_back(ts);  // the workgroup's y size
  spec.push_back(ts);  // the tile edge the shader's shared arrays take
  GemmPipeline out;
  out.one = &gpu.pipeline("gemm", 5, sizeof(GemmPush), spec);
  spec.push_back(kBlock);  // outputs per invocation along rows and columns
  out.blocked = &gpu.pipeline("gemm", 5, sizeof(GemmPush), spec);
  if (gpu_kernels(gpu.device)) {
    std::vector<uint32_t> tiled = act.spec();
    tiled.push_back(bias ? 1 : 0);
    tiled.push_back(sum ? 1 : 0);
    out.tiled = tiled_pipelines(gpu, "gemm_tiled", sizeof(GemmPush), tiled);
  } else {
    std::vector<uint32_t> vec{kVecGroup};
    for (uint32_t v : act.spec()) vec.push_back(v);
    vec.push_back(bias ? 1 : 0);
    vec.push_back(sum ? 1 : 0);
    out.vec4 = &gpu.pipeline("gemm_vec4", 5, sizeof(GemmPush), vec);
    out.vec4_nt = &gpu.pipeline("gemm_vec4_nt", 5, sizeof(GemmPush), vec);
  }
  return out;
}

void record_gemm(Recorder& rec, const ir::Node& node, const GemmPipeline& pipelines, GemmPush push, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& a_bs, const std::vector<int64_t>& b_bs, const Range& a, const Range& b,
                 const Range& bias, const Range& sum, const Range& c) {
  // The batch dims, merged where both operands allow, at most 4.
  std::vector<int64_t> dims = batch, sa = a_bs, sb = b_bs;
  collapse_dims(dims, {&sa, &sb});
  if (dims.size() > 4)
    throw UnsupportedError(node.describe() + ": " + std::to_string(dims.size()) +
                           " batch dims that do not merge; the Vulkan GEMM takes 4");
  const int64_t batches = product(dims, 0, dims.size());
  check_u32(node, batches * push.M * push.N, "the output");
  const size_t pad = 4 - dims.size();
  for (size_t d = 0; d < 4; ++d) {
    push.bdims[d] = d < pad ? 1 : static_cast<uint32_t>(dims[d - pad]);
    push.a_bs[d] = d < pad ? 0 : static_cast<uint32_t>(sa[d - pad]);
    push.b_bs[d] = d < pad ? 0 : static_cast<uint32_t>(sb[d - pad]);
  }
  const TiledEpilogue epilogue{1, push.bias_rs, push.bias_cs, push.alpha, push.beta};
  if (record_tiled(rec, pipelines.tiled, {a, b, bias, sum, c}, &push, sizeof push, push.M, push.N, push.K, batches, epilogue))
    return;
  const VkPhysicalDeviceLimits& limits = rec.device().limits();
  for (const bool nt : {false, true}) {
    const Pipeline* vec = nt ? pipelines.vec4_nt : pipelines.vec4;
    if (vec == nullptr || !vec4_fits(push, nt, a_bs, b_bs, {&a, &b, &sum, &c})) continue;
    // Columns an invocation covers: 8 (two vec4s), or 4 with a transposed B.
    const int64_t cols = nt ? kNtCols : kVecCols, rows = nt ? kNtRows : kVecRows;
    const int64_t gx = (push.N + cols * kVecGroup - 1) / (cols * kVecGroup);
    const int64_t gy = (push.M + rows - 1) / rows;
    if (gx > limits.maxComputeWorkGroupCount[0] || gy > limits.maxComputeWorkGroupCount[1] ||
        batches > limits.maxComputeWorkGroupCount[2])
      break;
    if (push.M == 0 || push.N == 0 || batches == 0) return;
    rec.dispatch(*vec, {a, b, bias, sum, c}, &push, sizeof push, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy),
                 static_cast<uint32_t>(batches));
    return;
  }
  // The blocked tiles where both sides fill at least half of one; else one output each.
  const uint32_t edge = gemm_tile(rec.device());
  const bool blocked = push.M >= edge * kBlock / 2 && push.N >= edge * kBlock / 2;
  const Pipeline& p = blocked ? *pipelines.blocked : *pipelines.one;
  const uint32_t ts = blocked ? edge * kBlock : edge;
  const int64_t gx = (push.N + ts - 1) / ts, gy = (push.M + ts - 1) / ts;
  if (gx > limits.maxComputeWorkGroupCount[0] || gy > limits.maxComputeWorkGroupCount[1] ||
      batches > limits.maxComputeWorkGroupCount[2])
    throw UnsupportedError(node.describe() + ": a product of " + std::to_string(batches) + " x " + std::to_string(push.M) +
                           " x " + std::to_string(push.N) + " needs more workgroups than the Vulkan device dispatches");
  if (push.M == 0 || push.N == 0 || batches == 0) return;
  rec.dispatch(p, {a, b, bias, sum, c}, &push, sizeof push, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy),
               static_cast<uint32_t>(batches));
}

namespace {

// Gemm and FusedGemm: Y = act(alpha * op(A) @ op(B) + beta * C).
class GemmKernel final : public GpuKernel {
 public:
  explicit GemmKernel(const KernelInit& init)
      : node_(init.node),
        alpha_(init.node.attr_float("alpha", 1.0f)),
        beta_(init.node.attr_float("beta", 1.0f)),
        trans_a_(init.node.attr_int("transA", 0) != 0),
        trans_b_(init.node.attr_int("transB", 0) != 0),
        has_c_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr),
        act_(fused_activation(init.node)) {}

  void prepare(Gpu& gpu) override { pipeline_ = gemm_pipeline(gpu, act_, has_c_, false); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& a = in[0].dims;
    const std::vector<int64_t>& b = in[1].dims;
    GemmPush p{};
    p.M = static_cast<uint32_t>(trans_a_ ? a[1] : a[0]);
    p.K = static_cast<uint32_t>(trans_a_ ? a[0] : a[1]);
    p.N = static_cast<uint32_t>(trans_b_ ? b[0] : b[1]);
    p.a_rs = trans_a_ ? 1 : static_cast<uint32_t>(a[1]);
    p.a_cs = trans_a_ ? static_cast<uint32_t>(a[1]) : 1;
    p.b_rs = trans_b_ ? 1 : static_cast<uint32_t>(b[1]);
    p.b_cs = trans_b_ ? static_cast<uint32_t>(b[1]) : 1;
    p.alpha = alpha_;
    p.beta = beta_;
    Range bias = rec.unused();
    if (has_c_) {
      const std::vector<int64_t> s = broadcast_strides(in[2].dims, {p.M, p.N});
      p.bias_rs = static_cast<uint32_t>(s[0]);
      p.bias_cs = static_cast<uint32_t>(s[1]);
      bias = in[2].range;
    }
    record_gemm(rec, node_, pipeline_, p, {}, {}, {}, in[0].range, in[1].range, bias, rec.unused(), out[0].range);
  }

 private:
  const ir::Node& node_;
  float alpha_, beta_;
  bool trans_a_, trans_b_, has_c_;
  Activation act_;
  GemmPipeline pipeline_;
};

// MatMul and FusedMatMul: numpy matmul (1-D operands promoted, batch dims broadcast), then a
// bias over the last dim and an activation.
// A MatMul operand's dims and element strides, promoted as numpy's matmul promotes them (a
// 1-D A is one row, a 1-D B one column) and to `rank` (missing batch dims have size 1):
// row-major, or the strides of a Transpose the session folded into the read.
struct Operand {
  std::vector<int64_t> dims, strides;
};
Operand promote(const GpuTensor& t, bool is_b, size_t rank) {
  Operand o{t.dims, t.strides.empty() ? strides_of(t.dims) : t.strides};
  if (o.dims.size() == 1 && is_b) {
    o.dims.push_back(1);
    o.strides.push_back(1);
  } else if (o.dims.size() == 1) {
    o.strides.insert(o.strides.begin(), o.dims[0] * o.strides[0]);
    o.dims.insert(o.dims.begin(), 1);
  }
  const size_t pad = rank > o.dims.size() ? rank - o.dims.size() : 0;
  o.dims.insert(o.dims.begin(), pad, 1);
  o.strides.insert(o.strides.begin(), pad, 0);
  return o;
}
size_t matmul_rank(const std::vector<GpuTensor>& in) { return std::max<size_t>({in[0].dims.size(), in[1].dims.size(), 2}); }

// Whether A's rows follow one another at one stride across its batch dims, so that a batch
// over a shared B is one product with the rows stacked.
bool rows_stack(const Operand& a) {
  const size_t rank = a.dims.size();
  int64_t next = a.strides[rank - 2] * a.dims[rank - 2];
  for (size_t d = rank - 2; d-- > 0;) {
    if (a.dims[d] == 1) continue;
    if (a.strides[d] != next) return false;
    next *= a.dims[d];
  }
  return true;
}

// B the same for every batch element (a weight matrix, as in a transformer's projections).
bool shared_b(const Operand& b) { return std::all_of(b.dims.begin(), b.dims.end() - 2, [](int64_t v) { return v == 1; }); }

class MatMulKernel final : public GpuKernel {
 public:
  explicit MatMulKernel(const KernelInit& init)
      : node_(init.node),
        has_bias_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr),
        act_(fused_activation(init.node)) {}

  void prepare(Gpu& gpu) override { pipeline_ = gemm_pipeline(gpu, act_, has_bias_, false); }

  // A and B take any strides, but for a shared B a transposed A whose rows do not stack: one
  // thin product per batch element is slower than the Transpose it would save.
  bool reads_strided(size_t i, const std::vector<GpuTensor>& in) const override {
    if (i > 1) return false;
    if (i == 1) return true;
    const size_t rank = matmul_rank(in);
    const Operand a = promote(in[0], false, rank);
    return !shared_b(promote(in[1], true, rank)) || rows_stack(a);
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const size_t rank = matmul_rank(in);
    const Operand a = promote(in[0], false, rank), b = promote(in[1], true, rank);
    GemmPush p{};
    p.M = static_cast<uint32_t>(a.dims[rank - 2]);
    p.K = static_cast<uint32_t>(a.dims[rank - 1]);
    p.N = static_cast<uint32_t>(b.dims[rank - 1]);
    p.a_rs = static_cast<uint32_t>(a.strides[rank - 2]);
    p.a_cs = static_cast<uint32_t>(a.strides[rank - 1]);
    p.b_rs = static_cast<uint32_t>(b.strides[rank - 2]);
    p.b_cs = static_cast<uint32_t>(b.strides[rank - 1]);
    p.alpha = in[0].scale * in[1].scale;
    p.beta = 1.0f;
    std::vector<int64_t> batch(rank - 2), a_bs(rank - 2), b_bs(rank - 2);
    for (size_t d = 0; d + 2 < rank; ++d) {
      batch[d] = std::max(a.dims[d], b.dims[d]);
      a_bs[d] = a.dims[d] == 1 ? 0 : a.strides[d];
      b_bs[d] = b.dims[d] == 1 ? 0 : b.strides[d];
    }
    // A batch over a shared B whose A rows stack is one product, tiled like any large GEMM
    // rather than one thin product per batch element.
    const int64_t rows = std::accumulate(batch.begin(), batch.end(), int64_t{p.M}, std::multiplies<>());
    if (shared_b(b) && !batch.empty() && rows_stack(a) && rows <= std::numeric_limits<uint32_t>::max()) {
      p.M = static_cast<uint32_t>(rows);
      batch.clear();
      a_bs.clear();
      b_bs.clear();
    }
    Range bias = rec.unused();
    if (has_bias_) {
      if (in[2].numel() != p.N)
        throw UnsupportedError(node_.describe() + ": a bias of " + std::to_string(in[2].numel()) + " elements for " +
                               std::to_string(p.N) + " columns");
      p.bias_cs = 1;
      bias = in[2].range;
    }
    record_gemm(rec, node_, pipeline_, p, batch, a_bs, b_bs, in[0].range, in[1].range, bias, rec.unused(), out[0].range);
  }

 private:
  const ir::Node& node_;
  bool has_bias_;
  Activation act_;
  GemmPipeline pipeline_;
};

std::string gemm_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  if (std::string why = require_rank(init, 0, {2}); !why.empty()) return why;
  if (std::string why = require_rank(init, 1, {2}); !why.empty()) return why;
  if (init.node.inputs().size() > 2 && init.node.input(2) != nullptr) {
    const ir::Shape& c = init.input_types[2].shape();
    if (!c.has_rank() || c.rank() > 2) return "C must have rank 2 or less";
  }
  return "";
}

std::string matmul_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  for (size_t i = 0; i < 2; ++i) {
    const ir::Shape& s = init.input_types[i].shape();
    if (!s.has_rank()) return "input " + std::to_string(i) + " has an unknown rank";
    if (s.rank() == 0) return "input " + std::to_string(i) + " is a scalar";
  }
  return "";
}

}  // namespace

void register_matmul(KernelRegistry& r) {
  auto gemm = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(init); };
  auto matmul = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(init); };
  r.add("Gemm", gemm, gemm_check);
  r.add("FusedGemm", gemm, gemm_check, "ai.tether");
  r.add("MatMul", matmul, matmul_check);
  r.add("FusedMatMul", matmul, matmul_check, "ai.tether");
}

}  // namespace tether::engine::vulkan
