// Graph rewrites applied before compiling. Each pass keeps what the graph computes; each
// returns how many rewrites it made.
#pragma once

#include <string>

#include "tether/model.h"

namespace tether::passes {

/// Removes Identity nodes (and inference-mode Dropout, whose mask nobody reads) by pointing
/// their readers at their input. Nodes whose output is a graph output stay.
int remove_identities(ir::Graph& graph);

/// Removes nodes none of whose outputs is read or is a graph output, until none is left.
int remove_dead_nodes(ir::Graph& graph);

/// Runs every pass in order; returns a one-line-per-pass report.
std::string optimize(ir::Model& model);

}  // namespace tether::passes
