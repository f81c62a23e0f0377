// Channels-last float convolutions (see conv_nhwc.h): the portable micro-kernels, ISA
// selection, and the kernel that packs the weights, pads the input along W, cuts the output
// into tiles and runs them on the pool.
#include "engine/cpu/conv_nhwc.h"

#include <algorithm>
#include <cstring>

#include "util/cpu_features.h"

namespace tether::engine::cpu {

namespace {

constexpr int kGenericMr = 4;
// Tasks per thread a convolution is cut into at least, when it can be (uneven tasks even out).
constexpr int64_t kTasksPerThread = 4;
// Packed weights up to this size are read from cache for every unit of pixels (see run_dense).
constexpr int64_t kCachedWeightBytes = 512 << 10;
constexpr int kGenericNr = 16;

void f32_conv_nhwc_4x16__generic(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                                 int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy, int64_t n,
                                 bool accumulate, const TileEpilogue* ep) {
  float acc[kGenericMr][kGenericNr] = {};
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t i = 0; i < cin; ++i) {
      const float* wr = w + w_off[t] + i * kGenericNr;
      for (int64_t r = 0; r < rows; ++r) {
        const float a = x[r * xs + x_off[t] + i];
        for (int j = 0; j < kGenericNr; ++j) acc[r][j] += a * wr[j];
      }
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      y[r * ldy + j] = tile_epilogue(accumulate ? y[r * ldy + j] + acc[r][j] : acc[r][j], ep, r, j);
}

void f32_dwconv_nhwc_4x16__generic(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                                   int64_t taps, int64_t c, const float* w, float* y, int64_t ldy,
                                   const TileEpilogue* ep) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < taps; ++t) acc += x[r * xs + x_off[t] + j] * w[w_off[t] + j];
      y[r * ldy + j] = tile_epilogue(acc, ep, r, j);
    }
}

void f32_conv_nhwc_row_4x16__generic(const float* x, int64_t cin, const float* w, int64_t panel_stride,
                                     int64_t panels, float* y, int64_t n, bool accumulate, const TileEpilogue* ep) {
  const int64_t no_offset = 0;
  for (int64_t q = 0; q < panels; ++q) {
    TileEpilogue e;
    if (ep != nullptr) {
      e = *ep;
      e.col_bias = ep->col_bias != nullptr ? ep->col_bias + q * kGenericNr : nullptr;
      e.sum = ep->sum != nullptr ? ep->sum + q * kGenericNr : nullptr;
    }
    f32_conv_nhwc_4x16__generic(1, x, 0, &no_offset, &no_offset, 1, cin, w + q * panel_stride, y + q * kGenericNr, 0,
                                std::min<int64_t>(kGenericNr, n - q * kGenericNr), accumulate, ep != nullptr ? &e : nullptr);
  }
}

NhwcConvIsa select() {
  const util::CpuFeatures& f = util::cpu_features();
#if defined(__x86_64__)
  if (f.avx512)
    return {"f32_conv_nhwc_14x32__avx512", 14, 32, f32_conv_nhwc_14x32__avx512, f32_dwconv_nhwc_8x16__avx512, 8, 16,
            f32_dwconv_nhwc_rows_8x16__avx512, f32_conv_nhwc_row_4x32__avx512};
  if (f.avx2)
    return {"f32_conv_nhwc_6x16__avx2", 6, 16, f32_conv_nhwc_6x16__avx2, f32_dwconv_nhwc_8x8__avx2, 8, 8, nullptr,
            f32_conv_nhwc_row_4x16__avx2};
#elif defined(__aarch64__)
  if (f.neon)
    return {"f32_conv_nhwc_6x16__neon", 6, 16, f32_conv_nhwc_6x16__neon, f32_dwconv_nhwc_8x8__neon, 8, 8, nullptr,
            f32_conv_nhwc_row_4x16__neon};
#endif
  return {"f32_conv_nhwc_4x16__generic", kGenericMr, kGenericNr, f32_conv_nhwc_4x16__generic,
          f32_dwconv_nhwc_4x16__generic, kGenericMr, kGenericNr, nullptr, f32_conv_nhwc_row_4x16__generic};
}

bool is_depthwise(int64_t group, const std::vector<int64_t>& w) {
  return group > 1 && w.size() == 4 && w[0] == group && w[1] == 1;
}

