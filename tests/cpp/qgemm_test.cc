// The integer GEMM (engine/cpu/qgemm.h) against a plain int64 reference written here, for every
// kernel this machine runs: awkward sizes, int8 and uint8 on both sides, zero points at the
// ends of their ranges, per-row and per-column zero points, extreme values, every output kind,
// strided stores, A gathered by a rows function, and thread pools of 1 and 3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/qgemm.h"
#include "util/thread_pool.h"

namespace {

using tether::engine::RunContext;
using tether::engine::cpu::Epilogue;
using tether::engine::cpu::qgemm;
using tether::engine::cpu::qgemm_isa;
using tether::engine::cpu::qgemm_isa_name;
using tether::engine::cpu::qgemm_isas;
using tether::engine::cpu::qgemm_scratch_bytes;
using tether::engine::cpu::QGemmA;
using tether::engine::cpu::QGemmIsa;
using tether::engine::cpu::QGemmOutput;
using tether::engine::cpu::QPackedB;
using tether::util::ThreadPool;
using Kind = QGemmOutput::Kind;

ThreadPool& pool(int threads) {
  static ThreadPool one(1), three(3);
  return threads == 1 ? one : three;
}

// A [m, k] and B [k, n] as bytes (int8 or uint8 bit patterns) with their zero points.
struct Operands {
  int64_t m = 0, n = 0, k = 0;
  bool a_signed = false, b_signed = true;
  std::vector<uint8_t> a;  // element (i, p) at i * k + p
  std::vector<uint8_t> b;  // element (p, j) at p * b_rs + j * b_cs
  int64_t b_rs = 0, b_cs = 1;
  std::vector<int32_t> za, zb;  // one value, or m (za) / n (zb)

  int32_t a_at(int64_t i, int64_t p) const {
    const uint8_t v = a[i * k + p];
    return a_signed ? static_cast<int8_t>(v) : v;
  }
  int32_t b_at(int64_t p, int64_t j) const {
    const uint8_t v = b[p * b_rs + j * b_cs];
    return b_signed ? static_cast<int8_t>(v) : v;
  }
  int32_t za_of(int64_t i) const { return za[za.size() > 1 ? i : 0]; }
  int32_t zb_of(int64_t j) const { return zb[zb.size() > 1 ? j : 0]; }
};

// A zero point of the type: the ends of the range half the time, else anywhere in it.
int32_t random_zero_point(bool is_signed, std::mt19937& rng) {
  const int32_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  switch (rng() % 4) {
    case 0: return lo;
    case 1: return hi;
    default: return lo + static_cast<int32_t>(rng() % 256);
  }
}

Operands random_operands(int64_t m, int64_t n, int64_t k, bool a_signed, bool b_signed, bool za_per_row,
                         bool zb_per_column, std::mt19937& rng, bool b_transposed = false) {
  Operands o;
  o.m = m;
  o.n = n;
  o.k = k;
  o.a_signed = a_signed;
  o.b_signed = b_signed;
  o.a.resize(static_cast<size_t>(m * k));
  o.b.resize(static_cast<size_t>(k * n));
  for (uint8_t& v : o.a) v = static_cast<uint8_t>(rng());
  for (uint8_t& v : o.b) v = static_cast<uint8_t>(rng());
  o.b_rs = b_transposed ? 1 : n;
  o.b_cs = b_transposed ? k : 1;
  for (int64_t i = 0; i < (za_per_row ? m : 1); ++i) o.za.push_back(random_zero_point(a_signed, rng));
  for (int64_t j = 0; j < (zb_per_column ? n : 1); ++j) o.zb.push_back(random_zero_point(b_signed, rng));
  return o;
}

// sum_p (A(i, p) - za) (B(p, j) - zb) in int64, wrapped to int32 as qgemm.h defines.
std::vector<int32_t> reference_sums(const Operands& o) {
  std::vector<int32_t> s(static_cast<size_t>(o.m * o.n));
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.n; ++j) {
      int64_t acc = 0;
      for (int64_t p = 0; p < o.k; ++p)
        acc += static_cast<int64_t>(o.a_at(i, p) - o.za_of(i)) * (o.b_at(p, j) - o.zb_of(j));
      s[i * o.n + j] = static_cast<int32_t>(static_cast<uint32_t>(acc));
    }
  return s;
}

