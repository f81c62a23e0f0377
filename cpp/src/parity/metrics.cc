// Tensor comparison in float64: one pass over blocks of converted elements.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tether/error.h"
#include "parity/accumulate.h"
#include "tether/parity.h"
#include "util/float16.h"

namespace tether::parity {

namespace {

using detail::Accumulator;
using detail::Kind;
using detail::dims_text;
using detail::kind_of;
using detail::Location;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kBlock = 4096;

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

}  // namespace

namespace detail {

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

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

void Accumulator::consider(int rank, double abs, Location at, double r, double c) {
  if (rank > worst_rank || (rank == worst_rank && (abs > worst_abs || (abs == worst_abs && at < worst)))) {
    worst_rank = rank;
    worst_abs = abs;
    worst = at;
    worst_r = r;
    worst_c = c;
  }
}

void Accumulator::add(double r, double c, Location at, bool equal) {
  if (!std::isfinite(r) || !std::isfinite(c)) {
    const bool same = (std::isnan(r) && std::isnan(c)) || r == c;
    if (!same) {
      ++mismatches;
      ++nonfinite;
      need_atol = need_rtol = kInf;
      consider(2, kInf, at, r, c);
    }
    return;
  }
  const double d = std::fabs(c - r);
  const double ar = std::fabs(r);
  const double rel = d == 0 ? 0 : (ar == 0 ? kInf : d / ar);
  ++finite;
  sum_abs.add(d);
  sum_rr.add(r * r);
  sum_cc.add(c * c);
  sum_rc.add(r * c);
  sum_dd.add(d * d);
  max_abs = std::max(max_abs, d);
  max_rel = std::max(max_rel, rel);
  bool pass;
  if (exact) {
    pass = equal;
    if (!pass) need_atol = need_rtol = kInf;
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
  consider(pass ? 0 : 1, d, at, r, c);
}

void Accumulator::add_tensors(const ir::Tensor& reference, const ir::Tensor& candidate, int64_t first_row,
                              int64_t inner) {
  const int64_t n = reference.num_elements();
  elements += n;
  // Same-width integers compare as bytes; bools and mixed widths by value.
  const bool bytewise = reference.dtype() == candidate.dtype() && kind_of(reference.dtype()) == Kind::kInteger;
  const auto item = static_cast<size_t>(ir::dtype_bits(reference.dtype()) / 8);
  std::vector<double> r(kBlock), c(kBlock);
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    load(reference, begin, len, r.data());
    load(candidate, begin, len, c.data());
    for (int64_t i = 0; i < len; ++i) {
      const int64_t k = begin + i;
      bool equal = true;
      if (exact) {
        equal = bytewise ? std::memcmp(static_cast<const char*>(reference.raw_data()) + static_cast<size_t>(k) * item,
                                       static_cast<const char*>(candidate.raw_data()) + static_cast<size_t>(k) * item,
                                       item) == 0
                         : exact_at(reference, k) == exact_at(candidate, k);
      }
      add(r[static_cast<size_t>(i)], c[static_cast<size_t>(i)], Location{first_row + k / inner, k % inner}, equal);
    }
  }
}

void Accumulator::add_unequal(const uint8_t* unequal, int64_t n, int64_t first_row, int64_t inner) {
  exact = strings = true;
  elements += n;
  for (int64_t k = 0; k < n; ++k) {
    const Location at{first_row + k / inner, k % inner};
    if (unequal[k] != 0) {
      ++mismatches;
      consider(1, kInf, at, 0, 0);
    } else {
      consider(0, 0, at, 0, 0);
    }
  }
}

void Accumulator::merge(const Accumulator& o) {
  exact = exact || o.exact;
  strings = strings || o.strings;
  elements += o.elements;
  finite += o.finite;
  mismatches += o.mismatches;
  nonfinite += o.nonfinite;
  sum_abs.merge(o.sum_abs);
  sum_rr.merge(o.sum_rr);
  sum_cc.merge(o.sum_cc);
  sum_rc.merge(o.sum_rc);
  sum_dd.merge(o.sum_dd);
  max_abs = std::max(max_abs, o.max_abs);
  max_rel = std::max(max_rel, o.max_rel);
  need_atol = std::max(need_atol, o.need_atol);
  need_rtol = std::max(need_rtol, o.need_rtol);
  if (o.worst_rank >= 0) consider(o.worst_rank, o.worst_abs, o.worst, o.worst_r, o.worst_c);
}

void Accumulator::finish(Metrics& m) const {
  m.exact = exact;
  m.mismatches = mismatches;
  m.nonfinite_mismatches = nonfinite;
  m.mismatch_fraction = elements > 0 ? static_cast<double>(mismatches) / static_cast<double>(elements) : 0;
  m.ok = mismatches == 0;
  m.worst_reference = worst_r;
  m.worst_candidate = worst_c;
  if (strings) {
    m.max_abs_error = m.max_rel_error = m.required_atol = m.required_rtol = mismatches > 0 ? kInf : 0;
    m.mean_abs_error = 0;
    m.snr_db = mismatches > 0 ? -kInf : kInf;
    m.cosine = mismatches > 0 ? 0 : 1;
    return;
  }
  const double rr = sum_rr.value(), cc = sum_cc.value(), dd = sum_dd.value();
  m.max_abs_error = max_abs;
  m.max_rel_error = max_rel;
  m.mean_abs_error = finite > 0 ? sum_abs.value() / static_cast<double>(finite) : 0;
  const double norms = rr * cc;
  m.cosine = rr == 0 && cc == 0 ? 1 : (norms == 0 ? 0 : sum_rc.value() / std::sqrt(norms));
  m.snr_db = dd == 0 ? kInf : (rr == 0 ? -kInf : 10 * std::log10(rr / dd));
  m.required_atol = std::max(need_atol, 0.0);
  m.required_rtol = std::max(need_rtol, 0.0);
}

}  // namespace detail

namespace {

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
  Accumulator acc;
  acc.tol = tolerance;
  acc.exact = kr != Kind::kFloat;
  const int64_t inner = std::max<int64_t>(m.elements, 1);
  if (kr == Kind::kString) {
    const auto& a = reference.string_values();
    const auto& b = candidate.string_values();
    std::vector<uint8_t> unequal(a.size());
    for (size_t i = 0; i < a.size(); ++i) unequal[i] = a[i] != b[i] ? 1 : 0;
    acc.add_unequal(unequal.data(), m.elements, 0, inner);
  } else {
    acc.add_tensors(reference, candidate, 0, inner);
  }
  acc.finish(m);
  m.worst_index = acc.worst.inner;
  return m;
}

}  // namespace tether::parity
