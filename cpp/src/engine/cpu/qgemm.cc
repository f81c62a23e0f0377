// Integer GEMM: kernel selection, packing, the portable micro-kernel and the driver (see
// qgemm.h; the ISA kernels are in qgemm_<isa>.cc).
#include "engine/cpu/qgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/cpu/qgemm_kernels.h"
#include "util/cpu_features.h"
#include "util/multiversion.h"

namespace tether::engine::cpu {

#include "engine/cpu/qgemm_epilogue.inc"

namespace {

// qs8_gemm_4x16__generic: plain loops over unpacked depth (group 1), which compilers
// vectorise along the 16 columns: both operands widened to int16, so that the products are
// 16 x 16 -> 32 bit multiplies (pmullw / pmulhw on SSE2).
constexpr int kGenericMr = 4;
constexpr int kGenericNr = 16;

template <int kRows>
void generic_rows(int64_t k, const uint8_t* __restrict a, int64_t lda, const int8_t* __restrict b,
                  int32_t* __restrict acc) {
  int32_t c[kRows][kGenericNr] = {};
  for (int64_t p = 0; p < k; ++p) {
    int16_t bp[kGenericNr];
    for (int j = 0; j < kGenericNr; ++j) bp[j] = b[p * kGenericNr + j];
    for (int r = 0; r < kRows; ++r) {
      const int16_t av = a[r * lda + p];
      for (int j = 0; j < kGenericNr; ++j) c[r][j] += static_cast<int32_t>(av) * bp[j];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kGenericNr; ++j) acc[r * kGenericNr + j] = c[r][j];
}

void qs8_gemm_4x16__generic(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const int8_t*>(b);
  switch (rows) {
    case 1: return generic_rows<1>(groups, pa, lda, pb, acc);
    case 2: return generic_rows<2>(groups, pa, lda, pb, acc);
    case 3: return generic_rows<3>(groups, pa, lda, pb, acc);
    default: return generic_rows<4>(groups, pa, lda, pb, acc);
  }
}

void qs8_gemm_epilogue__generic(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                                const QGemmOutput& out, int64_t i0, int64_t j0) {
  tile_epilogue(acc, ld, rows, cols, terms, out, i0, j0);
}

#if defined(__x86_64__)
// AMX reads the same panels as the 12x32 AVX-512 kernel (4 depths by 32 columns per step),
// 16 steps (64 depths) per tile load.
constexpr QGemmIsa kAmx{"amx",  32, 32, 4, false, qs8_gemm_32x32__amx, qs8_gemm_epilogue__avx512, 16,
                        qs8_gemm_32x32__amx_prepare};
constexpr QGemmIsa kAvx512Vnni{"avx512vnni", 12, 32, 4, false, qs8_gemm_12x32__avx512vnni, qs8_gemm_epilogue__avx512};
constexpr QGemmIsa kAvxVnni{"avxvnni", 6, 16, 4, false, qs8_gemm_6x16__avxvnni, qs8_gemm_epilogue__avx2};
constexpr QGemmIsa kAvx256Vnni{"avx256vnni", 6, 16, 4, false, qs8_gemm_6x16__avx256vnni, qs8_gemm_epilogue__avx512};
constexpr QGemmIsa kAvx2{"avx2", 6, 16, 2, true, qs8_gemm_6x16__avx2, qs8_gemm_epilogue__avx2};
#elif defined(__aarch64__)
// The dot-product kernels read the VNNI kernels' panels (4 depths per column and step), 16
// columns wide; the float epilogue is the portable one, vectorised for NEON.
constexpr QGemmIsa kNeonI8mm{"neoni8mm", 4, 16, 4, false, qs8_gemm_4x16c4__neoni8mm, qs8_gemm_epilogue__generic};
constexpr QGemmIsa kNeonDot{"neondot", 4, 16, 4, false, qs8_gemm_4x16c4__neondot, qs8_gemm_epilogue__generic};
#endif
constexpr QGemmIsa kGeneric{"generic", kGenericMr, kGenericNr, 1, false, qs8_gemm_4x16__generic,
                            qs8_gemm_epilogue__generic};

// The driver's tile of raw sums holds MR x NR int32, and the epilogue takes rows of NR.
constexpr int kMaxTile = 32 * 32;
constexpr bool fits(const QGemmIsa& isa) { return isa.mr * isa.nr <= kMaxTile && isa.nr <= kEpilogueMaxCols; }
#if defined(__x86_64__)
static_assert(fits(kAmx) && fits(kAvx512Vnni) && fits(kAvxVnni) && fits(kAvx256Vnni) && fits(kAvx2) && fits(kGeneric));
#elif defined(__aarch64__)
static_assert(fits(kNeonI8mm) && fits(kNeonDot) && fits(kGeneric));
#endif

std::vector<const QGemmIsa*> runnable() {
  const util::CpuFeatures& f = util::cpu_features();
  std::vector<const QGemmIsa*> isas;
#if defined(__x86_64__)
  if (f.amx_int8) isas.push_back(&kAmx);
  if (f.avx512_vnni) isas.push_back(&kAvx512Vnni);
  if (f.avx_vnni) isas.push_back(&kAvxVnni);
  if (f.avx512_vnni) isas.push_back(&kAvx256Vnni);  // after AVX-VNNI: the same kernel, EVEX encoded
  if (f.avx2) isas.push_back(&kAvx2);
#elif defined(__aarch64__)
  if (f.neon_i8mm) isas.push_back(&kNeonI8mm);
  if (f.neon_dot) isas.push_back(&kNeonDot);
#endif
  isas.push_back(&kGeneric);
  return isas;
}

std::shared_ptr<std::byte> aligned_bytes(int64_t bytes) {
  void* p = std::aligned_alloc(64, static_cast<size_t>(std::max<int64_t>((bytes + 63) / 64 * 64, 64)));
  if (p == nullptr) throw std::bad_alloc();
  return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
}

int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }
int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Depth steps of `isa` for depth k, and bytes of one panel of packed B.
int64_t groups_of(const QGemmIsa& isa, int64_t k) {
  const int64_t steps = (k + isa.group - 1) / isa.group;
  return (steps + isa.step_multiple - 1) / isa.step_multiple * isa.step_multiple;
}
int64_t panel_bytes(const QGemmIsa& isa, int64_t k) { return groups_of(isa, k) * isa.group * isa.nr; }
// Bytes of one row of A as the kernel reads it.
int64_t a_row_bytes(const QGemmIsa& isa, int64_t k) { return groups_of(isa, k) * isa.group * (isa.a_wide ? 2 : 1); }

}  // namespace

const QGemmIsa& qgemm_isa() {
  static const QGemmIsa* isa = runnable().front();
  return *isa;
}

const QGemmIsa& qgemm_isa_for(int64_t k, bool a_in_place) {
  static const std::vector<const QGemmIsa*> isas = runnable();
  const QGemmIsa& first = *isas.front();
#if defined(__x86_64__)
  if (&first == &kAmx && k < 64 && a_in_place) {
    const QGemmIsa& next = *isas[1];
    if (k % next.group == 0) return next;
  }
#endif
  return first;
}

std::vector<const QGemmIsa*> qgemm_isas() { return runnable(); }

std::string qgemm_isa_name(const QGemmIsa& isa) {
  return "qs8_gemm_" + std::to_string(isa.mr) + "x" + std::to_string(isa.nr) + "__" + isa.isa;
}

// ---------------------------------------------------------------------------------------------
// Packing B

int64_t QPackedB::bytes_needed(int64_t k, int64_t n, const QGemmIsa& isa) {
  const int64_t panels = (n + isa.nr - 1) / isa.nr;
  return round64(panels * panel_bytes(isa, k)) + 2 * round64(n * static_cast<int64_t>(sizeof(int32_t)));
}

QPackedB QPackedB::pack(const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                        const int32_t* zero_points, bool per_column, const QGemmIsa& isa) {
  std::shared_ptr<std::byte> storage = aligned_bytes(bytes_needed(k, n, isa));
  QPackedB b = pack_into(storage.get(), src, is_signed, k, n, row_stride, col_stride, zero_points, per_column, isa);
  b.storage_ = std::move(storage);
  return b;
}

namespace {

// Panel after panel, depth step after step: column c of a panel at ((g * NR) + c) * group + e
// for depth g * group + e (the layout in qgemm_kernels.h). `dst` starts zeroed.
template <typename Src>
void pack_b_panels(const QGemmIsa& isa, const Src* src, int32_t shift, int64_t k, int64_t n, int64_t row_stride,
                   int64_t col_stride, int8_t* dst, int32_t* column_sums) {
  const int64_t nr = isa.nr, group = isa.group, groups = groups_of(isa, k);
  std::fill(column_sums, column_sums + n, 0);
  for (int64_t j0 = 0; j0 < n; j0 += nr) {
    int8_t* panel = dst + (j0 / nr) * groups * group * nr;
    const int64_t cols = std::min(nr, n - j0);
    for (int64_t p = 0; p < k; ++p) {
      const Src* row = src + p * row_stride + j0 * col_stride;
      int8_t* out = panel + (p / group) * group * nr + p % group;
      for (int64_t c = 0; c < cols; ++c) {
        const int32_t v = static_cast<int32_t>(row[c * col_stride]) + shift;
        out[c * group] = static_cast<int8_t>(v);
        column_sums[j0 + c] += v;
      }
    }
  }
}

}  // namespace

QPackedB QPackedB::pack_into(void* storage, const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride,
                             int64_t col_stride, const int32_t* zero_points, bool per_column, const QGemmIsa& isa) {
  QPackedB b;
  b.k_ = k;
  b.n_ = n;
  b.isa_ = &isa;
  auto* bytes = static_cast<std::byte*>(storage);
  const int64_t panels_bytes = round64((n + isa.nr - 1) / isa.nr * panel_bytes(isa, k));
  b.data_ = bytes;
  b.zero_points_ = reinterpret_cast<int32_t*>(bytes + panels_bytes);
  b.column_sums_ = b.zero_points_ + round64(n * static_cast<int64_t>(sizeof(int32_t))) / 4;
  std::memset(b.data_, 0, static_cast<size_t>(panels_bytes));
  // A uint8 B is stored as b - 128, so every ISA multiplies uint8 x int8 (see qgemm.h).
  const int32_t shift = is_signed ? 0 : -128;
  auto* dst = static_cast<int8_t*>(b.data_);
  if (is_signed) pack_b_panels(isa, static_cast<const int8_t*>(src), shift, k, n, row_stride, col_stride, dst, b.column_sums_);
  else pack_b_panels(isa, static_cast<const uint8_t*>(src), shift, k, n, row_stride, col_stride, dst, b.column_sums_);
  for (int64_t j = 0; j < n; ++j) {
    b.zero_points_[j] = zero_points[per_column ? j : 0] + shift;
    b.uniform_zero_point_ = b.uniform_zero_point_ && b.zero_points_[j] == b.zero_points_[0];
  }
  return b;
}

// ---------------------------------------------------------------------------------------------
// Packing A

namespace {

// The sum of n bytes, 16 at a time with psadbw where there is SSE2 (compilers widen the bytes
// one by one instead, which cost a tenth of a product with few columns).
uint32_t byte_sum(const uint8_t* p, int64_t n) {
  uint64_t sum = 0;
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  __m128i s0 = zero, s1 = zero;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm_add_epi64(s0, _mm_sad_epu8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), zero));
    s1 = _mm_add_epi64(s1, _mm_sad_epu8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16)), zero));
  }
  // The short rows of small products (16 or 24 channels) in one or two more steps.
  if (i + 16 <= n) {
    s0 = _mm_add_epi64(s0, _mm_sad_epu8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), zero));
    i += 16;
  }
  if (i + 8 <= n) {
    s1 = _mm_add_epi64(s1, _mm_sad_epu8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)), zero));
    i += 8;
  }
  s0 = _mm_add_epi64(s0, s1);
  sum = static_cast<uint64_t>(_mm_cvtsi128_si64(s0)) + static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(s0, s0)));
