// Tensor comparison in float64: one pass over blocks of converted elements.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tether/error.h"
#include "tether/parity.h"
#include "util/float16.h"

namespace tether::parity {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kBlock = 4096;

enum class Kind { kFloat, kInteger, kBool, kString, kOther };

Kind kind_of(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat16:
    case ir::DType::kBFloat16:
    case ir::DType::kFloat32:
    case ir::DType::kFloat64: return Kind::kFloat;
    case ir::DType::kInt8:
    case ir::DType::kInt16:
    case ir::DType::kInt32:
    case ir::DType::kInt64:
    case ir::DType::kUInt8:
    case ir::DType::kUInt16:
    case ir::DType::kUInt32:
    case ir::DType::kUInt64: return Kind::kInteger;
    case ir::DType::kBool: return Kind::kBool;
    case ir::DType::kString: return Kind::kString;
    default: return Kind::kOther;
  }
}

// Converts elements [begin, begin + n) of `t` to double. Integers past 2^53 lose their low
// bits here; equality of integers is decided separately, on exact values.
void load(const ir::Tensor& t, int64_t begin, int64_t n, double* out) {
  const void* p = t.raw_data();
  auto cast = [&](const auto* src) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(src[begin + i]);
  };
  switch (t.dtype()) {
    case ir::DType::kFloat32: cast(static_cast<const float*>(p)); break;
    case ir::DType::kFloat64: cast(static_cast<const double*>(p)); break;
    case ir::DType::kFloat16: {
      const auto* s = static_cast<const uint16_t*>(p) + begin;
      for (int64_t i = 0; i < n; ++i) out[i] = util::half_to_float(s[i]);
      break;
    }
    case ir::DType::kBFloat16: {
      const auto* s = static_cast<const uint16_t*>(p) + begin;
      for (int64_t i = 0; i < n; ++i) out[i] = util::bfloat16_to_float(s[i]);
      break;
    }
    case ir::DType::kInt8: cast(static_cast<const int8_t*>(p)); break;
    case ir::DType::kInt16: cast(static_cast<const int16_t*>(p)); break;
    case ir::DType::kInt32: cast(static_cast<const int32_t*>(p)); break;
    case ir::DType::kInt64: cast(static_cast<const int64_t*>(p)); break;
    case ir::DType::kUInt8: cast(static_cast<const uint8_t*>(p)); break;
    case ir::DType::kBool: {
      const auto* s = static_cast<const uint8_t*>(p) + begin;
      for (int64_t i = 0; i < n; ++i) out[i] = s[i] != 0 ? 1.0 : 0.0;
      break;
    }
    case ir::DType::kUInt16: cast(static_cast<const uint16_t*>(p)); break;
    case ir::DType::kUInt32: cast(static_cast<const uint32_t*>(p)); break;
    case ir::DType::kUInt64: cast(static_cast<const uint64_t*>(p)); break;
    default: throw InternalError("parity::load: dtype " + std::string(ir::dtype_name(t.dtype())));
  }
}

// An integer element as a sign and magnitude, exact for every int64 and uint64.
struct Exact {
  bool negative;
  uint64_t magnitude;
  bool operator==(const Exact&) const = default;
};

