// Shape and data movement: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Transpose, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad,
// ConstantOfShape, Range. Kernels work on any fixed-size element type.
#include <algorithm>
#include <cmath>
#include <optional>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes do not change.
std::unique_ptr<Kernel> copy_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    TETHER_CHECK(in[0].numel() == out[0].numel(), "reshape: element counts differ");
    if (in[0].data != out[0].data)
      std::memcpy(out[0].data, in[0].data, static_cast<size_t>(in[0].numel()) * elem_bytes(in[0].dtype));
  });
}

std::unique_ptr<Kernel> shape_kernel(const KernelInit& init) {
  const int64_t start = init.node.attr_int("start", 0);
  const bool has_end = init.node.attr("end") != nullptr;
  const int64_t end = init.node.attr_int("end", 0);
  return make_kernel([=](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const auto r = static_cast<int64_t>(in[0].rank());
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t b = clamp(start), e = has_end ? clamp(end) : r;
    for (int64_t i = b; i < e; ++i) out[0].as<int64_t>()[i - b] = in[0].dims[static_cast<size_t>(i)];
  });
}

std::unique_ptr<Kernel> size_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    out[0].as<int64_t>()[0] = in[0].numel();
  });
}

#if defined(__SSE2__)
// 16 x 16 bytes: src rows (16 bytes each, src_ld apart) to dst rows, dst row j = src column j.
// Four rounds of interleaves (bytes, pairs, quads, octets); SSE2, so every x86-64 runs it.
inline void transpose16x16_bytes(const uint8_t* src, int64_t src_ld, uint8_t* dst, int64_t dst_ld) {
  __m128i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld));
  // t[i]: rows 2i, 2i + 1 as byte pairs, columns 0-7; t[i + 8] columns 8-15.
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
    t[i + 8] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  }
  // r[4q + i]: rows 4i to 4i + 3 as quads, columns 4q to 4q + 3.
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm_unpacklo_epi16(t[2 * i], t[2 * i + 1]);
    r[i + 4] = _mm_unpackhi_epi16(t[2 * i], t[2 * i + 1]);
    r[i + 8] = _mm_unpacklo_epi16(t[2 * i + 8], t[2 * i + 9]);
    r[i + 12] = _mm_unpackhi_epi16(t[2 * i + 8], t[2 * i + 9]);
  }
  // t[4q + 2i]: rows 8i to 8i + 7, columns 4q and 4q + 1; t[4q + 2i + 1] columns 4q + 2, 4q + 3.
  for (int q = 0; q < 4; ++q)
    for (int i = 0; i < 2; ++i) {
      t[4 * q + 2 * i] = _mm_unpacklo_epi32(r[4 * q + 2 * i], r[4 * q + 2 * i + 1]);
      t[4 * q + 2 * i + 1] = _mm_unpackhi_epi32(r[4 * q + 2 * i], r[4 * q + 2 * i + 1]);
    }
  for (int q = 0; q < 4; ++q) {
    uint8_t* d = dst + 4 * q * dst_ld;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(t[4 * q], t[4 * q + 2]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + dst_ld), _mm_unpackhi_epi64(t[4 * q], t[4 * q + 2]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * dst_ld), _mm_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * dst_ld), _mm_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]));
  }
}

// 4 x 4 elements of 4 bytes (SSE2).
inline void transpose4x4_words(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld) {
  const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + src_ld));
  const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * src_ld));
  const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * src_ld));
  const __m128i a = _mm_unpacklo_epi32(r0, r1), b = _mm_unpackhi_epi32(r0, r1);
  const __m128i c = _mm_unpacklo_epi32(r2, r3), d = _mm_unpackhi_epi32(r2, r3);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(a, c));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + dst_ld), _mm_unpackhi_epi64(a, c));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * dst_ld), _mm_unpacklo_epi64(b, d));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * dst_ld), _mm_unpackhi_epi64(b, d));
}
#endif