#endif
  for (; i < n; ++i) sum += p[i];
  return static_cast<uint32_t>(sum);
}

// Rows of A as the kernels read them (the layout in qgemm_kernels.h): row i of the source (at
// src + i * lda) with each byte xor `flip` (0x80 turns int8 into uint8 + 128), as uint8 or
// (`wide`) int16, zero-padded from k to kpad values, at dst + i * ldp bytes; and the rows'
// sums of those values.
TETHER_MULTIVERSION
void convert_rows(const uint8_t* __restrict src, int64_t lda, int64_t rows, int64_t k, int64_t kpad, uint8_t flip,
                  bool wide, uint8_t* __restrict dst, int64_t ldp, int32_t* __restrict sums) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* __restrict row = src + i * lda;
    if (wide) {
      auto* __restrict out = reinterpret_cast<uint16_t*>(dst + i * ldp);
      uint32_t sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const uint8_t v = row[p] ^ flip;
        out[p] = v;
        sum += v;
      }
      for (int64_t p = k; p < kpad; ++p) out[p] = 0;
      sums[i] = static_cast<int32_t>(sum);
    } else {
      uint8_t* __restrict out = dst + i * ldp;
      if (flip == 0) {  // uint8 rows: copies (loops of a few dozen bytes cost more than the calls)
        std::memcpy(out, row, static_cast<size_t>(k));
        std::memset(out + k, 0, static_cast<size_t>(kpad - k));
      } else {
        for (int64_t p = 0; p < k; ++p) out[p] = row[p] ^ flip;
        for (int64_t p = k; p < kpad; ++p) out[p] = 0;
      }
      sums[i] = static_cast<int32_t>(byte_sum(out, k));
    }
  }
}

