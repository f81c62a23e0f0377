// ExactSum: a fixed-point accumulator over the whole double range.
#include "parity/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tether/error.h"

namespace tether::parity {

namespace {

constexpr int64_t kRadix = int64_t{1} << 32;
constexpr uint64_t kLow = 0xffffffffu;

}  // namespace

void ExactSum::add(double x) {
  if (!std::isfinite(x)) {
    special_ += x;
    return;
  }
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff);
  int64_t mantissa = static_cast<int64_t>(bits & ((uint64_t{1} << 52) - 1));
  if (exponent != 0) mantissa |= int64_t{1} << 52;
  // x = mantissa * 2^(shift - 1074), with shift in [0, 2045].
  const int shift = exponent == 0 ? 0 : exponent - 1;
  bucket_[static_cast<size_t>(shift)] += (bits >> 63) != 0 ? -mantissa : mantissa;
  lowest_ = std::min(lowest_, shift);
  highest_ = std::max(highest_, shift);
  if (++bucket_terms_ == kBucketTerms) flush();
}

void ExactSum::to_digits(int shift, uint64_t magnitude, bool negative) {
  const int at = shift / 32;
  const unsigned __int128 v = static_cast<unsigned __int128>(magnitude) << (shift % 32);
  for (int k = 0; k < 3; ++k) {
    const auto part = static_cast<int64_t>(static_cast<uint64_t>(v >> (32 * k)) & kLow);
    digit_[static_cast<size_t>(at + k)] += negative ? -part : part;
  }
  if (++pending_ >= kMaxPending) normalize();
}

// Logically const: the buckets and the digits hold one sum between them.
void ExactSum::flush() const {
  auto* self = const_cast<ExactSum*>(this);
  for (int e = lowest_; e <= highest_; ++e) {
    int64_t& b = bucket_[static_cast<size_t>(e)];
    if (b == 0) continue;
    self->to_digits(e, b < 0 ? 0 - static_cast<uint64_t>(b) : static_cast<uint64_t>(b), b < 0);
    b = 0;
  }
  bucket_terms_ = 0;
  lowest_ = kBuckets;
  highest_ = -1;
}

void ExactSum::normalize() {
  for (size_t i = 0; i + 1 < digit_.size(); ++i) {
    const int64_t low = static_cast<int64_t>(static_cast<uint64_t>(digit_[i]) & kLow);
    digit_[i + 1] += (digit_[i] - low) / kRadix;
    digit_[i] = low;
  }
  pending_ = 0;
}

void ExactSum::merge(const ExactSum& other) {
  flush();
  normalize();
  ExactSum o = other;
  o.flush();
  o.normalize();
  for (size_t i = 0; i < digit_.size(); ++i) digit_[i] += o.digit_[i];
  special_ += o.special_;
  normalize();
}

double ExactSum::value() const {
  if (!std::isfinite(special_)) return special_;
  flush();
  ExactSum s = *this;
  s.normalize();
  const bool negative = s.digit_.back() < 0;
  if (negative) {
    for (auto& d : s.digit_) d = -d;
    s.normalize();
  }
  int top = kDigits - 1;
  while (top >= 0 && s.digit_[static_cast<size_t>(top)] == 0) --top;
  if (top < 0) return 0.0;
  const int low = top >= 2 ? top - 2 : 0;
  unsigned __int128 v = 0;
  for (int i = top; i >= low; --i) v = (v << 32) | static_cast<uint64_t>(s.digit_[static_cast<size_t>(i)]);
  bool sticky = false;
  for (int i = 0; i < low; ++i) sticky = sticky || s.digit_[static_cast<size_t>(i)] != 0;
  int length = 0;
  for (unsigned __int128 t = v; t != 0; t >>= 1) ++length;
  int exponent = 32 * low - 1074;
  if (length > 53) {
    const int cut = length - 53;
    const unsigned __int128 rest = v & ((static_cast<unsigned __int128>(1) << cut) - 1);
    const unsigned __int128 half = static_cast<unsigned __int128>(1) << (cut - 1);
    v >>= cut;
    exponent += cut;
    if (rest > half || (rest == half && (sticky || (v & 1) != 0))) v += 1;
  }
  const double magnitude = std::ldexp(static_cast<double>(static_cast<uint64_t>(v)), exponent);
  return negative ? -magnitude : magnitude;
}

void ExactSum::write(std::string& out) const {
  flush();
  ExactSum s = *this;
  s.normalize();
  out.append(reinterpret_cast<const char*>(s.digit_.data()), sizeof s.digit_);
  out.append(reinterpret_cast<const char*>(&s.special_), sizeof s.special_);
}

ExactSum ExactSum::read(std::string_view& in) {
  ExactSum s;
  if (in.size() < sizeof s.digit_ + sizeof s.special_) throw ArgumentError("parity state: truncated bytes");
  std::memcpy(s.digit_.data(), in.data(), sizeof s.digit_);
  in.remove_prefix(sizeof s.digit_);
  std::memcpy(&s.special_, in.data(), sizeof s.special_);
  in.remove_prefix(sizeof s.special_);
  return s;
}

}  // namespace tether::parity