// transpose_2d on elements of type T, in 16 x 16 blocks: whole blocks of bytes and 4-byte
// elements through the SSE2 tiles above, the rest element by element. Local sizes and
// restrict pointers: a byte store may alias anything, so loops over captured values would
// reload them on every element.
template <typename T>
void transpose_block(const T* __restrict src, int64_t src_ld, T* __restrict dst, int64_t dst_ld, int64_t rows,
                     int64_t cols) {
  constexpr int64_t kB = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kB) {
    const int64_t r1 = std::min(rows, r0 + kB);
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t c1 = std::min(cols, c0 + kB);
#if defined(__SSE2__)
      if (r1 - r0 == kB && c1 - c0 == kB) {
        if constexpr (sizeof(T) == 1) {
          transpose16x16_bytes(reinterpret_cast<const uint8_t*>(src + r0 * src_ld + c0), src_ld,
                               reinterpret_cast<uint8_t*>(dst + c0 * dst_ld + r0), dst_ld);
          continue;
        } else if constexpr (sizeof(T) == 4) {
          for (int64_t r = r0; r < r1; r += 4)
            for (int64_t c = c0; c < c1; c += 4)
              transpose4x4_words(reinterpret_cast<const uint32_t*>(src + r * src_ld + c), src_ld,
                                 reinterpret_cast<uint32_t*>(dst + c * dst_ld + r), dst_ld);
          continue;
        }
      }
#endif
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * dst_ld + r] = src[r * src_ld + c];
    }
  }
}

// A permutation as [batch, rows, cols] -> [batch, cols, rows] of merged dims, when it is one
// (after merging dims that stay neighbours and dropping dims of size 1).
struct Batched2d {
  int64_t batch = 1, rows = 1, cols = 1;
};

std::optional<Batched2d> batched_2d(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  // Input dims in output order, as runs of consecutive input axes.
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first input axis, size)
  int64_t last = -2;
  for (int64_t a : perm) {
    const int64_t size = dims[static_cast<size_t>(a)];
    if (size == 1) continue;
    if (!runs.empty() && a == last + 1) runs.back().second *= size;
    else runs.emplace_back(a, size);
    last = a;
  }
  // Positions of the runs in input order.
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return runs[i].first < runs[j].first; });
  Batched2d b;
  if (runs.size() == 2 && order[0] == 1) {
    b.rows = runs[1].second;
    b.cols = runs[0].second;
    return b;
  }
  if (runs.size() == 3 && order[0] == 0 && order[1] == 2 && order[2] == 1) {
    b.batch = runs[0].second;
    b.rows = runs[2].second;
    b.cols = runs[1].second;
    return b;
  }
  return std::nullopt;
}

}  // namespace

void transpose_2d(const std::byte* src, int64_t src_ld, std::byte* dst, int64_t dst_ld, int64_t rows, int64_t cols,
                  size_t esize) {
  switch (esize) {
    case 1: transpose_block(reinterpret_cast<const uint8_t*>(src), src_ld, reinterpret_cast<uint8_t*>(dst), dst_ld, rows, cols); break;
    case 2: transpose_block(reinterpret_cast<const uint16_t*>(src), src_ld, reinterpret_cast<uint16_t*>(dst), dst_ld, rows, cols); break;
    case 4: transpose_block(reinterpret_cast<const uint32_t*>(src), src_ld, reinterpret_cast<uint32_t*>(dst), dst_ld, rows, cols); break;
    default: transpose_block(reinterpret_cast<const uint64_t*>(src), src_ld, reinterpret_cast<uint64_t*>(dst), dst_ld, rows, cols); break;
  }
}

