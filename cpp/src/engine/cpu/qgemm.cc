// Integer GEMM: packing, the epilogue and the driver (see qgemm.h).
#include "engine/cpu/qgemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

namespace tether::engine::cpu {

struct QGemmIsa {
  const char* isa;
  int mr;
  int nr;
};

namespace {

constexpr QGemmIsa kGeneric{"generic", 1, 1};

std::shared_ptr<std::byte> aligned_bytes(int64_t bytes) {
  void* p = std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
}

int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

const QGemmIsa& qgemm_isa() { return kGeneric; }

std::vector<const QGemmIsa*> qgemm_isas() { return {&kGeneric}; }

std::string qgemm_isa_name(const QGemmIsa& isa) {
  return "qs8_gemm_" + std::to_string(isa.mr) + "x" + std::to_string(isa.nr) + "__" + isa.isa;
}

int64_t QPackedB::bytes_needed(int64_t k, int64_t n, const QGemmIsa&) {
  return round64(k * n) + 2 * round64(n * static_cast<int64_t>(sizeof(int32_t)));
}

QPackedB QPackedB::pack(const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                        const int32_t* zero_points, bool per_column, const QGemmIsa& isa) {
  std::shared_ptr<std::byte> storage = aligned_bytes(bytes_needed(k, n, isa));
  QPackedB b = pack_into(storage.get(), src, is_signed, k, n, row_stride, col_stride, zero_points, per_column, isa);
  b.storage_ = std::move(storage);
  return b;
}

QPackedB QPackedB::pack_into(void* storage, const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride,
                             int64_t col_stride, const int32_t* zero_points, bool per_column, const QGemmIsa& isa) {
  QPackedB b;
  b.k_ = k;
  b.n_ = n;
  b.isa_ = &isa;
  auto* bytes = static_cast<std::byte*>(storage);
  b.data_ = bytes;
  b.zero_points_ = reinterpret_cast<int32_t*>(bytes + round64(k * n));
  b.column_sums_ = b.zero_points_ + round64(n * static_cast<int64_t>(sizeof(int32_t))) / 4;
  auto* dst = static_cast<int8_t*>(b.data_);
  const int shift = is_signed ? 0 : -128;
  for (int64_t j = 0; j < n; ++j) {
    int32_t sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      const int64_t at = p * row_stride + j * col_stride;
      const int32_t v = is_signed ? static_cast<const int8_t*>(src)[at] : static_cast<const uint8_t*>(src)[at] + shift;
      dst[p * n + j] = static_cast<int8_t>(v);
      sum += v;
    }
    b.column_sums_[j] = sum;
    b.zero_points_[j] = zero_points[per_column ? j : 0] + shift;
  }
  return b;
}

int64_t qgemm_scratch_bytes(int64_t, int64_t, int64_t k, int threads) { return threads * round64(k); }

void qgemm(const RunContext& ctx, int64_t m, const QGemmA& a, const QPackedB& b, const QGemmOutput& out,
           std::byte* scratch) {
  const int64_t k = b.k(), n = b.n();
  const auto* w = static_cast<const int8_t*>(b.data());
  auto rows = [&](int thread, int64_t i0, int64_t i1) {
    auto* row = reinterpret_cast<uint8_t*>(scratch + thread * round64(k));
    for (int64_t i = i0; i < i1; ++i) {
      const void* src = nullptr;
      if (a.rows) {
        a.rows(RunContext{}, i, 1, row);
        src = row;
      } else {
        src = static_cast<const std::byte*>(a.data) + i * a.lda;
      }
      const int32_t za = a.zero_points[a.per_row ? i : 0] + (a.is_signed ? 128 : 0);
      std::vector<uint8_t> u(static_cast<size_t>(k));
      int32_t row_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        u[p] = a.is_signed ? static_cast<uint8_t>(static_cast<const int8_t*>(src)[p] + 128)
                           : static_cast<const uint8_t*>(src)[p];
        row_sum += u[p];
      }
      for (int64_t j = 0; j < n; ++j) {
        int32_t s = 0;
        for (int64_t p = 0; p < k; ++p) s += static_cast<int32_t>(u[p]) * w[p * n + j];
        const int32_t zb = b.zero_points()[j];
        s = s - za * b.column_sums()[j] - zb * row_sum + static_cast<int32_t>(k) * za * zb;
        const int64_t at = i * out.row_stride + j * out.col_stride;
        if (out.bias != nullptr) s += out.bias[out.bias_per_column ? j : 0];
        switch (out.kind) {
          case QGemmOutput::Kind::kInt32: static_cast<int32_t*>(out.c)[at] = s; break;
          case QGemmOutput::Kind::kFloat32: {
            float v = static_cast<float>(s) * out.scale[out.scale_per_column ? j : 0];
            if (out.float_bias != nullptr) v += out.float_bias[out.float_bias_per_column ? j : 0];
            out.act.apply(&v, 1);
            static_cast<float*>(out.c)[at] = v;
            break;
          }
          default: {
            float v = static_cast<float>(s) * out.scale[out.scale_per_column ? j : 0];
            v = std::max(v, static_cast<float>(out.lo - out.zero_point));
            v = std::min(v, static_cast<float>(out.hi - out.zero_point));
            const int32_t q = static_cast<int32_t>(std::nearbyint(v)) + out.zero_point;
            if (out.kind == QGemmOutput::Kind::kInt8) static_cast<int8_t*>(out.c)[at] = static_cast<int8_t>(q);
            else static_cast<uint8_t*>(out.c)[at] = static_cast<uint8_t>(q);
          }
        }
      }
    }
  };
  if (ctx.pool == nullptr) rows(0, 0, m);
  else ctx.pool->parallel_for_indexed(m, 1, rows);
}

}  // namespace tether::engine::cpu
