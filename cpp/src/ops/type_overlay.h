// Shape inference into an overlay: the types a model's values take for one set of input
// shapes, held beside the model instead of written into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ops/infer_context.h"
#include "tether/model.h"
#include "tether/shape_inference.h"

namespace tether::ops {

/// Value types held beside a model instead of on its values. A session infers shapes again for
/// each set of input shapes it plans for; into an overlay it does so without a copy of the
/// model per plan (the copy cost more than the inference and the plan together) and without
/// writing the model that concurrent runs read. Only types that differ from the model's own are
/// held, so a model whose shapes were all known at compile leaves the overlay nearly empty.
class TypeOverlay {
 public:
  /// The type of `v` here, or the model's own when the overlay holds none for it.
  const ir::ValueType& type_of(const ir::Value& v) const {
    auto it = types_.find(&v);
    return it == types_.end() ? v.type() : it->second;
  }
  /// Sets the type of `v` here. A type that is the model's own static tensor type is not held.
  void set(const ir::Value& v, ir::ValueType type);
  /// How many values have a type of their own here.
  size_t size() const { return types_.size(); }
  /// True when `v` has a type of its own here.
  bool holds(const ir::Value& v) const { return types_.count(&v) != 0; }

 private:
  std::unordered_map<const ir::Value*, ir::ValueType> types_;
};

/// What one inference into an overlay found, kept so that the next inference of the same model
/// redoes only what the change of inputs reaches: a node whose inputs have the types, tracked
/// shape values and constants they had last time gets the outputs it got last time without its
/// rule running. A decoding step, whose cache is one longer each time, so re-infers the
/// attention nodes and not the projections and MLPs. Owned by one caller, which serialises its
/// use; the model and the options must be the same on every use (a session keeps one).
struct InferenceMemo {
  bool valid = false;  ///< holds a run (false: the next run infers every node)
  TypeOverlay types;   ///< the types the last run gave (where that run leaves them)
  std::vector<ir::Node*> order;  ///< the graph's nodes in topological order (the model does not change)
  int bodies = -1;               ///< whether some node has a graph attribute (-1: not looked yet)
  /// Per graph input: the bytes of its value when the run knew it (a shape tensor), else empty.
  std::unordered_map<const ir::Value*, std::vector<std::byte>> input_bytes;
  std::unordered_map<const ir::Value*, std::vector<SymInt>> shape_values;  ///< tracked shape values
  std::unordered_map<const ir::Value*, std::shared_ptr<const ir::Tensor>> constants;  ///< made by inference
  int64_t nodes_reused = 0;    ///< last run: nodes whose outputs came from the memo
  int64_t nodes_inferred = 0;  ///< last run: nodes whose rule ran
};

/// As infer_shapes(model, options), but every type inference reads or gives is read from and
/// written to `types`; `model` is not changed. Types `types` already holds (an input's size for
/// a run) are the starting point. Throws as infer_shapes does.
InferenceReport infer_shapes(const ir::Model& model, const InferenceOptions& options, TypeOverlay& types);

/// As above, starting from what `memo` holds of the previous run and leaving this run's there.
/// `types` holds the inputs' types on entry; the run's types are left in `memo.types` (the same
/// types a run without the memo gives) and `types` is left empty: no copy of the overlay per run.
/// The memo is used only when `options` pins no node outputs, the graph has no subgraphs and
/// `types` holds the inputs' types alone; otherwise every node is inferred. When this throws, the memo is emptied (the next run infers
/// every node).
///
///   ops::InferenceMemo memo;
///   for (each run's input sizes) {
///     ops::TypeOverlay t;  // the inputs' types set in it
///     infer_shapes(m, opts, t, memo);
///     use(memo.types.type_of(*value));
///   }
InferenceReport infer_shapes(const ir::Model& model, const InferenceOptions& options, TypeOverlay& types,
                             InferenceMemo& memo);

}  // namespace tether::ops
