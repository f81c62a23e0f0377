// tether/parity.h: how far apart two tensors are, computed in float64.
//
// compare() reads a reference and a candidate of the same shape and returns every number a
// parity report needs: absolute, relative and mean errors, cosine similarity, SNR, how many
// elements leave the tolerance, the worst element, and the smallest tolerance that would pass.
//
//   using namespace tether;
//   parity::Tolerance tol{.atol = 1e-5, .rtol = 1e-4, .rule = parity::ToleranceRule::kNumpy};
//   parity::Metrics m = parity::compare(reference, candidate, tol);
//   if (!m.ok) std::cout << m.mismatches << " elements out of tolerance, worst at " << m.worst_index;
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "tether/tensor.h"

namespace tether::parity {

/// When a candidate element c is close enough to its reference element r.
enum class ToleranceRule {
  /// |c - r| <= atol + rtol * |r|: numpy.allclose and numpy.testing with the reference as b.
  kNumpy,
  /// |c - r| <= atol, or |c - r| / |r| <= rtol: either bound suffices, as Polygraphy checks.
  kEither,
};

/// "numpy" or "either".
std::string_view rule_name(ToleranceRule rule);
/// The rule named "numpy" or "either" (also "polygraphy"); throws ArgumentError otherwise.
ToleranceRule rule_from_name(std::string_view name);

/// Tolerance for floating-point elements. Integer, bool and string elements always compare
/// exactly. atol and rtol must be >= 0 (compare() throws ArgumentError otherwise).
struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-5;
  ToleranceRule rule = ToleranceRule::kNumpy;
};

/// The distance between a reference and a candidate tensor.
///
/// Error statistics cover the element pairs where both values are finite. A pair where both
/// are NaN, or both are the same infinity, is equal. A pair where only one side is NaN, or
/// the infinities differ, is a mismatch whatever the tolerance ("NaN positions must match").
/// The relative error of a pair is |c - r| / |r|: 0 when both are 0, infinite when only r is.
struct Metrics {
  std::vector<int64_t> shape;   ///< the reference's dims
  int64_t elements = 0;         ///< elements compared
  bool exact = false;           ///< integers, bools or strings: compared for equality only
  double max_abs_error = 0;
  double mean_abs_error = 0;
  double max_rel_error = 0;
  /// sum(r*c) / sqrt(sum(r^2) * sum(c^2)); 1 when both are all zeros, 0 when only one is.
  double cosine = 1;
  /// 10 * log10(sum(r^2) / sum((c - r)^2)); +inf when the pair is identical.
  double snr_db = 0;
  int64_t mismatches = 0;       ///< elements out of tolerance (for exact types: unequal)
  int64_t nonfinite_mismatches = 0;  ///< of those, pairs where NaN or infinity disagree
  double mismatch_fraction = 0;  ///< mismatches / elements (0 for empty tensors)
  /// Flat index (row-major) of the worst element: a NaN/infinity disagreement first, else the
  /// element out of tolerance with the largest absolute error, else the largest absolute
  /// error overall; -1 for empty tensors.
  int64_t worst_index = -1;
  double worst_reference = 0;
  double worst_candidate = 0;
  /// The smallest atol that passes with the given rtol, and the smallest rtol that passes with
  /// the given atol, under the given rule; infinite when no value of it can pass.
  double required_atol = 0;
  double required_rtol = 0;
  /// Shapes equal, dtypes comparable and no mismatch.
  bool ok = true;
  /// Why the tensors could not be compared element by element (shape or dtype), or empty.
  std::string problem;
};

/// Compares `candidate` with `reference` under `tolerance`, in float64.
///
/// Floating-point tensors of any width (float16, bfloat16, float32, float64) compare with
/// each other; integer tensors of any width and sign compare with each other by value; bools
/// with bools; strings with strings. A shape or kind difference is not thrown: the Metrics
/// come back with ok = false and `problem` saying what differs. Complex tensors are reported
/// as a problem. Throws ArgumentError for a negative or NaN tolerance.
///
///   Metrics m = compare(ref, cand, {.atol = 1e-4, .rtol = 0});
///   // m.required_atol is the smallest atol that would have passed.
Metrics compare(const ir::Tensor& reference, const ir::Tensor& candidate, const Tolerance& tolerance = {});

/// One output compared over a dataset, batch by batch, as a state that merges exactly.
///
/// A batch's rows (axis 0; a 0-d tensor is one row) are rows [first_row, first_row + rows)
/// of the dataset. Counts and extremes are kept as they are, the sums behind the mean error,
/// the cosine and the SNR exactly (rounded once, in metrics()), and the worst element by its
/// rank, its error and then its place in the dataset. So states of shards of any size, added
/// and merged in any order, give the metrics of one pass over all rows, bit for bit, and
/// compare() of the whole tensor gives the same numbers too.
///
///   parity::CompareState a(tol), b(tol);
///   a.add(ref_rows_0_to_99, cand_rows_0_to_99, 0);
///   b.add(ref_rows_100_to_149, cand_rows_100_to_149, 100);
///   a.merge(b);                       // or merge(CompareState::from_bytes(b.to_bytes()))
///   parity::Metrics m = a.metrics();  // shape [150, ...]; worst_index flat in that shape
class CompareState {
 public:
  /// Throws ArgumentError for a negative or NaN tolerance.
  explicit CompareState(const Tolerance& tolerance = {});
  ~CompareState();
  CompareState(CompareState&&) noexcept;
  CompareState& operator=(CompareState&&) noexcept;

  /// Adds a batch (see compare() for the kinds that compare). A batch whose shapes or kinds
  /// differ is recorded as a problem at its first row; the problem at the lowest row is
  /// reported by metrics().
  void add(const ir::Tensor& reference, const ir::Tensor& candidate, int64_t first_row);
  /// Adds a batch of strings, given as one flag per element of `dims` (nonzero: different).
  void add_unequal(const std::vector<int64_t>& dims, const uint8_t* unequal, int64_t first_row);
  /// Adds another state's pairs. Throws ArgumentError when its tolerance differs.
  void merge(const CompareState& other);
  /// Moves every row by `offset`: for a state computed on a shard from row 0 whose place in
  /// the dataset is known later (other.shift_rows(rows()), then merge(other), appends it).
  void shift_rows(int64_t offset);
  /// The metrics of every pair added: shape [rows, inner dims of the first batch]; when
  /// batches differ in their inner dims, worst_index is the worst element's row.
  Metrics metrics() const;
  /// Rows added so far.
  int64_t rows() const;
  /// The worst element's row and its flat index inside the row; (-1, -1) when empty.
  std::pair<int64_t, int64_t> worst_location() const;
  /// The state as bytes (for another process), and back. from_bytes() throws ArgumentError
  /// for bytes that are not a state of this format.
  std::string to_bytes() const;
  static CompareState from_bytes(std::string_view bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tether::parity
