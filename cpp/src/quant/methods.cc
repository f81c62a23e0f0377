// Range methods on the histograms of TensorStats: minmax, percentile, entropy (TensorRT's KL
// calibration), mse, and the sqnr chooser; the SQNR estimate and the clipped share.
//
// The definitions are in tether/quant.h (MethodOptions). Two choices here are for speed at
// any bin count while keeping results deterministic:
// - The entropy KL of a candidate is summed per quantized level from prefix sums (counts,
//   non-empty bins, c*ln(c)), O(levels) per candidate instead of O(bins).
// - The squared error of a quantization is summed per run of bins that quantize to one level,
//   from exact 128-bit prefix moments of the counts (sum c, c*i, c*i^2), O(levels) per range.
//   Moments are taken about the run's first bin, so the double terms barely cancel.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "quant/rounding.h"
#include "tether/quant.h"

namespace tether::quant {

namespace {

using U128 = unsigned __int128;

// Histograms longer than this are searched at every s-th candidate (s = ceil(n / kCandidates)).
constexpr int64_t kCandidates = 2048;

const std::vector<std::string> kMethods = {"minmax", "percentile", "entropy", "mse", "sqnr"};

std::string method_list() {
  std::string s;
  for (const auto& m : kMethods) s += (s.empty() ? "" : ", ") + m;
  return s;
}

// The magnitude histogram h = positive + negative, and n: one past its last non-empty bin.
struct Magnitudes {
  std::vector<uint64_t> h;
  int64_t n = 0;
  uint64_t total = 0;
};

void check_histograms(const TensorStats& s) {
  if (s.positive.size() != s.negative.size())
    throw ArgumentError("statistics have " + std::to_string(s.positive.size()) + " positive and " +
                        std::to_string(s.negative.size()) + " negative bins; both histograms need the same size");
}

Magnitudes magnitudes(const TensorStats& s) {
  Magnitudes m;
  m.h.resize(s.positive.size());
  for (size_t i = 0; i < m.h.size(); ++i) {
    m.h[i] = s.positive[i] + s.negative[i];
    m.total += m.h[i];
    if (m.h[i] != 0) m.n = static_cast<int64_t>(i) + 1;
  }
  return m;
}

// True when the histograms carry no magnitude: nothing observed, or only zeros.
bool trivial(const TensorStats& s) { return s.count == 0 || s.exponent == TensorStats::kNoExponent; }

Range minmax_of(const TensorStats& s) { return s.count == 0 ? Range{0, 0} : Range{s.min, s.max}; }

// [lo, hi] (in double, possibly beyond float's range) clamped to the observed extremes.
Range clamped(const TensorStats& s, double lo, double hi) {
  return {static_cast<float>(std::max(lo, static_cast<double>(s.min))),
          static_cast<float>(std::min(hi, static_cast<double>(s.max)))};
}

// R(t) of entropy and mse: symmetric [-t, t], else the extremes clipped to [-t, t].
Range threshold_range(const TensorStats& s, double t, const Grid& grid) {
  const auto tf = static_cast<float>(std::min(t, static_cast<double>(s.absmax())));
  if (grid.symmetric) return {-tf, tf};
  return {std::clamp(s.min, -tf, tf), std::clamp(s.max, -tf, tf)};
}

int64_t candidate_stride(int64_t n) { return std::max<int64_t>(1, (n + kCandidates - 1) / kCandidates); }

// ---- percentile ----------------------------------------------------------------------------

Range percentile_range(const TensorStats& s, double p, const Grid& grid) {
  const Magnitudes m = magnitudes(s);
  if (m.n == 0) return minmax_of(s);
  const double w = s.bin_width(), total = static_cast<double>(m.total);
  const auto bins = static_cast<int64_t>(m.h.size());
  if (grid.symmetric) {
    const double target = p / 100.0 * total;
    uint64_t c = 0;
    int64_t k = 0;
    for (; k < bins - 1; ++k) {
      c += m.h[static_cast<size_t>(k)];
      if (static_cast<double>(c) >= target) break;
    }
    const double t = static_cast<double>(k + 1) * w;
    return clamped(s, -t, t);
  }
  // Signed bin j: negative bin (bins - 1 - j) for j < bins, else positive bin (j - bins).
  auto signed_count = [&](int64_t j) {
    return j < bins ? s.negative[static_cast<size_t>(bins - 1 - j)] : s.positive[static_cast<size_t>(j - bins)];
  };
  const double cut = (100.0 - p) / 200.0;
  const double lo_target = cut * total, hi_target = (1.0 - cut) * total;
  int64_t lo_bin = -1, hi_bin = 2 * bins - 1;
  uint64_t c = 0;
  for (int64_t j = 0; j < 2 * bins; ++j) {
    c += signed_count(j);
    const auto cd = static_cast<double>(c);
    if (lo_bin < 0 && cd >= lo_target) lo_bin = j;
    if (cd >= hi_target) {
      hi_bin = j;
      break;
    }
  }
  if (lo_bin < 0) lo_bin = hi_bin;
  return clamped(s, static_cast<double>(lo_bin - bins) * w, static_cast<double>(hi_bin - bins + 1) * w);
}

// ---- entropy -------------------------------------------------------------------------------

constexpr double kEntropyMaxClipped = 0.01;

Range entropy_range(const TensorStats& s, int levels, const Grid& grid) {
  const Magnitudes m = magnitudes(s);
  const int64_t n = m.n, L = levels;
  if (n < L) return minmax_of(s);
  std::vector<uint64_t> g(m.h.begin(), m.h.begin() + n);
  g[0] = g[1];
  // Prefix sums over g[0..j): counts, non-empty bins, and c * ln(c).
  std::vector<uint64_t> count(static_cast<size_t>(n) + 1, 0), nonempty(static_cast<size_t>(n) + 1, 0);
  std::vector<double> clogc(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const auto u = static_cast<size_t>(j);
    const auto c = static_cast<double>(g[u]);
    count[u + 1] = count[u] + g[u];
    nonempty[u + 1] = nonempty[u] + (g[u] != 0);
    clogc[u + 1] = clogc[u] + (g[u] != 0 ? c * std::log(c) : 0.0);
  }
  const uint64_t total = count[static_cast<size_t>(n)];
  const auto total_d = static_cast<double>(total);
  double best_kl = std::numeric_limits<double>::infinity();
  int64_t best_i = n;
  const int64_t stride = candidate_stride(n);
  for (int64_t i = n; i >= L; i -= stride) {
    const auto iu = static_cast<size_t>(i);
    const uint64_t outliers = total - count[iu];
    if (g[iu - 1] == 0 && outliers > 0) continue;  // P > 0 where Q = 0: KL is +inf
    // A threshold clipping more than kEntropyMaxClipped of the values is no candidate: with
    // most values beyond it, P is one spike that Q copies exactly, so KL is about 0 (a
    // distribution away from zero, like a Softmax output, would collapse to its lowest values).
    if (static_cast<double>(outliers) > kEntropyMaxClipped * total_d) continue;
    // sum P ln P: bins below i - 1 as they are, bin i - 1 with the outliers.
    const double last = static_cast<double>(g[iu - 1]) + static_cast<double>(outliers);
    const double plogp = clogc[iu - 1] + (last > 0 ? last * std::log(last) : 0.0);
    // sum P ln Q: Q is constant (level sum / non-empty bins) over a level's non-empty bins.
    double plogq = 0.0;
    for (int64_t k = 0; k < L; ++k) {
      const auto a = static_cast<size_t>((k * i + L - 1) / L), b = static_cast<size_t>(((k + 1) * i + L - 1) / L);
      const uint64_t sum = count[b] - count[a];
      if (sum == 0) continue;
      const double level_q = std::log(static_cast<double>(sum) / static_cast<double>(nonempty[b] - nonempty[a]));
      const double mass = static_cast<double>(sum) + (k == L - 1 ? static_cast<double>(outliers) : 0.0);
      plogq += mass * level_q;
    }
    // With p = P / T and q = Q / T' (T' = T - outliers): KL = (sum P ln P - sum P ln Q) / T + ln(T' / T).
    const double kl = (plogp - plogq) / total_d + std::log(static_cast<double>(count[iu]) / total_d);
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return threshold_range(s, static_cast<double>(best_i) * s.bin_width(), grid);
}

// ---- squared quantization error ------------------------------------------------------------

// Exact prefix moments of one histogram: sums over bins [0, j) of c, c * i and c * i^2.
class Moments {
 public:
  Moments(const std::vector<uint64_t>& c, int64_t n) : m0_(static_cast<size_t>(n) + 1), m1_(m0_.size()), m2_(m0_.size()) {
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<size_t>(i);
      const U128 ci = c[u], iu = static_cast<U128>(i);
      m0_[u + 1] = m0_[u] + ci;
      m1_[u + 1] = m1_[u] + ci * iu;
      m2_[u + 1] = m2_[u] + ci * iu * iu;
    }
  }

  /// Sum over bins i in [a, b) of c * (i - a + d)^2.
  double run(int64_t a, int64_t b, double d) const {
    const auto au = static_cast<size_t>(a), bu = static_cast<size_t>(b);
    const U128 s0 = m0_[bu] - m0_[au];
    if (s0 == 0) return 0.0;
    const U128 s1 = m1_[bu] - m1_[au], s2 = m2_[bu] - m2_[au], x = static_cast<U128>(a);
    // Moments about a: exact in modular 128-bit arithmetic, since the true values are >= 0.
    const U128 c1 = s1 - x * s0, c2 = s2 - 2 * x * s1 + x * x * s0;
    const auto d0 = static_cast<double>(s0), d1 = static_cast<double>(c1), d2 = static_cast<double>(c2);
    return d2 + 2.0 * d * d1 + d * d * d0;
  }

  /// Sum over all bins of c * (i + 0.5)^2.
  double signal() const {
    const size_t n = m0_.size() - 1;
    const U128 four = 4 * m2_[n] + 4 * m1_[n] + m0_[n];  // sum c * (2i + 1)^2
    return static_cast<double>(four) / 4.0;
  }

  int64_t size() const { return static_cast<int64_t>(m0_.size()) - 1; }

 private:
  std::vector<U128> m0_, m1_, m2_;
};

// The squared error, in units of bin_width^2, of quantize-dequantize of one sign's bin centres
// (i + 0.5) * w with `scale` when the levels of that sign end `saturation` steps from the
// zero point: each bin is taken to min(round_half_even((i + 0.5) * w / scale), saturation)
// steps. Runs of bins at one level are summed through the moments.
double side_noise(const Moments& mom, double w, double scale, int64_t saturation) {
  const int64_t n = mom.size();
  auto steps = [&](int64_t i) { return round_half_even((static_cast<double>(i) + 0.5) * w / scale); };
  const auto sat = static_cast<double>(saturation);
  double noise = 0.0;
  int64_t i = 0;
  while (i < n) {
    const double r = std::min(steps(i), sat);
    int64_t j = n;
    if (r < sat) {
      // Bins below (r + 0.5) * scale / w - 0.5 round to r; the estimate is corrected exactly.
      const double guess = std::floor(std::min((r + 0.5) * scale / w - 0.5, static_cast<double>(n))) + 1.0;
      j = std::clamp(static_cast<int64_t>(std::max(guess, 0.0)), i + 1, n);
      while (j < n && steps(j) <= r) ++j;
      while (j > i + 1 && steps(j - 1) > r) --j;
    }
    const double v = r * scale / w;  // the level, in bins
    noise += mom.run(i, j, static_cast<double>(i) + 0.5 - v);
    i = j;
  }
  return noise;
}

// Squared quantization error of the histograms (in units of bin_width^2) with `range`.
struct NoiseModel {
  const TensorStats& s;
  const Grid& grid;
  Moments pos, neg;
  NoiseModel(const TensorStats& stats, const Grid& g, int64_t n)
      : s(stats), grid(g), pos(stats.positive, n), neg(stats.negative, n) {}