Exact exact_at(const ir::Tensor& t, int64_t i) {
  const void* p = t.raw_data();
  auto s = [](int64_t v) { return Exact{v < 0, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v)}; };
  auto u = [](uint64_t v) { return Exact{false, v}; };
  switch (t.dtype()) {
    case ir::DType::kInt8: return s(static_cast<const int8_t*>(p)[i]);
    case ir::DType::kInt16: return s(static_cast<const int16_t*>(p)[i]);
    case ir::DType::kInt32: return s(static_cast<const int32_t*>(p)[i]);
    case ir::DType::kInt64: return s(static_cast<const int64_t*>(p)[i]);
    case ir::DType::kUInt8: return u(static_cast<const uint8_t*>(p)[i]);
    case ir::DType::kBool: return u(static_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0);
    case ir::DType::kUInt16: return u(static_cast<const uint16_t*>(p)[i]);
    case ir::DType::kUInt32: return u(static_cast<const uint32_t*>(p)[i]);
    case ir::DType::kUInt64: return u(static_cast<const uint64_t*>(p)[i]);
    default: throw InternalError("parity::exact_at: dtype " + std::string(ir::dtype_name(t.dtype())));
  }
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Sums and extremes over all blocks.
struct Accumulator {
  Tolerance tol;
  bool exact = false;
  int64_t finite = 0;
  double sum_abs = 0, sum_rr = 0, sum_cc = 0, sum_rc = 0, sum_dd = 0;
  double max_abs = 0, max_rel = 0, need_atol = 0, need_rtol = 0;
  int64_t mismatches = 0, nonfinite = 0;
  // The worst element: rank 2 = NaN/inf disagreement, 1 = out of tolerance, 0 = in tolerance.
  int worst_rank = -1;
  double worst_abs = -1;
  int64_t worst_index = -1;
  double worst_r = 0, worst_c = 0;

  void consider(int rank, double abs, int64_t index, double r, double c) {
    if (rank > worst_rank || (rank == worst_rank && abs > worst_abs)) {
      worst_rank = rank;
      worst_abs = abs;
      worst_index = index;
      worst_r = r;
      worst_c = c;
    }
  }

  // `equal` is the exact verdict for integer pairs (ignored for floats).
  void add(double r, double c, int64_t index, bool equal) {
    if (!std::isfinite(r) || !std::isfinite(c)) {
      const bool same = (std::isnan(r) && std::isnan(c)) || r == c;
      if (!same) {
        ++mismatches;
        ++nonfinite;
        need_atol = need_rtol = kInf;
        consider(2, kInf, index, r, c);
      }
      return;
    }
    const double d = std::fabs(c - r);
    const double ar = std::fabs(r);
    const double rel = d == 0 ? 0 : (ar == 0 ? kInf : d / ar);
    ++finite;
    sum_abs += d;
    sum_rr += r * r;
    sum_cc += c * c;
    sum_rc += r * c;
    sum_dd += d * d;
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, rel);
    bool pass;
    if (exact) {
      pass = equal;
      if (!pass) {
        need_atol = need_rtol = kInf;
      }
    } else if (tol.rule == ToleranceRule::kNumpy) {
      pass = d <= tol.atol + tol.rtol * ar;
      need_atol = std::max(need_atol, d - tol.rtol * ar);
      if (d > tol.atol) need_rtol = std::max(need_rtol, ar == 0 ? kInf : (d - tol.atol) / ar);
    } else {
      pass = d <= tol.atol || rel <= tol.rtol;
      if (rel > tol.rtol) need_atol = std::max(need_atol, d);
      if (d > tol.atol) need_rtol = std::max(need_rtol, rel);
    }
    if (!pass) ++mismatches;
    consider(pass ? 0 : 1, d, index, r, c);
  }
};

Metrics compare_strings(const ir::Tensor& r, const ir::Tensor& c, Metrics m) {
  m.exact = true;
  const auto& a = r.string_values();
  const auto& b = c.string_values();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      if (m.mismatches++ == 0) m.worst_index = static_cast<int64_t>(i);
    }
  if (m.worst_index < 0 && !a.empty()) m.worst_index = 0;
  m.mismatch_fraction = a.empty() ? 0 : static_cast<double>(m.mismatches) / static_cast<double>(a.size());
  m.max_abs_error = m.max_rel_error = m.mismatches > 0 ? kInf : 0;
  m.required_atol = m.required_rtol = m.mismatches > 0 ? kInf : 0;
  m.snr_db = m.mismatches > 0 ? -kInf : kInf;
  m.cosine = m.mismatches > 0 ? 0 : 1;
  m.ok = m.mismatches == 0;
  return m;
}

}  // namespace

std::string_view rule_name(ToleranceRule rule) { return rule == ToleranceRule::kNumpy ? "numpy" : "either"; }