namespace {

std::unique_ptr<Kernel> transpose_kernel(const KernelInit& init) {
  std::vector<int64_t> perm = init.node.attr_ints("perm");
  return make_kernel([perm](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    std::vector<int64_t> p = perm;
    if (p.empty())
      for (size_t i = x.rank(); i-- > 0;) p.push_back(static_cast<int64_t>(i));
    const size_t esize = elem_bytes(x.dtype);
    if (esize == 1 || esize == 2 || esize == 4 || esize == 8) {
      if (std::optional<Batched2d> b = batched_2d(x.dims, p)) {
        // Each batch a [rows, cols] -> [cols, rows] transpose, in tiles of 64 rows by 1024
        // columns (a few rows, as the 3 channels of an image, still make many tasks).
        constexpr int64_t kRows = 64, kCols = 1024;
        const int64_t rb = (b->rows + kRows - 1) / kRows, cb = (b->cols + kCols - 1) / kCols;
        const int64_t plane = b->rows * b->cols * static_cast<int64_t>(esize);
        const auto* src = x.as<std::byte>();
        auto* dst = out[0].as<std::byte>();
        const auto e = static_cast<int64_t>(esize);
        const int64_t tile_bytes = std::min(b->rows, kRows) * std::min(b->cols, kCols) * e;
        parallel(ctx, b->batch * rb * cb, grain_for_bytes(tile_bytes), [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t i = t / (rb * cb), r0 = t / cb % rb * kRows, c0 = t % cb * kCols;
            const int64_t r1 = std::min(b->rows, r0 + kRows), c1 = std::min(b->cols, c0 + kCols);
            transpose_2d(src + i * plane + (r0 * b->cols + c0) * e, b->cols, dst + i * plane + (c0 * b->rows + r0) * e,
                         b->rows, r1 - r0, c1 - c0, esize);
          }
        });
        return;
      }
    }
    const std::vector<int64_t> xs = strides_of(x.dims);
    std::vector<int64_t> src_strides(p.size());  // stride in x of each output dim
    for (size_t d = 0; d < p.size(); ++d) src_strides[d] = xs[static_cast<size_t>(p[d])];
    const size_t size = esize;
    const auto& od = out[0].dims;
    const int64_t inner = od.empty() ? 1 : od.back();
    const int64_t inner_stride = src_strides.empty() ? 1 : src_strides.back();
    const int64_t rows = inner == 0 ? 0 : out[0].numel() / inner;
    parallel(ctx, rows, grain_for_bytes(inner * static_cast<int64_t>(size)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r, src = 0;
        for (size_t d = od.empty() ? 0 : od.size() - 1; d-- > 0;) {
          src += (rem % od[d]) * src_strides[d];
          rem /= od[d];
        }
        if (inner_stride == 1) {  // the last axis stays last: one run per row
          std::memcpy(out[0].as<std::byte>() + r * inner * static_cast<int64_t>(size),
                      x.as<std::byte>() + src * static_cast<int64_t>(size), static_cast<size_t>(inner) * size);
          continue;
        }
        for (int64_t i = 0; i < inner; ++i)
          copy_elem(out[0].as<std::byte>(), r * inner + i, x.as<std::byte>(), src + i * inner_stride, size);
      }
    });
  });
}

std::unique_ptr<Kernel> concat_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", 0);
  return make_kernel([axis](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const View& y = out[0];
    const size_t a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(y.rank()) : axis);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < y.rank(); ++d) {
      if (d < a) outer *= y.dims[d];
      if (d > a) inner *= y.dims[d];
    }
    const int64_t size = static_cast<int64_t>(elem_bytes(y.dtype));
    const int64_t out_row = y.dims[a] * inner * size;
    int64_t at = 0;
    for (const View& x : in) {
      const int64_t row = x.dims[a] * inner * size;
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(y.as<std::byte>() + o * out_row + at, x.as<std::byte>() + o * row, static_cast<size_t>(row));
      at += row;
    }
  });
}