// The sums of `rows` rows of uint8 A read in place.
void row_sums(const uint8_t* src, int64_t lda, int64_t rows, int64_t k, int32_t* sums) {
  for (int64_t i = 0; i < rows; ++i) sums[i] = static_cast<int32_t>(byte_sum(src + i * lda, k));
}

// ---------------------------------------------------------------------------------------------
// The driver

// Bytes of A one thread holds at once: its rows stay in L2 while B's panels pass.
constexpr int64_t kABlockBytes = 160 * 1024;
constexpr int64_t kMaxBlockRows = 192;

// Rows of A converted at a time: a whole number of tiles.
int64_t block_rows(const QGemmIsa& isa, int64_t m, int64_t k) {
  const int64_t per_row = std::max<int64_t>(1, a_row_bytes(isa, k));
  const int64_t rows = std::clamp<int64_t>(kABlockBytes / per_row, isa.mr, kMaxBlockRows) / isa.mr * isa.mr;
  return std::min(rows, round_up(m, isa.mr));
}

// One thread's scratch: A's rows as gathered by `rows` (mc x k bytes), A as the kernel reads
// it (mc rows), three arrays of mc row terms, two arrays of n column terms.
struct Scratch {
  int64_t raw = 0, converted = 0, row_terms = 0, col_terms = 0, total = 0;

