// What the channels-last passes share: Transposes between the ONNX layout [N, C, H, W] and
// channels last [N, H, W, C], and the cleanup of Transposes that follow each other.
#pragma once

#include <string>
#include <vector>

#include "tether/model.h"

namespace tether::passes {

/// Transpose perms from [N, C, H, W] to [N, H, W, C], and back.
inline const std::vector<int64_t> kToLast = {0, 2, 3, 1};
inline const std::vector<int64_t> kToFirst = {0, 3, 1, 2};

/// True for an ONNX Transpose with exactly `perm`.
bool is_transpose(const ir::Node* n, const std::vector<int64_t>& perm);
/// True for a value of known rank 4.
bool rank4(const ir::Value* v);
/// `t` with its dims in the order `perm` gives (unknown shape when the rank differs).
ir::ValueType permuted(const ir::ValueType& t, const std::vector<int64_t>& perm);
/// A new Transpose(perm) of `v`, named after it with `suffix`; returns its output.
ir::Value* transpose_of(ir::Graph& g, ir::Value* v, const std::vector<int64_t>& perm, const std::string& suffix);
/// Output `i` of `n` becomes channels last (its type permuted); its readers read it through a
/// Transpose back to the ONNX layout.
void output_last(ir::Graph& g, ir::Node* n, size_t i = 0);
/// True when `v` is a Transpose back from channels last (the value channels last is its input).
bool from_channels_last(const ir::Value* v);
/// Merges each Transpose of a Transpose into one Transpose of the first one's input, and
/// drops those that then undo each other (their readers read the input). Transposes whose
/// output is a graph output or kept stay. Returns the number of Transposes bypassed.
int merge_transposes(ir::Graph& g);

}  // namespace tether::passes