std::unique_ptr<Kernel> split_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", 0);
  return make_kernel([axis](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x.rank()) : axis);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (d < a) outer *= x.dims[d];
      if (d > a) inner *= x.dims[d];
    }
    const int64_t size = static_cast<int64_t>(elem_bytes(x.dtype));
    const int64_t in_row = x.dims[a] * inner * size;
    int64_t at = 0;
    for (View& y : out) {
      if (y.data == nullptr) continue;
      const int64_t row = y.dims[a] * inner * size;
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(y.as<std::byte>() + o * row, x.as<std::byte>() + o * in_row + at, static_cast<size_t>(row));
      at += row;
    }
  });
}

// Copies a box of `dims` elements (of esize bytes) from src to dst, element i at
// src + sum i_d * src_strides[d] and dst + sum i_d * dst_strides[d] (strides in elements).
// Trailing dims that are contiguous in both merge into runs copied whole; the rows of runs are
// shared between the threads.
void copy_box(const RunContext& ctx, std::byte* dst, const std::vector<int64_t>& dst_strides, const std::byte* src,
              const std::vector<int64_t>& src_strides, const std::vector<int64_t>& dims, size_t esize) {
  const size_t rank = dims.size();
  for (int64_t d : dims)
    if (d == 0) return;
  // The run: the last dim when both strides are 1, widened over the dims before it while
  // both sides stay contiguous.
  size_t k = rank;
  int64_t run = 1;
  if (rank > 0 && src_strides[rank - 1] == 1 && dst_strides[rank - 1] == 1) {
    run = dims[rank - 1];
    k = rank - 1;
    while (k > 0 && src_strides[k - 1] == run && dst_strides[k - 1] == run) run *= dims[--k];
  }
  // Without a contiguous run, the last dim is a strided loop.
  const bool strided = k == rank && rank > 0;
  const size_t outer_dims = strided ? rank - 1 : k;
  const int64_t inner = strided ? dims[rank - 1] : run;
  int64_t rows = 1;
  for (size_t d = 0; d < outer_dims; ++d) rows *= dims[d];
  const auto e = static_cast<int64_t>(esize);
  parallel(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner * e, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, so = 0, dof = 0;
      for (size_t d = outer_dims; d-- > 0;) {
        const int64_t i = rem % dims[d];
        rem /= dims[d];
        so += i * src_strides[d];
        dof += i * dst_strides[d];
      }
      if (!strided) {
        std::memcpy(dst + dof * e, src + so * e, static_cast<size_t>(inner * e));
      } else {
        const int64_t ss = src_strides[rank - 1], ds = dst_strides[rank - 1];
        for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + (dof + i * ds) * e, src + (so + i * ss) * e, esize);
      }
    }
  });
}

// Slice: starts/ends/axes/steps from inputs (opset >= 10) or attributes (older).
class SliceKernel final : public HostKernel {
 public:
  explicit SliceKernel(const KernelInit& init)
      : from_attrs_(init.node.attr("starts") != nullptr),
        starts_(init.node.attr_ints("starts")),
        ends_(init.node.attr_ints("ends")),
        axes_(init.node.attr_ints("axes")) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
    if (!from_attrs_) {
      starts = int_values(in[1]);
      ends = int_values(in[2]);
      axes = present(in, 3) ? int_values(in[3]) : std::vector<int64_t>{};
      if (present(in, 4)) steps = int_values(in[4]);
    }
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    std::vector<int64_t> start(x.rank(), 0), step(x.rank(), 1);
    for (size_t i = 0; i < starts.size(); ++i) {
      const auto a = static_cast<size_t>(axes[i] < 0 ? axes[i] + static_cast<int64_t>(x.rank()) : axes[i]);
      const int64_t len = x.dims[a];
      int64_t s = starts[i] < 0 ? starts[i] + len : starts[i];
      s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, len) : std::clamp<int64_t>(s, 0, len - 1);
      start[a] = s;
      // A step at least the axis long takes one element at most: any such step of its sign
      // selects the same, and this one keeps step * stride from overflowing.
      const int64_t most = std::max<int64_t>(len, 1);
      step[a] = std::clamp(steps[i], -most, most);
    }
    const std::vector<int64_t> xs = strides_of(x.dims);
    const auto& od = out[0].dims;
    const size_t size = elem_bytes(x.dtype);
    int64_t base = 0;
    std::vector<int64_t> src_strides(x.rank());
    for (size_t d = 0; d < x.rank(); ++d) {
      base += start[d] * xs[d];
      src_strides[d] = step[d] * xs[d];
    }
    copy_box(ctx, out[0].as<std::byte>(), strides_of(od), x.as<std::byte>() + base * static_cast<int64_t>(size),
             src_strides, od, size);
  }

 private:
  bool from_attrs_;
  std::vector<int64_t> starts_, ends_, axes_;
};