// Sizes of one run: X [n, h, w, c] and Y [n, ho, wo, co], the geometry, and the input's
// padding along W (its copy is wp wide; none when pl and pr are 0).
struct Sizes {
  int64_t n, h, w, c, ho, wo, co;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pr, wp;
  bool flat;  ///< 1x1, stride 1, no padding: all pixels are one row (constant stride c)
  bool copy;  ///< X is read from a copy padded along W (wp wide), else in place (wp == w)
  int64_t taps() const { return kh * kw; }
  // Column of X where a tile starting at output column ow0 has its taps' origin, in the
  // columns of what is read (the padded copy, or X itself, where it may lie left of X: only
  // taps inside are read).
  int64_t origin(int64_t ow0) const { return ow0 * sw - (copy ? 0 : pl); }
};

// Splits `len` pixels into tiles of at most `mr`, as equal as they come.
inline int64_t tile_count(int64_t len, int64_t mr) { return (len + mr - 1) / mr; }
inline int64_t tile_begin(int64_t len, int64_t tiles, int64_t t) { return len * t / tiles; }

class NhwcConv final : public HostKernel {
 public:
  explicit NhwcConv(const KernelInit& init)
      : node_(init.node), epilogue_(Epilogue::from_node(init.node)), threads_(init.threads), isa_(nhwc_conv_isa()) {
    const ir::Tensor& w = *init.constant(1);
    w_dims_ = w.dims();
    const int64_t co = w_dims_[0], cin = w_dims_[1], taps = w_dims_[2] * w_dims_[3];
    depthwise_ = is_depthwise(init.node.attr_int("group", 1), w_dims_);
    const float* src = w.data<float>();
    if (depthwise_) {
      // Tap t's weights for every channel, padded to a whole channel block.
      const int64_t cpad = (co + isa_.dw_nr - 1) / isa_.dw_nr * isa_.dw_nr;
      packed_.assign(static_cast<size_t>(taps * cpad), 0.0f);
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t c = 0; c < co; ++c) packed_[static_cast<size_t>(t * cpad + c)] = src[c * taps + t];
      return;
    }
    // Panel p of group g holds the group's output channels [p * nr, p * nr + nr) as taps x cin
    // rows of nr weights (cin: the group's input channels).
    group_ = init.node.attr_int("group", 1);
    const int64_t nr = isa_.nr, cout_g = co / group_, panels = (cout_g + nr - 1) / nr;
    packed_.assign(static_cast<size_t>(group_ * panels * taps * cin * nr), 0.0f);
    for (int64_t o = 0; o < co; ++o) {
      const int64_t g = o / cout_g, og = o % cout_g, p = g * panels + og / nr;
      for (int64_t i = 0; i < cin; ++i)
        for (int64_t t = 0; t < taps; ++t)
          packed_[static_cast<size_t>(((p * taps + t) * cin + i) * nr + og % nr)] = src[(o * cin + i) * taps + t];
    }
  }

  bool packs_input(size_t i) const override { return i == 1; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    const Sizes s = sizes(in[0], out[0]);
    const int64_t pad = s.copy ? s.n * s.h * s.wp * s.c : 0;
    return pad * 4 + threads_ * 2 * s.taps() * 8 + 64;
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    View& y = out[0];
    const Sizes s = sizes(x, y);
    if (s.n == 0 || s.ho == 0 || s.wo == 0 || s.co == 0) return;
    const float* bias = present(in, 2) ? in[2].as<float>() : nullptr;
    const float* sum = present(in, 3) ? in[3].as<float>() : nullptr;
    TETHER_CHECK(sum == nullptr || in[3].dims == y.dims, "FusedConv: the summand's shape differs from the output's");
    auto* taps_scratch = reinterpret_cast<int64_t*>(ctx.scratch);
    auto* padded = reinterpret_cast<float*>(ctx.scratch + (threads_ * 2 * s.taps() * 8 + 63) / 64 * 64);
    const float* xp = x.as<float>();
    if (s.copy) {
      pad_columns(ctx, xp, s, padded);
      xp = padded;
    }
    if (depthwise_) run_depthwise(ctx, xp, s, bias, sum, y.as<float>(), taps_scratch);
    else run_dense(ctx, xp, s, bias, sum, y.as<float>(), taps_scratch);
  }

 private:
  Sizes sizes(const View& x, const View& y) const {
    Sizes s{};
    s.n = x.dims[0], s.h = x.dims[1], s.w = x.dims[2], s.c = x.dims[3];
    s.ho = y.dims[1], s.wo = y.dims[2], s.co = y.dims[3];
    const ConvGeometry g = conv_geometry(node_, {s.n, s.c, s.h, s.w}, w_dims_, {s.n, s.co, s.ho, s.wo}, false);
    s.kh = g.kernel[0], s.kw = g.kernel[1], s.sh = g.strides[0], s.sw = g.strides[1];
    s.dh = g.dilations[0], s.dw = g.dilations[1], s.pt = g.pad_begin[0], s.pl = g.pad_begin[1];
    // Columns past W that the last window reaches (at most the pads given).
    s.pr = std::max<int64_t>(0, (s.wo - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pl);
    // A dense convolution pads a copy (its tiles then read any tap whole); a depthwise one
    // reads X in place, its edge pixels in tiles of one whose taps outside are skipped.
    s.copy = !depthwise_ && (s.pl > 0 || s.pr > 0);
    s.wp = s.copy ? s.w + s.pl + s.pr : s.w;
    s.flat = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 && s.pl == 0 && s.ho == s.h && s.wo == s.w;
    return s;
  }

  // X's rows with pl zero columns before and pr after (rows of taps outside H are skipped,
  // so no rows of padding are needed).
  static void pad_columns(const RunContext& ctx, const float* x, const Sizes& s, float* dst) {
    const int64_t row = s.w * s.c, prow = s.wp * s.c;
    parallel(ctx, s.n * s.h, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* d = dst + r * prow;
        std::memset(d, 0, static_cast<size_t>(s.pl * s.c) * 4);
        std::memcpy(d + s.pl * s.c, x + r * row, static_cast<size_t>(row) * 4);
        std::memset(d + s.pl * s.c + row, 0, static_cast<size_t>(s.pr * s.c) * 4);
      }
    });
  }

  // The taps a tile of `rows` pixels from (row oh, column ow0) reads inside the input: their
  // offsets from the tile's base (xo) and their index (tap number, to be scaled by the caller).
  // With `merge_rows` (dense, dilation 1 along W) a kernel row's kw taps are one tap of kw * c
  // channels: in the input they are one contiguous run, and the weights of tap (ki, kj, i) lie
  // where those of tap ki, channel kj * c + i do. Its columns outside the input read the
  // padded copy's zeros.
  static int64_t tile_taps(const Sizes& s, int64_t oh, int64_t ow0, int64_t rows, bool merge_rows, int64_t* xo,
                           int64_t* index) {
    int64_t count = 0;
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      const int64_t ih = oh * s.sh - s.pt + ki * s.dh;
      if (ih < 0 || ih >= s.h) continue;
      if (merge_rows) {
        xo[count] = ih * s.wp * s.c;
        index[count++] = ki;
        continue;
      }
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const int64_t first = ow0 * s.sw - s.pl + kj * s.dw, last = first + (rows - 1) * s.sw;
        if (last < 0 || first >= s.w) continue;
        xo[count] = (ih * s.wp + kj * s.dw) * s.c;
        index[count++] = ki * s.kw + kj;
      }
    }
    return count;
  }

  // Work units: output rows (n * ho of them), or for a flat convolution blocks of pixels.
  struct Units {
    int64_t count, len;  // units, and pixels per unit (the last flat unit may be shorter)
  };
  // `others`: how many tasks each unit is split into besides (panels, channel blocks); units
  // of a flat convolution shrink (to one tile at least) until all threads have a few tasks.
  Units units(const Sizes& s, int mr, int64_t others) const {
    if (!s.flat) return {s.n * s.ho, s.wo};
    const int64_t pixels = s.n * s.h * s.w, wanted = (kTasksPerThread * threads_ + others - 1) / others;
    const int64_t len = std::max<int64_t>(mr, std::min<int64_t>(int64_t{mr} * 8, (pixels + wanted - 1) / wanted));
    return {(pixels + len - 1) / len, len};
  }

  // Calls f(rows, x base, y pixel index, taps, merged) for every tile of unit u, with the taps'
  // offsets in xo and indices in index (merged: the taps are whole kernel rows).
  template <typename F>
  void for_tiles(const Sizes& s, const Units& un, int64_t u, int mr, bool merge_rows, const float* xp, int64_t* xo,
                 int64_t* index, F&& f) const {
    if (s.flat) {
      const int64_t pixels = s.n * s.h * s.w, p0 = u * un.len, p1 = std::min(pixels, p0 + un.len);
      xo[0] = 0;
      index[0] = 0;
      for (int64_t p = p0; p < p1; p += mr) f(std::min<int64_t>(mr, p1 - p), xp + p * s.c, p, 1, merge_rows);
      return;
    }
    const int64_t img = u / s.ho, oh = u % s.ho;
    auto tile = [&](int64_t ow0, int64_t rows, bool merged) {
      const int64_t taps = tile_taps(s, oh, ow0, rows, merged, xo, index);
      f(rows, xp + (img * s.h * s.wp + s.origin(ow0)) * s.c, (img * s.ho + oh) * s.wo + ow0, taps, merged);
    };
    // Read in place, a pixel whose window crosses an edge of X is a tile of its own.
    const int64_t lo = s.copy ? 0 : std::min(s.wo, (s.pl + s.sw - 1) / s.sw);
    const int64_t last_in = s.w - 1 - (s.kw - 1) * s.dw + s.pl;  // the last inside window starts here
    const int64_t hi = s.copy ? s.wo : std::max(lo, std::min(s.wo, last_in < 0 ? 0 : last_in / s.sw + 1));
    for (int64_t ow = 0; ow < lo; ++ow) tile(ow, 1, false);
    const int64_t tiles = tile_count(hi - lo, mr);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t ow0 = lo + tile_begin(hi - lo, tiles, t);
      tile(ow0, lo + tile_begin(hi - lo, tiles, t + 1) - ow0, merge_rows);
    }
    for (int64_t ow = hi; ow < s.wo; ++ow) tile(ow, 1, false);
  }

  TileEpilogue tile_epilogue_of(const float* bias, bool& after) const {
    TileEpilogue te;
    te.col_bias = bias;
    after = !epilogue_.as_clamp(te.clamp, te.lo, te.hi);
    return te;
  }

  // Group 1 or grouped: panel p of all (group, panel) pairs computes output channels
  // [p * nr, p * nr + n) of its group from the group's input channels.
  void run_dense(const RunContext& ctx, const float* xp, const Sizes& s, const float* bias, const float* sum,
                 float* y, int64_t* taps_scratch) const {
    const int64_t nr = isa_.nr, cin_g = s.c / group_, cout_g = s.co / group_;
    const int64_t per_group = (cout_g + nr - 1) / nr, panels = group_ * per_group;
    const bool merge_rows = s.dw == 1 && group_ == 1;
    const int64_t cin = merge_rows ? s.kw * cin_g : cin_g;  // channels per tap
    // Small weights stay in cache while every unit of pixels runs through all panels (each
    // output pixel's channels written, and its summand read, in one go); large ones are read
    // once, each panel running through every unit.
    const bool pixels_outer = static_cast<int64_t>(packed_.size()) * 4 <= kCachedWeightBytes;
    // With small weights, a task is a unit of pixels through all panels when there are units
    // enough: a thread then writes every channel of its pixels, which the next layer's task on
    // that thread reads from its own cache (split by panels, every layer would read half its
    // input from the other core's).
    Units un = units(s, isa_.mr, pixels_outer ? 1 : panels);
    const bool by_pixels = pixels_outer && un.count >= kTasksPerThread * threads_;
    if (pixels_outer && !by_pixels) un = units(s, isa_.mr, panels);
    const int64_t per_task = by_pixels ? panels : 1;  // panels a task runs
    bool after = false;
    const TileEpilogue base = tile_epilogue_of(bias, after);
    auto task = [&](int thread, int64_t i0, int64_t i1) {
      int64_t* xo = taps_scratch + thread * 2 * s.taps();
      int64_t* index = xo + s.taps();
      for (int64_t i = i0 * per_task; i < i1 * per_task; ++i) {
        const int64_t p = pixels_outer ? i % panels : i / un.count, u = pixels_outer ? i / panels : i % un.count;
        const int64_t g = p / per_group, oc = g * cout_g + p % per_group * nr;  // the panel's first channel
        const int64_t n = std::min(nr, (g + 1) * cout_g - oc);
        const float* panel = packed_.data() + p * s.taps() * cin_g * nr;
        TileEpilogue te = base;
        te.col_bias = bias != nullptr ? bias + oc : nullptr;
        te.sum_ld = s.co;
        for_tiles(s, un, u, isa_.mr, merge_rows, xp, xo, index,
                  [&](int64_t rows, const float* xt, int64_t pixel, int64_t taps, bool merged) {
                    TETHER_CHECK(merged == merge_rows, "Conv: a dense tile's taps differ from the packing");
                    for (int64_t t = 0; t < taps; ++t) index[t] *= cin * nr;
                    float* yt = y + pixel * s.co + oc;
                    te.sum = sum != nullptr ? sum + pixel * s.co + oc : nullptr;
                    isa_.conv(rows, xt + g * cin_g, s.sw * s.c, xo, index, taps, cin, panel, yt, s.co, n, false, &te);
                    if (after)
                      for (int64_t r = 0; r < rows; ++r) epilogue_.apply(yt + r * s.co, n);
                  });
      }
    };
    run_tasks(ctx, panels * un.count / per_task, task);
  }

  void run_depthwise(const RunContext& ctx, const float* xp, const Sizes& s, const float* bias, const float* sum,
                     float* y, int64_t* taps_scratch) const {
    const int64_t cpad = (s.c + isa_.dw_nr - 1) / isa_.dw_nr * isa_.dw_nr;
    // Rows, and runs of channels when there are too few rows to give each thread a few tasks
    // (a 7 x 7 map of 960 channels).
    const int64_t rows_total = s.flat ? 1 : s.n * s.ho;
    const int64_t blocks = std::clamp<int64_t>((kTasksPerThread * threads_ + rows_total - 1) / rows_total, 1,
                                               (s.c + 63) / 64);
    const int64_t block_c = (s.c + blocks - 1) / blocks + isa_.dw_nr - 1;
    const int64_t width = block_c / isa_.dw_nr * isa_.dw_nr;  // channels per block, whole vectors
    const int64_t nblocks = (s.c + width - 1) / width;
    const Units un = units(s, isa_.dw_mr, nblocks);
    // Stride 1 along W, 3 or 5 taps: kernel rows at a time, each input pixel loaded once.
    const bool by_rows = isa_.depthwise_rows != nullptr && s.sw == 1 && s.dw == 1 && (s.kw == 3 || s.kw == 5);
    bool after = false;
    TileEpilogue te0 = tile_epilogue_of(bias, after);
    te0.sum_ld = s.c;
    auto task = [&](int thread, int64_t i0, int64_t i1) {
      int64_t* xo = taps_scratch + thread * 2 * s.taps();
      int64_t* index = xo + s.taps();
      TileEpilogue te = te0;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t u = i / nblocks, c0 = i % nblocks * width, c = std::min(width, s.c - c0);
        te.col_bias = bias != nullptr ? bias + c0 : nullptr;
        for_tiles(s, un, u, isa_.dw_mr, by_rows, xp, xo, index,
                  [&](int64_t rows, const float* xt, int64_t pixel, int64_t taps, bool merged) {
                    float* yt = y + pixel * s.c + c0;
                    te.sum = sum != nullptr ? sum + pixel * s.c + c0 : nullptr;
                    const float* w = packed_.data() + c0;
                    if (merged) {
                      for (int64_t t = 0; t < taps; ++t) index[t] *= s.kw * cpad;
                      isa_.depthwise_rows(rows, xt + c0, s.c, xo, index, taps, s.kw, c, cpad, w, yt, s.c, &te);
                    } else {
                      for (int64_t t = 0; t < taps; ++t) index[t] *= cpad;
                      isa_.depthwise(rows, xt + c0, s.sw * s.c, xo, index, taps, c, w, yt, s.c, &te);
                    }
                    if (after)
                      for (int64_t r = 0; r < rows; ++r) epilogue_.apply(yt + r * s.c, c);
                  });
      }
    };
    run_tasks(ctx, un.count * nblocks, task);
  }

  template <typename F>
  static void run_tasks(const RunContext& ctx, int64_t n, F&& task) {
    if (ctx.pool == nullptr || n == 1) task(0, 0, n);
    else ctx.pool->parallel_for_indexed(n, 1, task);
  }

  const ir::Node& node_;
  Epilogue epilogue_;
  int threads_;
  const NhwcConvIsa& isa_;
  std::vector<int64_t> w_dims_;
  bool depthwise_ = false;
  int64_t group_ = 1;
  std::vector<float> packed_;
};