// An output kind with its parameters and storage. Element (i, j) at i * row_stride + j *
// col_stride; storage has room for `pad` extra elements at the end of every row, which must
// keep the sentinel.
struct Output {
  Kind kind = Kind::kInt32;
  int64_t m = 0, n = 0;
  bool transposed = false;  // C stored [n, m]
  int64_t pad = 0;          // elements past each stored row
  std::vector<int32_t> bias;
  std::vector<float> scale{1.0f}, float_bias;
  int32_t zero_point = 0, lo = 0, hi = 0;
  Epilogue act;
  std::vector<uint8_t> storage;

  int64_t row_stride() const { return transposed ? 1 : n + pad; }
  int64_t col_stride() const { return transposed ? m + pad : 1; }
  size_t elem() const { return kind == Kind::kInt8 || kind == Kind::kUInt8 ? 1 : 4; }
  int64_t elements() const { return transposed ? n * (m + pad) : m * (n + pad); }

  QGemmOutput spec() {
    storage.assign(static_cast<size_t>(elements()) * elem(), 0xA5);
    QGemmOutput out;
    out.kind = kind;
    out.c = storage.data();
    out.row_stride = row_stride();
    out.col_stride = col_stride();
    out.bias = bias.empty() ? nullptr : bias.data();
    out.bias_per_column = bias.size() > 1;
    out.scale = scale.data();
    out.scale_per_column = scale.size() > 1;
    out.float_bias = float_bias.empty() ? nullptr : float_bias.data();
    out.float_bias_per_column = float_bias.size() > 1;
    out.zero_point = zero_point;
    out.lo = lo;
    out.hi = hi;
    out.act = act;
    return out;
  }
};

// The output qgemm.h specifies for sums s, computed here from the header's formulas:
// requantization with std::nearbyint (round half to even), the activation by Epilogue::apply.
std::vector<double> expected_output(const Output& o, const std::vector<int32_t>& sums) {
  std::vector<double> want(sums.size());
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.n; ++j) {
      int32_t s = sums[i * o.n + j];
      if (!o.bias.empty())
        s = static_cast<int32_t>(static_cast<uint32_t>(s) + static_cast<uint32_t>(o.bias[o.bias.size() > 1 ? j : 0]));
      const float scale = o.scale[o.scale.size() > 1 ? j : 0];
      double w = 0;
      switch (o.kind) {
        case Kind::kInt32: w = s; break;
        case Kind::kInt8:
        case Kind::kUInt8: {
          float v = static_cast<float>(s) * scale;
          v = std::max(v, static_cast<float>(o.lo - o.zero_point));
          v = std::min(v, static_cast<float>(o.hi - o.zero_point));
          w = static_cast<int32_t>(std::nearbyint(v)) + o.zero_point;
          break;
        }
        case Kind::kFloat32: {
          float v = static_cast<float>(s) * scale;
          if (!o.float_bias.empty()) v = v + o.float_bias[o.float_bias.size() > 1 ? j : 0];
          o.act.apply(&v, 1);
          w = v;
          break;
        }
      }
      want[i * o.n + j] = w;
    }
  return want;
}

double stored_element(const Output& o, int64_t at) {
  const uint8_t* p = o.storage.data() + at * static_cast<int64_t>(o.elem());
  switch (o.kind) {
    case Kind::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case Kind::kInt8: return static_cast<int8_t>(*p);
    case Kind::kUInt8: return *p;
    case Kind::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
  }
  return 0;
}