std::unique_ptr<Kernel> gather_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", 0);
  const std::string name = init.node.describe();
  return make_kernel([axis, name](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x.rank()) : axis);
    const std::vector<int64_t> idx = int_values(in[1]);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (d < a) outer *= x.dims[d];
      if (d > a) inner *= x.dims[d];
    }
    const int64_t len = x.dims[a];
    for (int64_t v : idx)
      if (v < -len || v >= len)
        throw ArgumentError(name + ": index " + std::to_string(v) + " is out of range for axis " + std::to_string(a) +
                            " of size " + std::to_string(len));
    const int64_t size = static_cast<int64_t>(elem_bytes(x.dtype)) * inner;
    const auto n = static_cast<int64_t>(idx.size());
    parallel(ctx, outer * n, 64, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / n, k = t % n;
        const int64_t i = idx[static_cast<size_t>(k)] < 0 ? idx[static_cast<size_t>(k)] + len : idx[static_cast<size_t>(k)];
        std::memcpy(out[0].as<std::byte>() + t * size, x.as<std::byte>() + (o * len + i) * size, static_cast<size_t>(size));
      }
    });
  });
}

std::unique_ptr<Kernel> gather_elements_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", 0);
  const std::string name = init.node.describe();
  return make_kernel([axis, name](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x.rank()) : axis);
    const std::vector<int64_t> idx = int_values(in[1]);
    const std::vector<int64_t> xs = strides_of(x.dims);
    const auto& id = in[1].dims;
    const size_t size = elem_bytes(x.dtype);
    TETHER_CHECK(id.size() == x.rank(), "GatherElements: indices and data differ in rank");
    for (size_t d = 0; d < id.size(); ++d)
      TETHER_CHECK(d == a || id[d] <= x.dims[d], "GatherElements: indices are longer than data off the axis");
    for (int64_t o = 0; o < static_cast<int64_t>(idx.size()); ++o) {
      int64_t rem = o, src = 0;
      for (size_t d = id.size(); d-- > 0;) {
        int64_t c = rem % id[d];
        rem /= id[d];
        if (d == a) {
          c = idx[static_cast<size_t>(o)];
          if (c < -x.dims[a] || c >= x.dims[a])
            throw ArgumentError(name + ": index " + std::to_string(c) + " is out of range for axis of size " +
                                std::to_string(x.dims[a]));
          if (c < 0) c += x.dims[a];
        }
        src += c * xs[d];
      }
      copy_elem(out[0].as<std::byte>(), o, x.as<std::byte>(), src, size);
    }
  });
}

// Expand and Tile: each output element reads one input element.
std::unique_ptr<Kernel> expand_kernel(const KernelInit&) {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    BroadcastRows rows(out[0].dims, {&in[0].dims});
    const size_t size = elem_bytes(in[0].dtype);
    const int64_t n = rows.row_length();
    parallel(ctx, rows.rows(), 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t base = rows.offset(0, r);
        for (int64_t i = 0; i < n; ++i)
          copy_elem(out[0].as<std::byte>(), r * n + i, in[0].as<std::byte>(), base + i * rows.inner_stride(0), size);
      }
    });
  });
}

