// TensorStats: exact extremes and mergeable magnitude histograms of one tensor.
//
// Why the histogram is exact under merging: a value v lands in bin floor(|v| * bins / 2^e).
// Scaling by a power of two is exact in floating point, so that floor is exact too, and for
// e' = e + k the bin at e' is floor(bin at e / 2^k): aligned groups of 2^k bins at e add up
// to the bins at e'. Growing the exponent therefore gives the counts that binning every value
// at the final exponent would have given, in any order and any grouping of the values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "tether/quant.h"
#include "util/multiversion.h"

namespace tether::quant {

namespace {

// Values are scanned in chunks that stay in L1 between the extremes pass and the binning pass.
constexpr int64_t kChunk = 4096;

bool finite_bits(float v) { return (std::bit_cast<uint32_t>(v) & 0x7f800000u) != 0x7f800000u; }

// Extremes are found on integer keys that order like the floats (magnitude bits, negated for
// negative values; -0 and +0 both 0), so the loops vectorise without fast-math and the result
// never depends on the order of the values, not even for the sign of a zero.
float float_of_key(int32_t key) {
  return key < 0 ? -std::bit_cast<float>(static_cast<uint32_t>(-key)) : std::bit_cast<float>(static_cast<uint32_t>(key));
}

struct Scan {
  int32_t min_key = std::numeric_limits<int32_t>::max();
  int32_t max_key = std::numeric_limits<int32_t>::min();
  int64_t nonfinite = 0;
  int64_t zeros = 0;
};

// The loops below are written without branches or selects on the running extremes (masks
// instead), which is the form GCC vectorises.
TETHER_MULTIVERSION
void scan_chunk(const float* x, int64_t n, Scan& s) {
  int32_t lo = s.min_key, hi = s.max_key, bad = 0, zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto bits = std::bit_cast<uint32_t>(x[i]);
    const auto mag = static_cast<int32_t>(bits & 0x7fffffffu);
    const int32_t sign = static_cast<int32_t>(bits) >> 31;  // 0 or -1
    const int32_t key = (mag ^ sign) - sign;
    const int32_t nonfinite = (0x7f7fffff - mag) >> 31;      // -1 for infinity and NaN
    bad -= nonfinite;
    zeros += mag == 0;
    lo = std::min(lo, (key & ~nonfinite) | (std::numeric_limits<int32_t>::max() & nonfinite));
    hi = std::max(hi, (key & ~nonfinite) | (std::numeric_limits<int32_t>::min() & nonfinite));
  }
  s.min_key = lo;
  s.max_key = hi;
  s.nonfinite += bad;
  s.zeros += zeros;
}

// Bin indices of a chunk: |x| * scale (a power of two, so exact) truncated, with the sign as
// the next bit; zeros and non-finite values get 2 * bins + i % 4, slots that are thrown away
// (four of them, so that a run of zeros is not one chain of increments of one counter).
TETHER_MULTIVERSION
void bin_indices(const float* x, int64_t n, float scale, int log2_bins, uint32_t* out) {
  const uint32_t skip = 2u << log2_bins;
  const auto last = static_cast<float>((1u << log2_bins) - 1);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const auto bits = std::bit_cast<uint32_t>(v);
    const float a = std::fabs(v) * scale;
    const auto b = static_cast<uint32_t>(static_cast<int32_t>(a < last ? a : last));  // NaN: last, then skipped
    const uint32_t idx = b | ((bits >> 31) << log2_bins);
    out[i] = (v == 0.0f || !finite_bits(v)) ? skip | static_cast<uint32_t>(i & 3) : idx;
  }
}

// The same in double, for exponents so small that bins / 2^exponent overflows float.
void bin_indices_wide(const float* x, int64_t n, double scale, int log2_bins, uint32_t* out) {
  const uint32_t last = (1u << log2_bins) - 1, skip = 2u << log2_bins;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v == 0.0f || !finite_bits(v)) {
      out[i] = skip | static_cast<uint32_t>(i & 3);
      continue;
    }
    const auto b = static_cast<uint32_t>(std::min(std::fabs(static_cast<double>(v)) * scale, static_cast<double>(last)));
    out[i] = b | (v < 0.0f ? 1u << log2_bins : 0u);
  }
}

// Counts the indices into the positive and negative histograms without branches.
void add_indices(const uint32_t* idx, int64_t n, int log2_bins, uint64_t* positive, uint64_t* negative) {
  uint64_t discard[4] = {};  // slots 2 * bins + k: row 2, column k
  uint64_t* const base[3] = {positive, negative, discard};
  const uint32_t mask = (1u << log2_bins) - 1;
  for (int64_t i = 0; i < n; ++i) ++base[idx[i] >> log2_bins][idx[i] & mask];
}

int log2_of(int bins) { return std::countr_zero(static_cast<unsigned>(bins)); }