// Every element of C equals the expectation exactly, and the padding was not written.
void expect_output(const Output& o, const std::vector<double>& want) {
  int64_t bad = 0;
  for (int64_t i = 0; i < o.m; ++i)
    for (int64_t j = 0; j < o.n; ++j) {
      const double got = stored_element(o, i * o.row_stride() + j * o.col_stride());
      if (got != want[i * o.n + j] && ++bad <= 5)
        ADD_FAILURE() << "C(" << i << ", " << j << ") = " << got << ", want " << want[i * o.n + j];
    }
  EXPECT_EQ(bad, 0) << "elements differ of " << o.m * o.n;
  if (o.pad > 0) {
    const int64_t runs = o.transposed ? o.n : o.m, len = o.transposed ? o.m : o.n;
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t q = len; q < len + o.pad; ++q)
        for (size_t b = 0; b < o.elem(); ++b)
          ASSERT_EQ(o.storage[(r * (len + o.pad) + q) * o.elem() + b], 0xA5) << "padding written";
  }
}

struct RunOptions {
  int threads = 1;     // 0: no pool
  bool rows = false;   // A gathered by a rows function
  bool pack_into = false;
  int64_t a_pad = 0;   // A's rows lda = k + a_pad apart, garbage between them
};

// Runs qgemm with `isa`'s packing of B into `out`'s storage.
void run(const Operands& o, const QGemmIsa& isa, Output& out, const RunOptions& opt) {
  std::shared_ptr<void> b_storage;
  QPackedB b;
  if (opt.pack_into) {
    b_storage.reset(std::aligned_alloc(64, static_cast<size_t>((QPackedB::bytes_needed(o.k, o.n, isa) + 63) / 64 * 64 + 64)),
                    std::free);
    b = QPackedB::pack_into(b_storage.get(), o.b.data(), o.b_signed, o.k, o.n, o.b_rs, o.b_cs, o.zb.data(),
                            o.zb.size() > 1, isa);
  } else {
    b = QPackedB::pack(o.b.data(), o.b_signed, o.k, o.n, o.b_rs, o.b_cs, o.zb.data(), o.zb.size() > 1, isa);
  }
  ASSERT_EQ(b.isa(), &isa);
  QGemmA a;
  a.is_signed = o.a_signed;
  a.zero_points = o.za.data();
  a.per_row = o.za.size() > 1;
  int64_t rows_seen = 0;
  std::vector<uint8_t> a_t;  // A stored [k, m] for the rows function (a strided gather, as in im2col), or padded
  if (opt.rows) {
    a_t.resize(o.a.size());
    for (int64_t i = 0; i < o.m; ++i)
      for (int64_t p = 0; p < o.k; ++p) a_t[p * o.m + i] = o.a[i * o.k + p];
    a.rows = [&](const RunContext& ctx, int64_t i0, int64_t count, void* dst) {
      EXPECT_EQ(ctx.pool, nullptr);
      EXPECT_GE(i0, 0);
      EXPECT_GT(count, 0);
      EXPECT_LE(i0 + count, o.m);
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t r = 0; r < count; ++r)
        for (int64_t p = 0; p < o.k; ++p) d[r * o.k + p] = a_t[p * o.m + i0 + r];
      __atomic_add_fetch(&rows_seen, count, __ATOMIC_RELAXED);
    };
  } else if (opt.a_pad > 0) {
    a_t.assign(static_cast<size_t>(o.m * (o.k + opt.a_pad)), 0xEE);
    for (int64_t i = 0; i < o.m; ++i) std::memcpy(&a_t[i * (o.k + opt.a_pad)], &o.a[i * o.k], static_cast<size_t>(o.k));
    a.data = a_t.data();
    a.lda = o.k + opt.a_pad;
  } else {
    a.data = o.a.data();
    a.lda = o.k;
  }
  // Exactly the scratch asked for, then a guard that must stay untouched.
  const int threads = opt.threads == 0 ? 1 : opt.threads;
  const int64_t bytes = qgemm_scratch_bytes(o.m, o.n, o.k, threads);
  constexpr int64_t kGuard = 256;
  std::shared_ptr<void> scratch(std::aligned_alloc(64, static_cast<size_t>((bytes + kGuard + 63) / 64 * 64)), std::free);
  auto* guard = static_cast<uint8_t*>(scratch.get()) + bytes;
  std::memset(guard, 0x5A, kGuard);
  RunContext ctx;
  ctx.pool = opt.threads == 0 ? nullptr : &pool(opt.threads);
  qgemm(ctx, o.m, a, b, out.spec(), static_cast<std::byte*>(scratch.get()));
  for (int64_t q = 0; q < kGuard; ++q) ASSERT_EQ(guard[q], 0x5A) << "written past the scratch";
  if (opt.rows) {
    EXPECT_GE(rows_seen, o.m);  // every row gathered, once per column block
  }
}