  Scratch(const QGemmIsa& isa, int64_t m, int64_t n, int64_t k) {
    const int64_t mc = block_rows(isa, m, k);
    converted = raw + round64(mc * k);
    row_terms = converted + round64(mc * a_row_bytes(isa, k));
    col_terms = row_terms + 3 * round64(mc * 4);
    total = col_terms + 2 * round64(n * 4);
  }
};

// What one call shares between its tasks.
struct Call {
  const QGemmIsa& isa;
  int64_t m, n, k;
  const QGemmA& a;
  const QPackedB& b;
  const QGemmOutput& out;
  int32_t a_zero;  // A's zero point as stored, when not per row
  QTileTerms act;  // the activation fields, filled once
};

// One thread's share of qgemm's scratch: enough for any kernel, so that a B packed for any of
// them runs in the scratch qgemm_scratch_bytes asked for.
int64_t per_thread_bytes(int64_t m, int64_t n, int64_t k) {
  int64_t bytes = 0;
#if defined(__x86_64__)
  for (const QGemmIsa* isa : {&kAmx, &kAvx512Vnni, &kAvxVnni, &kAvx256Vnni, &kAvx2, &kGeneric})
#elif defined(__aarch64__)
  for (const QGemmIsa* isa : {&kNeonI8mm, &kNeonDot, &kGeneric})
#else
  for (const QGemmIsa* isa : {&kGeneric})
#endif
    bytes = std::max(bytes, Scratch(*isa, m, n, k).total);
  return bytes;
}

// [begin, end) of part `i` when `count` items are split into `parts` near-equal runs.
int64_t split_point(int64_t count, int64_t parts, int64_t i) { return count * i / parts; }