// ConvTranspose channels last whose kernel equals its stride, without padding, dilation or
// groups (the 2x upsampling of UNets and FPNs): each input pixel writes its own kh x kw patch of
// output pixels, so for each kernel position (a, b) the output is a 1x1 convolution of the
// input whose pixels land sw * C_out floats apart. No output is written twice and none is
// summed.
class NhwcConvTranspose final : public HostKernel {
 public:
  explicit NhwcConvTranspose(const KernelInit& init) : isa_(nhwc_conv_isa()) {
    const ir::Tensor& w = *init.constant(1);  // [cin, cout, kh, kw]
    cin_ = w.dims()[0], cout_ = w.dims()[1], kh_ = w.dims()[2], kw_ = w.dims()[3];
    const int64_t nr = isa_.nr, panels = (cout_ + nr - 1) / nr;
    panel_floats_ = cin_ * nr;
    // Position (a, b), panel p: cin rows of nr output channels.
    packed_.assign(static_cast<size_t>(kh_ * kw_ * panels * panel_floats_), 0.0f);
    const float* src = w.data<float>();
    for (int64_t i = 0; i < cin_; ++i)
      for (int64_t o = 0; o < cout_; ++o)
        for (int64_t t = 0; t < kh_ * kw_; ++t)
          packed_[static_cast<size_t>((t * panels + o / nr) * panel_floats_ + i * nr + o % nr)] =
              src[(i * cout_ + o) * kh_ * kw_ + t];
  }

