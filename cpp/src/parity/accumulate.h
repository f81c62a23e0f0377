// What compare() and CompareState share: element kinds, and the accumulator of one pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parity/exact_sum.h"
#include "tether/parity.h"

namespace tether::parity::detail {

enum class Kind { kFloat, kInteger, kBool, kString, kOther };

Kind kind_of(ir::DType t);
std::string dims_text(const std::vector<int64_t>& d);

/// Where an element lies in a dataset: its row (sample along axis 0) and its flat index
/// inside the row. Ordered row-major, which is the order of a single pass.
struct Location {
  int64_t row = -1;
  int64_t inner = -1;
  bool operator<(const Location& o) const { return row != o.row ? row < o.row : inner < o.inner; }
};

/// Counts, extremes and exact sums over element pairs. Every field is order-free (counts,
/// maxima, exact sums, the worst element chosen by rank, error and then location), so two
/// accumulators merge into the one a single pass over both would have given.
struct Accumulator {
  Tolerance tol;
  bool exact = false;    // integers, bools, strings: equality only
  bool strings = false;  // strings: no numeric errors at all
  int64_t elements = 0, finite = 0, mismatches = 0, nonfinite = 0;
  ExactSum sum_abs, sum_rr, sum_cc, sum_rc, sum_dd;
  double max_abs = 0, max_rel = 0, need_atol = 0, need_rtol = 0;
  // The worst element: rank 2 = NaN/inf disagreement, 1 = out of tolerance, 0 = in tolerance.
  int worst_rank = -1;
  double worst_abs = -1;
  Location worst;
  double worst_r = 0, worst_c = 0;

  void consider(int rank, double abs, Location at, double r, double c);
  /// `equal` is the exact verdict for integer pairs (ignored for floats).
  void add(double r, double c, Location at, bool equal);
  /// Every element pair of two tensors of one shape and kind; element i lies at
  /// (first_row + i / inner, i % inner).
  void add_tensors(const ir::Tensor& reference, const ir::Tensor& candidate, int64_t first_row, int64_t inner);
  /// String pairs, given as one flag per element (nonzero: the strings differ).
  void add_unequal(const uint8_t* unequal, int64_t n, int64_t first_row, int64_t inner);
  void merge(const Accumulator& o);
  /// Every metric but shape, elements, worst_index and problem.
  void finish(Metrics& m) const;
};

}  // namespace tether::parity::detail