// Checks every kernel on `o` with output `out` (kind and parameters; sized here).
void check_all_isas(const Operands& o, Output out, const RunOptions& opt = {}) {
  out.m = o.m;
  out.n = o.n;
  const std::vector<double> want = expected_output(out, reference_sums(o));
  for (const QGemmIsa* isa : qgemm_isas()) {
    SCOPED_TRACE(qgemm_isa_name(*isa) + " m=" + std::to_string(o.m) + " n=" + std::to_string(o.n) +
                 " k=" + std::to_string(o.k) + " threads=" + std::to_string(opt.threads));
    run(o, *isa, out, opt);
    expect_output(out, want);
  }
}

TEST(QGemm, KernelsAreNamedByTileAndIsaWithTheChosenOneFirst) {
  const std::vector<const QGemmIsa*> isas = qgemm_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), &qgemm_isa());
  EXPECT_EQ(qgemm_isa_name(*isas.back()), "qs8_gemm_4x16__generic");
  for (const QGemmIsa* isa : isas) EXPECT_EQ(qgemm_isa_name(*isa).rfind("qs8_gemm_", 0), 0u);
}

TEST(QGemm, SumsMatchInt64ReferenceOnAwkwardSizes) {
  std::mt19937 rng(1);
  for (int64_t m : {1, 3, 5, 13, 17, 33, 127})
    for (int64_t n : {1, 3, 17, 31, 33, 64, 300})
      for (int64_t k : {1, 3, 4, 5, 13, 31, 64, 255, 300}) {
        const bool a_signed = rng() % 2, b_signed = rng() % 2, za_rows = rng() % 3 == 0, zb_cols = rng() % 3 == 0;
        const Operands o = random_operands(m, n, k, a_signed, b_signed, za_rows, zb_cols, rng);
        check_all_isas(o, Output{}, RunOptions{static_cast<int>(rng() % 2) * 2 + 1});
      }
}

TEST(QGemm, SumsMatchOnTheRemainingSizesWithThreeThreads) {
  std::mt19937 rng(2);
  for (int64_t m : {4, 31, 64, 255, 300})
    for (int64_t n : {4, 5, 13, 127, 255})
      for (int64_t k : {17, 33, 127}) {
        const Operands o = random_operands(m, n, k, rng() % 2, rng() % 2, rng() % 2, rng() % 2, rng);
        check_all_isas(o, Output{}, RunOptions{3});
      }
}

TEST(QGemm, EverySignednessAndPerRowPerColumnZeroPointPairing) {
  std::mt19937 rng(3);
  for (bool a_signed : {false, true})
    for (bool b_signed : {false, true})
      for (bool za_rows : {false, true})
        for (bool zb_cols : {false, true})
          for (int threads : {0, 1, 3}) {
            const Operands o = random_operands(29, 70, 45, a_signed, b_signed, za_rows, zb_cols, rng);
            check_all_isas(o, Output{}, RunOptions{threads});
          }
}