std::unique_ptr<Kernel> tile_kernel(const KernelInit&) {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const std::vector<int64_t> xs = strides_of(x.dims);
    const auto& od = out[0].dims;
    const size_t size = elem_bytes(x.dtype);
    parallel(ctx, out[0].numel(), 1 << 12, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        int64_t rem = o, src = 0;
        for (size_t d = od.size(); d-- > 0;) {
          src += ((rem % od[d]) % x.dims[d]) * xs[d];
          rem /= od[d];
        }
        copy_elem(out[0].as<std::byte>(), o, x.as<std::byte>(), src, size);
      }
    });
  });
}

class PadKernel final : public HostKernel {
 public:
  explicit PadKernel(const KernelInit& init)
      : mode_(init.node.attr_string("mode", "constant")),
        attr_pads_(init.node.attr_ints("pads")),
        from_attrs_(init.node.attr("pads") != nullptr),
        attr_value_(init.node.attr_float("value", 0.0f)) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const size_t rank = x.rank();
    std::vector<int64_t> pads = from_attrs_ ? attr_pads_ : int_values(in[1]);
    std::vector<int64_t> axes;
    if (!from_attrs_ && present(in, 3)) axes = int_values(in[3]);
    std::vector<int64_t> begin(rank, 0);
    if (axes.empty()) {
      for (size_t d = 0; d < rank; ++d) begin[d] = pads[d];
    } else {
      for (size_t i = 0; i < axes.size(); ++i) begin[static_cast<size_t>(axes[i] < 0 ? axes[i] + static_cast<int64_t>(rank) : axes[i])] = pads[i];
    }
    const std::vector<int64_t> xs = strides_of(x.dims);
    const auto& od = out[0].dims;
    const size_t size = elem_bytes(x.dtype);
    // The fill value, as raw bytes of the element type.
    std::vector<std::byte> fill(size, std::byte{0});
    if (mode_ == "constant") {
      if (!from_attrs_ && present(in, 2)) std::memcpy(fill.data(), in[2].data, size);
      else if (x.dtype == DType::kFloat32) std::memcpy(fill.data(), &attr_value_, size);
    }
    if (mode_ == "constant" && constant_fast(ctx, x, out[0], begin, fill)) return;
    parallel(ctx, out[0].numel(), 1 << 12, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        int64_t rem = o, src = 0;
        bool outside = false;
        for (size_t d = rank; d-- > 0;) {
          int64_t c = rem % od[d] - begin[d];
          rem /= od[d];
          const int64_t len = x.dims[d];
          if (c < 0 || c >= len) {
            if (mode_ == "constant" || len == 0) {
              outside = true;
            } else if (mode_ == "edge") {
              c = std::clamp<int64_t>(c, 0, len - 1);
            } else if (mode_ == "wrap") {
              c = ((c % len) + len) % len;
            } else {  // reflect: mirror without repeating the edge
              const int64_t period = 2 * (len - 1);
              if (period == 0) c = 0;
              else {
                c = ((c % period) + period) % period;
                if (c >= len) c = period - c;
              }
            }
          }
          src += c * xs[d];
        }
        if (outside) std::memcpy(out[0].as<std::byte>() + o * static_cast<int64_t>(size), fill.data(), size);
        else copy_elem(out[0].as<std::byte>(), o, x.as<std::byte>(), src, size);
      }
    });
  }

 private:
  // Constant padding that only grows the input (no negative pads): the output filled with the
  // value, then the input copied into its box.
  static bool constant_fast(const RunContext& ctx, const View& x, View& y, const std::vector<int64_t>& begin,
                            const std::vector<std::byte>& fill) {
    for (size_t d = 0; d < x.rank(); ++d)
      if (begin[d] < 0 || begin[d] + x.dims[d] > y.dims[d]) return false;
    const size_t size = fill.size();
    auto* out = y.as<std::byte>();
    const int64_t n = y.numel();
    if (std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; })) {
      std::memset(out, 0, static_cast<size_t>(n) * size);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * static_cast<int64_t>(size), fill.data(), size);
    }
    const std::vector<int64_t> ys = strides_of(y.dims);
    int64_t base = 0;
    for (size_t d = 0; d < x.rank(); ++d) base += begin[d] * ys[d];
    copy_box(ctx, out + base * static_cast<int64_t>(size), ys, x.as<std::byte>(), strides_of(x.dims), x.dims, size);
    return true;
  }

  std::string mode_;
  std::vector<int64_t> attr_pads_;
  bool from_attrs_;
  float attr_value_;
};