ToleranceRule rule_from_name(std::string_view name) {
  if (name == "numpy") return ToleranceRule::kNumpy;
  if (name == "either" || name == "polygraphy") return ToleranceRule::kEither;
  throw ArgumentError("unknown tolerance rule '" + std::string(name) + "'; use 'numpy' (|c-r| <= atol + rtol*|r|) or "
                      "'either' (|c-r| <= atol or |c-r|/|r| <= rtol)");
}

Metrics compare(const ir::Tensor& reference, const ir::Tensor& candidate, const Tolerance& tolerance) {
  if (!(tolerance.atol >= 0) || !(tolerance.rtol >= 0))
    throw ArgumentError("tolerance must be >= 0, got atol=" + std::to_string(tolerance.atol) +
                        " rtol=" + std::to_string(tolerance.rtol));
  Metrics m;
  m.shape = reference.dims();
  const Kind kr = kind_of(reference.dtype()), kc = kind_of(candidate.dtype());
  auto fail = [&](std::string why) {
    m.ok = false;
    m.problem = std::move(why);
    m.max_abs_error = m.max_rel_error = m.required_atol = m.required_rtol = kInf;
    m.cosine = 0;
    m.snr_db = -kInf;
    return m;
  };
  if (reference.dims() != candidate.dims())
    return fail("shape " + dims_text(candidate.dims()) + " differs from the reference's " + dims_text(reference.dims()));
  if (kr != kc || kr == Kind::kOther)
    return fail("dtype " + std::string(ir::dtype_name(candidate.dtype())) + " cannot be compared with the reference's " +
                std::string(ir::dtype_name(reference.dtype())));
  m.elements = reference.num_elements();
  if (kr == Kind::kString) return compare_strings(reference, candidate, m);

  Accumulator acc;
  acc.tol = tolerance;
  acc.exact = kr != Kind::kFloat;
  // Same-width integers compare as bytes; bools and mixed widths by value.
  const bool bytewise = reference.dtype() == candidate.dtype() && kr == Kind::kInteger;
  const auto item = static_cast<size_t>(ir::dtype_bits(reference.dtype()) / 8);
  std::vector<double> r(kBlock), c(kBlock);
  for (int64_t begin = 0; begin < m.elements; begin += kBlock) {
    const int64_t n = std::min(kBlock, m.elements - begin);
    load(reference, begin, n, r.data());
    load(candidate, begin, n, c.data());
    for (int64_t i = 0; i < n; ++i) {
      bool equal = true;
      if (acc.exact) {
        const int64_t k = begin + i;
        equal = bytewise ? std::memcmp(static_cast<const char*>(reference.raw_data()) + static_cast<size_t>(k) * item,
                                         static_cast<const char*>(candidate.raw_data()) + static_cast<size_t>(k) * item,
                                         item) == 0
                           : exact_at(reference, k) == exact_at(candidate, k);
      }
      acc.add(r[static_cast<size_t>(i)], c[static_cast<size_t>(i)], begin + i, equal);
    }
  }
  m.exact = acc.exact;
  m.max_abs_error = acc.max_abs;
  m.max_rel_error = acc.max_rel;
  m.mean_abs_error = acc.finite > 0 ? acc.sum_abs / static_cast<double>(acc.finite) : 0;
  const double norms = acc.sum_rr * acc.sum_cc;
  m.cosine = acc.sum_rr == 0 && acc.sum_cc == 0 ? 1 : (norms == 0 ? 0 : acc.sum_rc / std::sqrt(norms));
  m.snr_db = acc.sum_dd == 0 ? kInf : (acc.sum_rr == 0 ? -kInf : 10 * std::log10(acc.sum_rr / acc.sum_dd));
  m.mismatches = acc.mismatches;
  m.nonfinite_mismatches = acc.nonfinite;
  m.mismatch_fraction = m.elements > 0 ? static_cast<double>(acc.mismatches) / static_cast<double>(m.elements) : 0;
  m.worst_index = acc.worst_index;
  m.worst_reference = acc.worst_r;
  m.worst_candidate = acc.worst_c;
  m.required_atol = std::max(acc.need_atol, 0.0);
  m.required_rtol = std::max(acc.need_rtol, 0.0);
  m.ok = acc.mismatches == 0;
  return m;
}

}  // namespace tether::parity