TEST(QGemm, ZeroPointsAtTheEndsOfTheirRanges) {
  std::mt19937 rng(4);
  for (bool a_signed : {false, true})
    for (bool b_signed : {false, true})
      for (int ea : {0, 1})
        for (int eb : {0, 1}) {
          Operands o = random_operands(13, 33, 77, a_signed, b_signed, false, false, rng);
          o.za = {a_signed ? (ea ? 127 : -128) : (ea ? 255 : 0)};
          o.zb = {b_signed ? (eb ? 127 : -128) : (eb ? 255 : 0)};
          check_all_isas(o, Output{}, RunOptions{3});
        }
}

// The largest products of each sign at depth 1024: 255 x -128 (and with zero points, 255 x
// -255) summed 1024 times, far past what an int16 pair sum (vpmaddubsw) could hold.
TEST(QGemm, ExtremeValuesDoNotSaturateAtDepth1024) {
  struct Extreme {
    bool a_signed, b_signed;
    uint8_t a, b;
    int32_t za, zb;
  };
  const Extreme cases[] = {
      {false, true, 255, 0x80, 0, 0},     // 255 x -128
      {false, true, 255, 127, 0, 0},      // 255 x 127
      {false, false, 255, 0, 0, 255},     // 255 x -255
      {true, true, 0x80, 0x80, 127, 0},   // -255 x -128
      {true, false, 127, 255, -128, 0},   // 255 x 255
      {false, false, 0, 255, 255, 0},     // -255 x 255
  };
  for (const Extreme& e : cases) {
    Operands o;
    o.m = 7;
    o.n = 37;
    o.k = 1024;
    o.a_signed = e.a_signed;
    o.b_signed = e.b_signed;
    o.a.assign(static_cast<size_t>(o.m * o.k), e.a);
    o.b.assign(static_cast<size_t>(o.k * o.n), e.b);
    o.b_rs = o.n;
    o.za = {e.za};
    o.zb = {e.zb};
    const std::vector<int32_t> sums = reference_sums(o);
    EXPECT_GE(std::abs(static_cast<int64_t>(sums[0])), 255 * 127 * 1024);
    check_all_isas(o, Output{}, RunOptions{3});
  }
}

TEST(QGemm, DepthZeroGivesTheBiasAlone) {
  std::mt19937 rng(5);
  const Operands o = random_operands(5, 19, 0, false, true, false, false, rng);
  Output out;
  out.bias.resize(19);
  for (int32_t& v : out.bias) v = static_cast<int32_t>(rng() % 2001) - 1000;
  check_all_isas(o, out, RunOptions{3});
}

// Scales of 0.5 and 0.25 put many values exactly half way between integers: round half to even.
std::vector<float> scales(int64_t n, bool per_column, std::mt19937& rng) {
  const float choices[] = {0.5f, 0.25f, 0.013f, 0.0371f, 1.0f / 300.0f};
  std::vector<float> s(per_column ? static_cast<size_t>(n) : 1);
  for (float& v : s) v = choices[rng() % 5];
  return s;
}

TEST(QGemm, RequantizedOutputsMatchBitForBitWithScalesBiasesAndClamps) {
  std::mt19937 rng(6);
  for (Kind kind : {Kind::kInt8, Kind::kUInt8})
    for (bool per_column : {false, true})
      for (int clamp : {0, 1, 2})  // the type's range, a fused Relu, a narrower Clip
        for (int64_t k : {3, 64, 255}) {
          const Operands o = random_operands(17, 45, k, rng() % 2, rng() % 2, rng() % 2, rng() % 2, rng);
          Output out;
          out.kind = kind;
          out.scale = scales(o.n, per_column, rng);
          out.scale.front() = 0.5f;
          out.bias.resize(per_column ? static_cast<size_t>(o.n) : 1);
          for (int32_t& v : out.bias) v = static_cast<int32_t>(rng() % 20001) - 10000;
          const bool s8 = kind == Kind::kInt8;
          out.zero_point = s8 ? static_cast<int32_t>(rng() % 256) - 128 : static_cast<int32_t>(rng() % 256);
          out.lo = s8 ? -128 : 0;
          out.hi = s8 ? 127 : 255;
          if (clamp == 1) out.lo = out.zero_point;
          if (clamp == 2) {
            out.lo = std::max(out.lo, out.zero_point - 20);
            out.hi = std::min(out.hi, out.zero_point + 30);
          }
          check_all_isas(o, out, RunOptions{3});
        }
}