  double noise(Range range) const {
    const QParams q = qparams_for_range(range.min, range.max, grid);
    const double scale = q.scale[0], w = s.bin_width();
    const int64_t zp = q.zero_point[0];
    return side_noise(pos, w, scale, grid.qmax() - zp) + side_noise(neg, w, scale, zp - grid.qmin());
  }
  double signal() const { return pos.signal() + neg.signal(); }
};

Range mse_range(const TensorStats& s, const Grid& grid) {
  const Magnitudes m = magnitudes(s);
  if (m.n == 0) return minmax_of(s);
  const NoiseModel model(s, grid, m.n);
  const double w = s.bin_width();
  double best = std::numeric_limits<double>::infinity();
  Range best_range = minmax_of(s);
  const int64_t stride = candidate_stride(m.n);
  for (int64_t k = m.n - 1; k >= 0; k -= stride) {
    const Range r = threshold_range(s, static_cast<double>(k + 1) * w, grid);
    const double e = model.noise(r);
    if (e < best) {
      best = e;
      best_range = r;
    }
  }
  return best_range;
}

double sqnr_db_of(const NoiseModel& model, Range range) {
  const double noise = model.noise(range);
  if (noise == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(model.signal() / noise);
}

Range range_by_name(const TensorStats& s, const std::string& method, const MethodOptions& o, const Grid& grid,
                    std::string* chosen);

Range sqnr_range(const TensorStats& s, const MethodOptions& o, const Grid& grid, std::string* chosen) {
  const Magnitudes m = magnitudes(s);
  if (m.n == 0) {
    if (chosen != nullptr) *chosen = kMethods[0];
    return minmax_of(s);
  }
  const NoiseModel model(s, grid, m.n);
  Range best_range;
  double best = -std::numeric_limits<double>::infinity();
  bool first = true;
  for (size_t i = 0; i + 1 < kMethods.size(); ++i) {
    const Range r = range_by_name(s, kMethods[i], o, grid, nullptr);
    const double db = sqnr_db_of(model, r);
    if (first || db > best) {
      best = db;
      best_range = r;
      first = false;
      if (chosen != nullptr) *chosen = kMethods[i];
    }
  }
  return best_range;
}

Range range_by_name(const TensorStats& s, const std::string& method, const MethodOptions& o, const Grid& grid,
                    std::string* chosen) {
  if (chosen != nullptr) *chosen = method;
  if (method == "minmax") return minmax_of(s);
  if (method == "percentile") return percentile_range(s, o.percentile, grid);
  if (method == "entropy") return entropy_range(s, o.entropy_levels, grid);
  if (method == "mse") return mse_range(s, grid);
  return sqnr_range(s, o, grid, chosen);
}

void check_range(Range r) {
  if (std::isnan(r.min) || std::isnan(r.max) || r.min > r.max) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "range [%.9g, %.9g] is not a range: min must be <= max", static_cast<double>(r.min),
                  static_cast<double>(r.max));
    throw ArgumentError(buf);
  }
}

}  // namespace

