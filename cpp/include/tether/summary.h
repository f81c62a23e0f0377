// tether/summary.h: what a model holds, counted: ops, parameters, weight bytes.
//
//   tether::ir::ModelSummary s = tether::ir::summarize(model);
//   s.num_parameters;     // elements in all initializers, subgraphs included
//   s.op_counts[0];       // {"Conv", 53}: the most frequent op first
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tether/model.h"

namespace tether::ir {

struct ModelSummary {
  /// (op, count), most frequent first, ties by name. Ops outside the default domain are
  /// written "domain:Op".
  std::vector<std::pair<std::string, int64_t>> op_counts;
  int64_t num_nodes = 0;         ///< nodes, subgraphs included
  int64_t num_initializers = 0;  ///< initializers (dense and sparse), subgraphs included
  int64_t num_parameters = 0;    ///< elements in initializers (stored values for sparse ones)
  int64_t weight_bytes = 0;      ///< bytes of initializer data (strings count their lengths)
  int64_t num_subgraphs = 0;     ///< graph-valued attributes, nested ones included
};

/// Counts what `model` holds. Never throws for a model that loaded.
ModelSummary summarize(const Model& model);

}  // namespace tether::ir