TEST(QGemm, DequantizedFloatOutputsMatchWithBiasesAndActivations) {
  std::mt19937 rng(7);
  for (bool scale_per_column : {false, true})
    for (int bias : {0, 1, 2})  // none, per tensor, per column
      for (Epilogue::Act act : {Epilogue::Act::kNone, Epilogue::Act::kRelu, Epilogue::Act::kClip,
                                Epilogue::Act::kSigmoid}) {
        const Operands o = random_operands(19, 40, 100, rng() % 2, rng() % 2, false, rng() % 2, rng);
        Output out;
        out.kind = Kind::kFloat32;
        out.scale = scales(o.n, scale_per_column, rng);
        if (bias > 0) {
          out.float_bias.resize(bias == 2 ? static_cast<size_t>(o.n) : 1);
          for (float& v : out.float_bias) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 0.01f;
        }
        out.bias = {static_cast<int32_t>(rng() % 2001) - 1000};
        out.act.act = act;
        out.act.alpha = -3.0f;
        out.act.beta = 5.0f;
        check_all_isas(o, out, RunOptions{3});
      }
}

TEST(QGemm, TransposedAndPaddedStoresOfEveryKind) {
  std::mt19937 rng(8);
  for (Kind kind : {Kind::kInt32, Kind::kInt8, Kind::kUInt8, Kind::kFloat32})
    for (bool transposed : {false, true})
      for (int64_t m : {1, 13, 40}) {
        const Operands o = random_operands(m, 35, 27, rng() % 2, rng() % 2, false, false, rng);
        Output out;
        out.kind = kind;
        out.transposed = transposed;
        out.pad = 3;
        out.scale = scales(o.n, true, rng);
        out.bias = {17};
        out.lo = kind == Kind::kInt8 ? -128 : 0;
        out.hi = kind == Kind::kInt8 ? 127 : 255;
        out.zero_point = kind == Kind::kInt8 ? -5 : 100;
        check_all_isas(o, out, RunOptions{3});
        check_all_isas(o, out, RunOptions{1});
      }
}

TEST(QGemm, RowsFunctionGathersAAsAnIm2colWould) {
  std::mt19937 rng(9);
  for (int64_t m : {1, 5, 100, 300})
    for (bool a_signed : {false, true})
      for (int threads : {1, 3}) {
        const Operands o = random_operands(m, 21, 36, a_signed, true, m == 5, false, rng);
        Output out;
        out.kind = Kind::kUInt8;
        out.scale = {0.02f};
        out.lo = 0;
        out.hi = 255;
        out.zero_point = 128;
        check_all_isas(o, out, RunOptions{threads, true});
      }
}

// More rows than one task converts at once (A goes in blocks of rows through the caches), and
// rows of A further apart than k.
TEST(QGemm, ManyRowBlocksAndPaddedRowsOfA) {
  std::mt19937 rng(11);
  for (bool a_signed : {false, true})
    for (int64_t k : {1000, 1001}) {
      const Operands o = random_operands(700, 40, k, a_signed, true, false, false, rng);
      for (int threads : {0, 3}) check_all_isas(o, Output{}, RunOptions{threads, false, false, 9});
    }
}

TEST(QGemm, WeightsGivenAsNByKAndPackedIntoCallerMemory) {
  std::mt19937 rng(10);
  for (int64_t k : {1, 7, 64, 130}) {
    const Operands o = random_operands(9, 50, k, false, true, false, true, rng, /*b_transposed=*/true);
    check_all_isas(o, Output{}, RunOptions{3, false, true});
  }
}

}  // namespace