const std::vector<std::string>& method_names() { return kMethods; }

Range compute_range(const TensorStats& stats, const MethodOptions& options, const Grid& grid, std::string* chosen) {
  if (std::find(kMethods.begin(), kMethods.end(), options.method) == kMethods.end())
    throw ArgumentError("unknown range method '" + options.method + "'; known methods: " + method_list());
  if (!(options.percentile > 0.0 && options.percentile <= 100.0))
    throw ArgumentError("percentile must be in (0, 100], got " + std::to_string(options.percentile));
  if (options.entropy_levels < 2)
    throw ArgumentError("entropy_levels must be at least 2, got " + std::to_string(options.entropy_levels));
  grid.qmin();  // validates the grid's dtype
  check_histograms(stats);
  if (trivial(stats)) {
    if (chosen != nullptr) *chosen = options.method == "sqnr" ? kMethods[0] : options.method;
    return minmax_of(stats);
  }
  return range_by_name(stats, options.method, options, grid, chosen);
}

double estimate_sqnr_db(const TensorStats& stats, Range range, const Grid& grid) {
  qparams_for_range(range.min, range.max, grid);  // validates the range and the grid
  check_histograms(stats);
  if (trivial(stats)) return std::numeric_limits<double>::infinity();
  const Magnitudes m = magnitudes(stats);
  if (m.n == 0) return std::numeric_limits<double>::infinity();
  return sqnr_db_of(NoiseModel(stats, grid, m.n), range);
}

