// CompareState: the comparison of one output over a dataset, kept as a mergeable state.
#include <algorithm>
#include <cstring>
#include <limits>

#include "parity/accumulate.h"
#include "tether/error.h"
#include "tether/parity.h"

namespace tether::parity {

using detail::Accumulator;
using detail::Kind;
using detail::Location;

namespace {

constexpr char kMagic[] = "tether.parity.state/1";
constexpr int64_t kNoRow = std::numeric_limits<int64_t>::max();

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(std::string_view& in) {
  if (in.size() < sizeof(T)) throw ArgumentError("parity state: truncated bytes");
  T v;
  std::memcpy(&v, in.data(), sizeof v);
  in.remove_prefix(sizeof v);
  return v;
}

int64_t product(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

}  // namespace

struct CompareState::Impl {
  Accumulator acc;
  bool any = false;  // a batch was compared element by element (its kind is known)
  int kind = 0;
  int64_t rows = 0;
  bool inner_known = false, inner_varies = false;
  std::vector<int64_t> inner;
  int64_t problem_row = kNoRow;
  std::string problem;

  void note_problem(int64_t row, std::string why) {
    if (row < problem_row) {
      problem_row = row;
      problem = std::move(why);
    }
  }
  void note_inner(const std::vector<int64_t>& d) {
    if (!inner_known) {
      inner = d;
      inner_known = true;
    } else if (d != inner) {
      inner_varies = true;
    }
  }
  // The first element-wise batch fixes the kind; later ones of another kind are problems.
  bool note_kind(Kind k, int64_t row, const std::string& dtype) {
    if (!any) {
      any = true;
      kind = static_cast<int>(k);
      acc.exact = k != Kind::kFloat;
      return true;
    }
    if (kind != static_cast<int>(k)) {
      note_problem(row, "rows from " + std::to_string(row) + ": dtype " + dtype + " differs in kind from the other rows'");
      return false;
    }
    return true;
  }
};

CompareState::CompareState(const Tolerance& tolerance) : impl_(std::make_unique<Impl>()) {
  if (!(tolerance.atol >= 0) || !(tolerance.rtol >= 0))
    throw ArgumentError("tolerance must be >= 0, got atol=" + std::to_string(tolerance.atol) +
                        " rtol=" + std::to_string(tolerance.rtol));
  impl_->acc.tol = tolerance;
}
CompareState::~CompareState() = default;
CompareState::CompareState(CompareState&&) noexcept = default;
CompareState& CompareState::operator=(CompareState&&) noexcept = default;

void CompareState::add(const ir::Tensor& reference, const ir::Tensor& candidate, int64_t first_row) {
  Impl& s = *impl_;
  const auto& dims = reference.dims();
  const int64_t rows = dims.empty() ? 1 : dims[0];
  s.rows += rows;
  const std::string at = "rows " + std::to_string(first_row) + ".." + std::to_string(first_row + rows - 1) + ": ";
  if (reference.dims() != candidate.dims()) {
    s.note_problem(first_row, at + "shape " + detail::dims_text(candidate.dims()) + " differs from the reference's " +
                                  detail::dims_text(reference.dims()));
    return;
  }
  const Kind kr = detail::kind_of(reference.dtype()), kc = detail::kind_of(candidate.dtype());
  if (kr != kc || kr == Kind::kOther) {
    s.note_problem(first_row, at + "dtype " + std::string(ir::dtype_name(candidate.dtype())) +
                                  " cannot be compared with the reference's " +
                                  std::string(ir::dtype_name(reference.dtype())));
    return;
  }
  const std::vector<int64_t> inner(dims.empty() ? dims.begin() : dims.begin() + 1, dims.end());
  s.note_inner(inner);
  if (!s.note_kind(kr, first_row, std::string(ir::dtype_name(reference.dtype())))) return;
  if (kr == Kind::kString) {
    const auto& a = reference.string_values();
    const auto& b = candidate.string_values();
    std::vector<uint8_t> unequal(a.size());
    for (size_t i = 0; i < a.size(); ++i) unequal[i] = a[i] != b[i] ? 1 : 0;
    s.acc.add_unequal(unequal.data(), reference.num_elements(), first_row, std::max<int64_t>(product(inner), 1));
    return;
  }
  s.acc.add_tensors(reference, candidate, first_row, std::max<int64_t>(product(inner), 1));
}

void CompareState::add_unequal(const std::vector<int64_t>& dims, const uint8_t* unequal, int64_t first_row) {
  Impl& s = *impl_;
  s.rows += dims.empty() ? 1 : dims[0];
  const std::vector<int64_t> inner(dims.empty() ? dims.begin() : dims.begin() + 1, dims.end());
  s.note_inner(inner);
  if (!s.note_kind(Kind::kString, first_row, "string")) return;
  s.acc.add_unequal(unequal, product(dims), first_row, std::max<int64_t>(product(inner), 1));
}

void CompareState::merge(const CompareState& other) {
  Impl& s = *impl_;
  const Impl& o = *other.impl_;
  if (o.acc.tol.atol != s.acc.tol.atol || o.acc.tol.rtol != s.acc.tol.rtol || o.acc.tol.rule != s.acc.tol.rule)
    throw ArgumentError("parity states of different tolerances cannot merge: atol=" + std::to_string(s.acc.tol.atol) +
                        " rtol=" + std::to_string(s.acc.tol.rtol) + " versus atol=" + std::to_string(o.acc.tol.atol) +
                        " rtol=" + std::to_string(o.acc.tol.rtol));
  s.rows += o.rows;
  if (o.inner_known) s.note_inner(o.inner);
  s.inner_varies = s.inner_varies || o.inner_varies;
  if (o.problem_row != kNoRow) s.note_problem(o.problem_row, o.problem);
  if (o.any) {
    if (!s.any) {
      s.any = true;
      s.kind = o.kind;
    } else if (s.kind != o.kind) {
      s.note_problem(std::min(s.acc.worst.row, o.acc.worst.row), "rows of different kinds (floats, integers, "
                                                                 "bools, strings) in one output");
    }
  }
  s.acc.merge(o.acc);
}

Metrics CompareState::metrics() const {
  const Impl& s = *impl_;
  Metrics m;
  m.shape = {s.rows};
  m.shape.insert(m.shape.end(), s.inner.begin(), s.inner.end());
  if (s.problem_row != kNoRow) {
    m.ok = false;
    m.problem = s.problem;
    m.max_abs_error = m.max_rel_error = m.required_atol = m.required_rtol = std::numeric_limits<double>::infinity();
    m.cosine = 0;
    m.snr_db = -std::numeric_limits<double>::infinity();
    return m;
  }
  m.elements = s.acc.elements;
  s.acc.finish(m);
  if (s.acc.worst.row >= 0)
    m.worst_index = s.inner_varies ? s.acc.worst.row : s.acc.worst.row * std::max<int64_t>(product(s.inner), 1) +
                                                           s.acc.worst.inner;
  return m;
}

void CompareState::shift_rows(int64_t offset) {
  Impl& s = *impl_;
  if (s.acc.worst.row >= 0) s.acc.worst.row += offset;
  if (s.problem_row != kNoRow) s.problem_row += offset;
}

int64_t CompareState::rows() const { return impl_->rows; }

std::pair<int64_t, int64_t> CompareState::worst_location() const {
  return {impl_->acc.worst.row, impl_->acc.worst.inner};
}

std::string CompareState::to_bytes() const {
  const Impl& s = *impl_;
  const Accumulator& a = s.acc;
  std::string out(kMagic, sizeof kMagic);
  put(out, a.tol.atol);
  put(out, a.tol.rtol);
  put(out, static_cast<int32_t>(a.tol.rule));
  put(out, static_cast<uint8_t>(s.any));
  put(out, static_cast<int32_t>(s.kind));
  put(out, s.rows);
  put(out, static_cast<uint8_t>(s.inner_known));
  put(out, static_cast<uint8_t>(s.inner_varies));
  put(out, static_cast<int64_t>(s.inner.size()));
  for (int64_t d : s.inner) put(out, d);
  put(out, s.problem_row);
  put(out, static_cast<int64_t>(s.problem.size()));
  out += s.problem;
  put(out, static_cast<uint8_t>(a.exact));
  put(out, static_cast<uint8_t>(a.strings));
  for (int64_t v : {a.elements, a.finite, a.mismatches, a.nonfinite}) put(out, v);
  for (double v : {a.max_abs, a.max_rel, a.need_atol, a.need_rtol}) put(out, v);
  put(out, static_cast<int32_t>(a.worst_rank));
  put(out, a.worst_abs);
  put(out, a.worst.row);
  put(out, a.worst.inner);
  put(out, a.worst_r);
  put(out, a.worst_c);
  for (const ExactSum* e : {&a.sum_abs, &a.sum_rr, &a.sum_cc, &a.sum_rc, &a.sum_dd}) e->write(out);
  return out;
}

CompareState CompareState::from_bytes(std::string_view in) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    throw ArgumentError("not a parity state (the bytes do not start with '" + std::string(kMagic) + "')");
  in.remove_prefix(sizeof kMagic);
  Tolerance tol;
  tol.atol = get<double>(in);
  tol.rtol = get<double>(in);
  tol.rule = static_cast<ToleranceRule>(get<int32_t>(in));
  CompareState state(tol);
  Impl& s = *state.impl_;
  Accumulator& a = s.acc;
  s.any = get<uint8_t>(in) != 0;
  s.kind = get<int32_t>(in);
  s.rows = get<int64_t>(in);
  s.inner_known = get<uint8_t>(in) != 0;
  s.inner_varies = get<uint8_t>(in) != 0;
  const auto rank = get<int64_t>(in);
  if (rank < 0 || rank > 64) throw ArgumentError("parity state: corrupt bytes (rank " + std::to_string(rank) + ")");
  for (int64_t i = 0; i < rank; ++i) s.inner.push_back(get<int64_t>(in));
  s.problem_row = get<int64_t>(in);
  const auto len = get<int64_t>(in);
  if (len < 0 || static_cast<size_t>(len) > in.size()) throw ArgumentError("parity state: truncated bytes");
  s.problem.assign(in.data(), static_cast<size_t>(len));
  in.remove_prefix(static_cast<size_t>(len));
  a.exact = get<uint8_t>(in) != 0;
  a.strings = get<uint8_t>(in) != 0;
  for (int64_t* v : {&a.elements, &a.finite, &a.mismatches, &a.nonfinite}) *v = get<int64_t>(in);
  for (double* v : {&a.max_abs, &a.max_rel, &a.need_atol, &a.need_rtol}) *v = get<double>(in);
  a.worst_rank = get<int32_t>(in);
  a.worst_abs = get<double>(in);
  a.worst.row = get<int64_t>(in);
  a.worst.inner = get<int64_t>(in);
  a.worst_r = get<double>(in);
  a.worst_c = get<double>(in);
  for (ExactSum* e : {&a.sum_abs, &a.sum_rr, &a.sum_cc, &a.sum_rc, &a.sum_dd}) *e = ExactSum::read(in);
  if (!in.empty()) throw ArgumentError("parity state: " + std::to_string(in.size()) + " bytes past its end");
  return state;
}

}  // namespace tether::parity