// Column terms for columns [j0, j0 + cols): col_add = bias (- za * ct when za is per tensor),
// and ct = column sum - k * zb (the factor of a per-row za), in uint32.
void column_terms(const Call& call, int64_t j0, int64_t cols, int32_t* col_add, int32_t* ct) {
  const QGemmOutput& out = call.out;
  const uint32_t k = static_cast<uint32_t>(call.k), za = static_cast<uint32_t>(call.a_zero);
  const int32_t* sums = call.b.column_sums() + j0;
  const int32_t* zb = call.b.zero_points() + j0;
  for (int64_t q = 0; q < cols; ++q) {
    const uint32_t t = static_cast<uint32_t>(sums[q]) - k * static_cast<uint32_t>(zb[q]);
    const uint32_t bias = out.bias == nullptr ? 0u : static_cast<uint32_t>(out.bias[out.bias_per_column ? j0 + q : 0]);
    ct[q] = static_cast<int32_t>(t);
    col_add[q] = static_cast<int32_t>(call.a.per_row ? bias : bias - za * t);
  }
}

// One task: rows [t0 * MR, t1 * MR) (clipped to m) and panels [p0, p1) of C. A is converted a
// block of rows at a time (or read in place when it is uint8 already and its depth a whole
// number of steps); for each block every panel of B runs past all its tiles.
void qgemm_block(const Call& call, int64_t t0, int64_t t1, int64_t p0, int64_t p1, std::byte* scratch) {
  const QGemmIsa& isa = call.isa;
  const int64_t mr = isa.mr, nr = isa.nr, m = call.m, n = call.n, k = call.k;
  const Scratch layout(isa, m, n, k);
  auto* raw = reinterpret_cast<uint8_t*>(scratch + layout.raw);
  auto* converted = reinterpret_cast<uint8_t*>(scratch + layout.converted);
  const int64_t mc = block_rows(isa, m, k), row_array = round64(mc * 4) / 4;
  auto* row_sum = reinterpret_cast<int32_t*>(scratch + layout.row_terms);
  int32_t* row_add = row_sum + row_array;
  int32_t* row_za = row_add + row_array;
  auto* col_add = reinterpret_cast<int32_t*>(scratch + layout.col_terms);
  int32_t* col_ct = col_add + round64(n * 4) / 4;

  const int64_t j0 = p0 * nr, j1 = std::min(n, p1 * nr);
  column_terms(call, j0, j1 - j0, col_add, col_ct);
  const bool zb_uniform = call.b.uniform_zero_point();
  const uint32_t zb = static_cast<uint32_t>(call.b.zero_points()[0]);
  const uint8_t flip = call.a.is_signed ? 0x80 : 0x00;
  const int32_t za_shift = call.a.is_signed ? 128 : 0;
  const bool in_place = !call.a.is_signed && !isa.a_wide && groups_of(isa, k) * isa.group == k;
  const int64_t panel_size = panel_bytes(isa, k), groups = groups_of(isa, k), row_bytes = a_row_bytes(isa, k);
  const auto* panels = static_cast<const std::byte*>(call.b.data());
  alignas(64) int32_t acc[kMaxTile];
  // Once per block and thread: nothing but this block's own code (its rows function and
  // epilogue) runs on the thread until the block ends.
  if (isa.prepare != nullptr) isa.prepare();

  for (int64_t i0 = t0 * mr, i_end = std::min(m, t1 * mr); i0 < i_end; i0 += mc) {
    const int64_t rows = std::min(mc, i_end - i0);
    const uint8_t* src = nullptr;
    int64_t lda = 0;
    if (call.a.rows) {
      call.a.rows(RunContext{}, i0, rows, raw);
      src = raw;
      lda = k;
    } else {
      src = static_cast<const uint8_t*>(call.a.data) + i0 * call.a.lda;
      lda = call.a.lda;
    }
    if (in_place) {
      row_sums(src, lda, rows, k, row_sum);
    } else {
      convert_rows(src, lda, rows, k, groups * isa.group, flip, isa.a_wide, converted, row_bytes, row_sum);
      src = converted;
      lda = row_bytes;
    }
    for (int64_t r = 0; r < rows; ++r) {
      row_add[r] = zb_uniform ? static_cast<int32_t>(0u - zb * static_cast<uint32_t>(row_sum[r])) : 0;
      if (call.a.per_row) row_za[r] = call.a.zero_points[i0 + r] + za_shift;
    }
    for (int64_t q = p0; q < p1; ++q) {
      const int64_t jq = q * nr, cols = std::min(nr, n - jq);
      const std::byte* panel = panels + q * panel_size;
      for (int64_t it = 0; it < rows; it += mr) {
        const int64_t tile_rows = std::min(mr, rows - it);
        isa.kernel(groups, src + it * lda, lda, panel, acc, tile_rows);
        QTileTerms terms = call.act;
        terms.col_add = col_add + (jq - j0);
        terms.row_add = row_add + it;
        if (!zb_uniform) {
          terms.row_mul[terms.products] = row_sum + it;
          terms.col_mul[terms.products++] = call.b.zero_points() + jq;
        }
        if (call.a.per_row) {
          terms.row_mul[terms.products] = row_za + it;
          terms.col_mul[terms.products++] = col_ct + (jq - j0);
        }
        isa.epilogue(acc, nr, tile_rows, cols, terms, call.out, i0 + it, jq);
      }
    }
  }
}

}  // namespace