std::unique_ptr<Kernel> constant_of_shape_kernel(const KernelInit& init) {
  ir::Tensor value = ir::Tensor::zeros(DType::kFloat32, {1});
  if (const ir::Attribute* a = init.node.attr("value")) value = a->as_tensor();
  return make_kernel([value](const RunContext&, const std::vector<View>&, std::vector<View>& out) {
    const size_t size = elem_bytes(value.dtype());
    for (int64_t i = 0; i < out[0].numel(); ++i)
      std::memcpy(out[0].as<std::byte>() + i * static_cast<int64_t>(size), value.raw_data(), size);
  });
}

std::unique_ptr<Kernel> range_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    dispatch_numeric(in[0].dtype, [&](auto zero) {
      using T = decltype(zero);
      const T start = in[0].as<T>()[0], delta = in[2].as<T>()[0];
      for (int64_t i = 0; i < out[0].numel(); ++i) out[0].as<T>()[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    });
  });
}

std::string range_check(const KernelInit& init) {
  return is_numeric(init.input_dtype(0)) ? "" : "input 0 is " + std::string(ir::dtype_name(init.input_dtype(0)));
}

std::string gather_check(const KernelInit& init) {
  if (std::string why = fixed_size(init); !why.empty()) return why;
  return require_dtype(init, 1, {DType::kInt32, DType::kInt64});
}

std::string pad_check(const KernelInit& init) {
  const std::string mode = init.node.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") return "unknown mode '" + mode + "'";
  return fixed_size(init);
}

}  // namespace

void register_shape(KernelRegistry& r) {
  TETHER_ADD(r, "Reshape", copy_kernel, fixed_size);
  TETHER_ADD(r, "Flatten", copy_kernel, fixed_size);
  TETHER_ADD(r, "Squeeze", copy_kernel, fixed_size);
  TETHER_ADD(r, "Unsqueeze", copy_kernel, fixed_size);
  TETHER_ADD(r, "Identity", copy_kernel, fixed_size);
  TETHER_ADD(r, "Shape", shape_kernel, nullptr);
  TETHER_ADD(r, "Size", size_kernel, nullptr);
  TETHER_ADD(r, "Transpose", transpose_kernel, fixed_size);
  TETHER_ADD(r, "Concat", concat_kernel, fixed_size);
  TETHER_ADD(r, "Split", split_kernel, fixed_size);
  TETHER_ADD(r, "Slice",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SliceKernel>(i); }, fixed_size);
  TETHER_ADD(r, "Gather", gather_kernel, gather_check);
  TETHER_ADD(r, "GatherElements", gather_elements_kernel, gather_check);
  TETHER_ADD(r, "Expand", expand_kernel, fixed_size);
  TETHER_ADD(r, "Tile", tile_kernel, fixed_size);
  TETHER_ADD(r, "Pad",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PadKernel>(i); }, pad_check);
  TETHER_ADD(r, "ConstantOfShape", constant_of_shape_kernel, nullptr);
  TETHER_ADD(r, "Range", range_kernel, range_check);
}

}  // namespace tether::engine::cpu
