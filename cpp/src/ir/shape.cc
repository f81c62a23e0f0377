#include "tether/shape.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "tether/error.h"

namespace tether::ir {

namespace {

using Factors = std::vector<std::pair<std::string, int>>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  });
}

bool parse_positive(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  if (v <= 0) return false;
  *out = v;
  return true;
}

bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Products of symbolic dims stay exact up to this degree. Real shapes need a handful of
// factors; without a bound, a chain of n Muls squaring a tracked shape value reaches degree
// 2^n, and the dim's text (each factor written out) grows as fast.
constexpr int64_t kMaxDegree = 64;

// Sum of the powers; parsed text may hold many factors, so the sum is taken in int64.
int64_t degree(const Factors& fs) {
  int64_t d = 0;
  for (const auto& f : fs) d += f.second;
  return d;
}

void add_factor(Factors& fs, const std::string& name, int power) {
  auto it = std::lower_bound(fs.begin(), fs.end(), name,
                             [](const auto& f, const std::string& n) { return f.first < n; });
  if (it != fs.end() && it->first == name) {
    it->second += power;
    if (it->second == 0) fs.erase(it);
  } else if (power != 0) {
    fs.insert(it, {name, power});
  }
}

// Splits text at the '*' signs outside parentheses.
std::vector<std::string_view> split_product(std::string_view text) {
  std::vector<std::string_view> terms;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')') --depth;
    if (text[i] == '*' && depth == 0) {
      terms.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  terms.push_back(trim(text.substr(start)));
  return terms;
}

bool is_parenthesized(std::string_view s) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return false;
  int depth = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
    if (depth == 0) return false;  // the first '(' closes before the end
  }
  return true;
}

// Parses "7*batch*seq" (or "2*(s0 + 1)") into a coefficient and factors; false when the
// text is not such a product or has no symbol in it.
bool parse_monomial(std::string_view text, int64_t* coeff, Factors* factors) {
  *coeff = 1;
  factors->clear();
  for (std::string_view term : split_product(text)) {
    int64_t n = 0;
    if (parse_positive(term, &n)) {
      if (!checked_mul(*coeff, n, coeff)) return false;
    } else if (is_identifier(term)) {
      add_factor(*factors, std::string(term), 1);
    } else if (is_parenthesized(term)) {
      add_factor(*factors, std::string(trim(term.substr(1, term.size() - 2))), 1);
    } else {
      return false;
    }
  }
  return !factors->empty();
}

std::string monomial_text(int64_t coeff, const Factors& factors) {
  std::string s;
  if (coeff != 1) s = std::to_string(coeff);
  for (const auto& [name, power] : factors)
    for (int i = 0; i < power; ++i) {
      if (!s.empty()) s += '*';
      s += is_identifier(name) ? name : "(" + name + ")";
    }
  return s;
}

}  // namespace

Dim::Dim(int64_t value) : kind_(Kind::kKnown), coeff_(value) {
  if (value < 0) throw ArgumentError("a known dim must be >= 0, got " + std::to_string(value));
}

Dim Dim::symbol(std::string_view text) {
  Dim d;
  if (text.empty()) return d;
  d.kind_ = Kind::kSymbolic;
  d.param_ = std::string(text);
  if (!parse_monomial(text, &d.coeff_, &d.factors_)) {
    d.coeff_ = 1;
    d.factors_ = {{std::string(text), 1}};
  }
  return d;
}

Dim Dim::from_monomial(int64_t coeff, Factors factors) {
  if (factors.empty()) return Dim(coeff);
  if (coeff == 0) return Dim(0);
  Dim d;
  d.kind_ = Kind::kSymbolic;
  d.coeff_ = coeff;
  d.factors_ = std::move(factors);
  d.param_ = monomial_text(d.coeff_, d.factors_);
  return d;
}

int64_t Dim::value() const {
  TETHER_CHECK(is_known(), "value() of a dim that is not known: " + to_string());
  return coeff_;
}

Dim Dim::operator*(const Dim& other) const {
  if (is_unknown() || other.is_unknown()) return Dim();
  if (other.is_known() && other.coeff_ == 1) return *this;
  if (is_known() && coeff_ == 1) return other;
  int64_t coeff = 0;
  if (!checked_mul(coeff_, other.coeff_, &coeff)) return Dim();
  if (degree(factors_) + degree(other.factors_) > kMaxDegree) return Dim();
  Factors fs = factors_;
  for (const auto& [name, power] : other.factors_) add_factor(fs, name, power);
  return from_monomial(coeff, std::move(fs));
}

std::optional<Dim> Dim::divide(const Dim& other) const {
  if (is_unknown() || other.is_unknown()) return std::nullopt;
  if (other.is_known() && other.coeff_ == 0) return std::nullopt;
  if (other.is_known() && other.coeff_ == 1) return *this;
  if (coeff_ % other.coeff_ != 0) return std::nullopt;
  Factors fs = factors_;
  for (const auto& [name, power] : other.factors_) add_factor(fs, name, -power);
  for (const auto& f : fs)
    if (f.second < 0) return std::nullopt;
  return from_monomial(coeff_ / other.coeff_, std::move(fs));
}

bool Dim::same_as(const Dim& other) const {
  if (kind_ != other.kind_ || is_unknown()) return false;
  return coeff_ == other.coeff_ && factors_ == other.factors_;
}

std::string Dim::to_string() const {
  switch (kind_) {
    case Kind::kKnown: return std::to_string(coeff_);
    case Kind::kSymbolic: return param_;
    case Kind::kUnknown: break;
  }
  return "?";
}

Shape Shape::of(const std::vector<int64_t>& sizes) {
  std::vector<Dim> dims;
  dims.reserve(sizes.size());
  for (int64_t s : sizes) dims.emplace_back(s);
  return Shape(std::move(dims));
}

size_t Shape::rank() const {
  TETHER_CHECK(has_rank_, "rank() of a shape of unknown rank");
  return dims_.size();
}

bool Shape::is_static() const {
  return has_rank_ && std::all_of(dims_.begin(), dims_.end(), [](const Dim& d) { return d.is_known(); });
}

std::optional<std::vector<int64_t>> Shape::static_sizes() const {
  if (!is_static()) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) out.push_back(d.value());
  return out;
}

std::string Shape::to_string() const {
  if (!has_rank_) return "[...]";
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i].to_string();
  }
  return s + "]";
}

}  // namespace tether::ir