  bool packs_input(size_t i) const override { return i == 1; }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    View& y = out[0];
    if (y.numel() == 0) return;
    const int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], wo = y.dims[2];
    const float* bias = present(in, 2) ? in[2].as<float>() : nullptr;
    const int64_t nr = isa_.nr, panels = (cout_ + nr - 1) / nr, mr = isa_.mr;
    const int64_t no_offset = 0;
    parallel(ctx, n * h, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x.as<float>() + r * w * cin_;
        const int64_t img = r / h, ih = r % h;
        for (int64_t iw0 = 0; iw0 < w; iw0 += mr) {
          const int64_t rows = std::min(mr, w - iw0);
          for (int64_t a = 0; a < kh_; ++a)
            for (int64_t b = 0; b < kw_; ++b)
              for (int64_t p = 0; p < panels; ++p) {
                TileEpilogue te;
                te.col_bias = bias != nullptr ? bias + p * nr : nullptr;
                float* yt = y.as<float>() + ((img * y.dims[1] + ih * kh_ + a) * wo + iw0 * kw_ + b) * cout_ + p * nr;
                isa_.conv(rows, xr + iw0 * cin_, cin_, &no_offset, &no_offset, 1, cin_,
                          packed_.data() + ((a * kw_ + b) * panels + p) * panel_floats_, yt, kw_ * cout_,
                          std::min(nr, cout_ - p * nr), false, &te);
              }
        }
      }
    });
  }

 private:
  const NhwcConvIsa& isa_;
  int64_t cin_ = 0, cout_ = 0, kh_ = 0, kw_ = 0, panel_floats_ = 0;
  std::vector<float> packed_;
};

}  // namespace