double clipped_fraction(const TensorStats& stats, Range range) {
  check_range(range);
  check_histograms(stats);
  if (stats.count == 0) return 0.0;
  if (stats.exponent == TensorStats::kNoExponent) return (range.min > 0.0f || range.max < 0.0f) ? 1.0 : 0.0;
  const double w = stats.bin_width(), lo = range.min, hi = range.max;
  const double vmin = stats.min, vmax = stats.max;
  // Share outside [lo, hi] of values spread uniformly over [a, a + w] within [vmin, vmax].
  auto outside = [&](double a) {
    const double from = std::max(a, vmin), to = std::min(a + w, vmax);
    if (!(to > from)) return (from < lo || from > hi) ? 1.0 : 0.0;  // the values sit at one point
    return 1.0 - std::max(0.0, std::min(hi, to) - std::max(lo, from)) / (to - from);
  };
  double clipped = 0.0, total = 0.0;
  for (size_t i = 0; i < stats.positive.size(); ++i) {
    const double a = static_cast<double>(i) * w;
    if (stats.positive[i] != 0) clipped += static_cast<double>(stats.positive[i]) * outside(a);
    if (stats.negative[i] != 0) clipped += static_cast<double>(stats.negative[i]) * outside(-a - w);
    total += static_cast<double>(stats.positive[i] + stats.negative[i]);
  }
  return total > 0.0 ? clipped / total : 0.0;
}

}  // namespace tether::quant