int64_t qgemm_scratch_bytes(int64_t m, int64_t n, int64_t k, int threads) {
  return std::max(threads, 1) * per_thread_bytes(m, n, k);
}

void qgemm(const RunContext& ctx, int64_t m, const QGemmA& a, const QPackedB& b, const QGemmOutput& out,
           std::byte* scratch) {
  const int64_t n = b.n(), k = b.k();
  if (m == 0 || n == 0) return;
  TETHER_CHECK(b.isa() != nullptr, "qgemm: B is not packed");
  TETHER_CHECK(scratch != nullptr, "qgemm needs scratch");
  TETHER_CHECK(k == 0 || a.data != nullptr || a.rows, "qgemm: A has no data");
  TETHER_CHECK(a.zero_points != nullptr, "qgemm: A has no zero point");
  TETHER_CHECK(out.kind == QGemmOutput::Kind::kInt32 || out.scale != nullptr, "qgemm: the output needs a scale");
  if (out.kind == QGemmOutput::Kind::kInt8 || out.kind == QGemmOutput::Kind::kUInt8) {
    const int64_t lo = int64_t{out.lo} - out.zero_point, hi = int64_t{out.hi} - out.zero_point;
    TETHER_CHECK(lo > -(1 << 22) && hi < (1 << 22), "qgemm: the clamp range less the zero point is out of range");
  }
  const QGemmIsa& isa = *b.isa();
  Call call{isa, m, n, k, a, b, out, a.zero_points[0] + (a.is_signed ? 128 : 0), {}};
  call.act.act_fused = out.act.as_clamp(call.act.act_clamp, call.act.act_lo, call.act.act_hi);

  const int64_t mr = isa.mr, nr = isa.nr;
  const int64_t mtiles = (m + mr - 1) / mr, panels = (n + nr - 1) / nr;
  const int threads = ctx.pool != nullptr ? ctx.pool->threads() : 1;
  // A grid of about 2 x threads blocks of C, each computed by one task through all of K. With
  // gn column blocks A is packed gn times; with gm row blocks B is read gm times. Packing
  // costs more than reading packed B, so A weighs 4 to 1; take the grid that copies least.
  int64_t gn = 1, gm = 1;
  if (threads > 1) {
    const int64_t target = 2 * static_cast<int64_t>(threads);
    double best = -1.0;
    for (int64_t cn = std::min(panels, target); cn >= 1; --cn) {
      const int64_t cm = std::min(mtiles, (target + cn - 1) / cn);
      if (cm * cn < std::min<int64_t>(threads, mtiles * panels)) continue;
      const double cost = 4.0 * static_cast<double>(cn - 1) * static_cast<double>(m * k) +
                          static_cast<double>(cm - 1) * static_cast<double>(k * n);
      if (best < 0.0 || cost < best) {
        best = cost;
        gn = cn;
        gm = cm;
      }
    }
  }
  const int64_t per_thread = per_thread_bytes(m, n, k);
  auto task = [&](int thread, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t im = t / gn, jn = t % gn;
      qgemm_block(call, split_point(mtiles, gm, im), split_point(mtiles, gm, im + 1), split_point(panels, gn, jn),
                  split_point(panels, gn, jn + 1), scratch + thread * per_thread);
    }
  };
  if (gm * gn == 1 || ctx.pool == nullptr) {
    task(0, 0, gm * gn);
    return;
  }
  ctx.pool->parallel_for_indexed(gm * gn, 1, task);
}

}  // namespace tether::engine::cpu