std::string nhwc_conv_transpose_support(const KernelInit& init) {
  if (std::string why = float_only(init); !why.empty()) return why;
  const ir::Tensor* w = init.constant(1);
  if (w == nullptr || w->rank() != 4) return "channels_last takes constant 4-D weights";
  if (!ops::conv_transpose_is_patch_scatter(init.node, w->dims()))
    return "channels_last runs ConvTranspose whose kernel equals its stride, with no padding, dilation, groups or "
           "output padding";
  return "";
}

std::unique_ptr<Kernel> make_nhwc_conv_transpose(const KernelInit& init) {
  return std::make_unique<NhwcConvTranspose>(init);
}

const NhwcConvIsa& nhwc_conv_isa() {
  static const NhwcConvIsa isa = select();
  return isa;
}

std::string nhwc_conv_support(const KernelInit& init) {
  if (std::string why = float_only(init); !why.empty()) return why;
  const ir::Tensor* w = init.constant(1);
  if (w == nullptr || w->rank() != 4) return "channels_last takes constant 4-D weights";
  const ir::Shape& x = init.input_types[0].shape();
  if (!x.has_rank() || x.rank() != 4)
    return "channels_last takes a 4-D X [N, H, W, C], got " + (x.has_rank() ? x.to_string() : std::string("unknown rank"));
  const int64_t group = init.node.attr_int("group", 1);
  if (group < 1 || w->dims()[0] % group != 0)
    return "group " + std::to_string(group) + " does not divide the " + std::to_string(w->dims()[0]) + " output channels";
  return "";
}

std::unique_ptr<Kernel> make_nhwc_conv(const KernelInit& init) { return std::make_unique<NhwcConv>(init); }

}  // namespace tether::engine::cpu