// The exponents of finite non-zero floats: 2^-148 is above the smallest subnormal, 2^128 above
// the largest float.
constexpr int kMinExponent = -148, kMaxExponent = 128;

// TensorStats is a plain struct whose fields callers (and Python) may write: the loops below
// index the histograms by `bins` and shift by `exponent`, so both are checked first.
void check_layout(const TensorStats& s, const char* what) {
  if (s.bins < 16 || s.bins > 65536 || !std::has_single_bit(static_cast<unsigned>(s.bins)))
    throw ArgumentError(std::string(what) + " have " + std::to_string(s.bins) + " bins; a power of two from 16 to 65536 is needed");
  const auto bins = static_cast<size_t>(s.bins);
  if (s.positive.size() != s.negative.size() || (!s.positive.empty() && s.positive.size() != bins))
    throw ArgumentError(std::string(what) + " have " + std::to_string(s.positive.size()) + " positive and " +
                        std::to_string(s.negative.size()) + " negative bins; " + std::to_string(bins) + " each (or none) are needed");
  if (s.exponent != TensorStats::kNoExponent && (s.exponent < kMinExponent || s.exponent > kMaxExponent))
    throw ArgumentError(std::string(what) + " have exponent " + std::to_string(s.exponent) + "; float32 magnitudes need " +
                        std::to_string(kMinExponent) + " to " + std::to_string(kMaxExponent));
}

// The smallest e with a < 2^e, for finite a > 0.
int exponent_above(float a) {
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  return e;
}

// Bins at exponent `from` regrouped for exponent `to` > from.
void regroup(std::vector<uint64_t>& h, int from, int to) {
  const int k = to - from;
  const auto n = static_cast<int64_t>(h.size());
  if (k >= 63 || (int64_t{1} << k) >= n) {
    uint64_t total = 0;
    for (uint64_t c : h) total += c;
    std::fill(h.begin(), h.end(), 0);
    h[0] = total;
    return;
  }
  const int64_t group = int64_t{1} << k;
  for (int64_t j = 0; j < n / group; ++j) {
    uint64_t sum = 0;
    for (int64_t i = j * group; i < (j + 1) * group; ++i) sum += h[static_cast<size_t>(i)];
    h[static_cast<size_t>(j)] = sum;
  }
  std::fill(h.begin() + n / group, h.end(), 0);
}

TETHER_MULTIVERSION
void channel_extremes(const float* x, const std::vector<int64_t>& dims, int axis, std::vector<float>& absmax) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t channels = dims[static_cast<size_t>(axis)];
  if (inner == 1) {
    // Channels last (BERT's [batch, seq, hidden]): the loop below would run once per value, so
    // fold each row into the maxima instead, vectorised across channels.
    std::vector<int32_t> m(static_cast<size_t>(channels));
    int32_t* const mp = m.data();
    for (int64_t c = 0; c < channels; ++c) mp[c] = static_cast<int32_t>(std::bit_cast<uint32_t>(absmax[static_cast<size_t>(c)]));
    for (int64_t o = 0; o < outer; ++o) {
      const float* p = x + o * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const auto mag = static_cast<int32_t>(std::bit_cast<uint32_t>(p[c]) & 0x7fffffffu);
        mp[c] = std::max(mp[c], mag & ~((0x7f7fffff - mag) >> 31));
      }
    }
    for (int64_t c = 0; c < channels; ++c) absmax[static_cast<size_t>(c)] = std::bit_cast<float>(static_cast<uint32_t>(mp[c]));
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      auto m = static_cast<int32_t>(std::bit_cast<uint32_t>(absmax[static_cast<size_t>(c)]));
      for (int64_t i = 0; i < inner; ++i) {
        const auto mag = static_cast<int32_t>(std::bit_cast<uint32_t>(p[i]) & 0x7fffffffu);
        m = std::max(m, mag & ~((0x7f7fffff - mag) >> 31));  // magnitudes order like their bits; non-finite: 0
      }
      absmax[static_cast<size_t>(c)] = std::bit_cast<float>(static_cast<uint32_t>(m));
    }
}

}  // namespace

TensorStats::TensorStats(int bins_, int channel_axis_) : bins(bins_), channel_axis(channel_axis_) {
  if (bins < 16 || bins > 65536 || !std::has_single_bit(static_cast<unsigned>(bins)))
    throw ArgumentError("histogram bins must be a power of two from 16 to 65536, got " + std::to_string(bins));
}

void TensorStats::clear() {
  count = zeros = nonfinite = 0;
  min = std::numeric_limits<float>::infinity();
  max = -std::numeric_limits<float>::infinity();
  exponent = kNoExponent;
  std::fill(positive.begin(), positive.end(), 0);
  std::fill(negative.begin(), negative.end(), 0);
  std::fill(channel_absmax.begin(), channel_absmax.end(), 0.0f);
}

