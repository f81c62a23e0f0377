// ExactSum: the exact sum of doubles, rounded once when read, so a sum does not depend on
// the order of its terms or on how they were split between threads, batches and processes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tether::parity {

/// An exact accumulator of doubles (a fixed-point integer over the whole double range, in
/// 32-bit digits held in int64 so that many additions need no carry). value() rounds the exact
/// sum to the nearest double, ties to even: the same bits whatever the order of add() and
/// merge() calls. Infinities and NaN are summed apart, as plain doubles (order-free too).
class ExactSum {
 public:
  void add(double x);
  void merge(const ExactSum& other);
  /// The exact sum rounded to the nearest double (subnormal sums may round twice).
  double value() const;
  /// Appends a fixed-size encoding to `out`; read() reads it back from `in`, advancing it.
  void write(std::string& out) const;
  static ExactSum read(std::string_view& in);

 private:
  // Digit i weighs 2^(32 i - 1074); 70 digits reach past 2^1100 (2^63 terms of the largest double).
  static constexpr int kDigits = 70;
  // Carries are propagated before any digit could pass 2^62.
  static constexpr int64_t kMaxPending = int64_t{1} << 29;
  // Terms first go, as signed 53-bit integers, to a bucket per binary exponent: 1024 of them fit
  // in an int64 whatever their signs, and then the touched buckets go to the digits.
  static constexpr int kBuckets = 2046;
  static constexpr int kBucketTerms = 1024;
  void to_digits(int shift, uint64_t magnitude, bool negative);
  void flush() const;
  void normalize();
  std::array<int64_t, kDigits> digit_{};
  double special_ = 0;
  int64_t pending_ = 0;
  mutable std::array<int64_t, kBuckets> bucket_{};
  mutable int bucket_terms_ = 0, lowest_ = kBuckets, highest_ = -1;
};

}  // namespace tether::parity