double TensorStats::bin_width() const {
  return exponent == kNoExponent ? 0.0 : std::ldexp(1.0, exponent - log2_of(bins));
}

float TensorStats::absmax() const { return count == 0 ? 0.0f : std::max(std::fabs(min), std::fabs(max)); }

void TensorStats::observe(const float* data, const std::vector<int64_t>& dims) {
  check_layout(*this, "statistics");
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  observe_channels(data, dims);
  observe_values(data, n);
}

void TensorStats::observe_channels(const float* data, const std::vector<int64_t>& dims) {
  if (channel_axis >= 0 && static_cast<size_t>(channel_axis) < dims.size()) {
    const auto channels = static_cast<size_t>(dims[static_cast<size_t>(channel_axis)]);
    if (channel_absmax.empty()) channel_absmax.assign(channels, 0.0f);
    if (channel_absmax.size() != channels)
      throw ArgumentError("tensor has " + std::to_string(channels) + " channels along axis " + std::to_string(channel_axis) +
                          ", earlier observations had " + std::to_string(channel_absmax.size()));
    channel_extremes(data, dims, channel_axis, channel_absmax);
  }
}

void TensorStats::observe_values(const float* data, int64_t n) {
  check_layout(*this, "statistics");
  if (positive.empty()) {
    positive.assign(static_cast<size_t>(bins), 0);
    negative.assign(static_cast<size_t>(bins), 0);
  }
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    const float* x = data + begin;
    Scan s;
    scan_chunk(x, len, s);
    nonfinite += s.nonfinite;
    zeros += s.zeros;
    count += len - s.nonfinite;
    if (s.min_key > s.max_key) continue;  // nothing finite
    const float lo = float_of_key(s.min_key), hi = float_of_key(s.max_key);
    min = std::min(min, lo);
    max = std::max(max, hi);
    const float a = std::max(std::fabs(lo), std::fabs(hi));
    if (a > 0.0f) {
      const int e = exponent_above(a);
      if (exponent == kNoExponent) {
        exponent = e;
      } else if (e > exponent) {
        regroup(positive, exponent, e);
        regroup(negative, exponent, e);
        exponent = e;
      }
    }
    positive[0] += static_cast<uint64_t>(s.zeros);
    if (exponent == kNoExponent) continue;  // only zeros so far
    const int shift = log2_of(bins) - exponent;
    uint32_t idx[kChunk];
    if (shift < 127)
      bin_indices(x, len, std::ldexp(1.0f, shift), log2_of(bins), idx);
    else
      bin_indices_wide(x, len, std::ldexp(1.0, shift), log2_of(bins), idx);
    add_indices(idx, len, log2_of(bins), positive.data(), negative.data());
  }
}

void TensorStats::merge(const TensorStats& other) {
  // Everything is checked before anything changes.
  if (other.bins != bins)
    throw ArgumentError("cannot merge statistics of " + std::to_string(other.bins) + " bins into " + std::to_string(bins) + " bins");
  check_layout(*this, "statistics merged into");
  check_layout(other, "statistics to merge");
  if (!other.channel_absmax.empty() && !channel_absmax.empty() &&
      (other.channel_axis != channel_axis || other.channel_absmax.size() != channel_absmax.size()))
    throw ArgumentError("cannot merge statistics of " + std::to_string(other.channel_absmax.size()) + " channels on axis " +
                        std::to_string(other.channel_axis) + " into " + std::to_string(channel_absmax.size()) +
                        " channels on axis " + std::to_string(channel_axis));
  if (!other.channel_absmax.empty()) {
    if (channel_absmax.empty()) {
      channel_absmax.assign(other.channel_absmax.size(), 0.0f);
      channel_axis = other.channel_axis;
    }
    for (size_t c = 0; c < channel_absmax.size(); ++c) channel_absmax[c] = std::max(channel_absmax[c], other.channel_absmax[c]);
  }
  count += other.count;
  zeros += other.zeros;
  nonfinite += other.nonfinite;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  if (other.positive.empty()) return;
  if (positive.empty()) {
    positive.assign(static_cast<size_t>(bins), 0);
    negative.assign(static_cast<size_t>(bins), 0);
  }
  std::vector<uint64_t> pos = other.positive, neg = other.negative;
  if (other.exponent != kNoExponent) {
    if (exponent == kNoExponent) {
      exponent = other.exponent;
    } else if (other.exponent > exponent) {
      regroup(positive, exponent, other.exponent);
      regroup(negative, exponent, other.exponent);
      exponent = other.exponent;
    } else if (other.exponent < exponent) {
      regroup(pos, other.exponent, exponent);
      regroup(neg, other.exponent, exponent);
    }
  }
  for (size_t i = 0; i < positive.size(); ++i) {
    positive[i] += pos[i];
    negative[i] += neg[i];
  }
}

}  // namespace tether::quant
