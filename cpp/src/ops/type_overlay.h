// Shape inference into an overlay: the types a model's values take for one set of input
// shapes, held beside the model instead of written into it.
#pragma once

#include <cstddef>
#include <unordered_map>

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

 private:
  std::unordered_map<const ir::Value*, ir::ValueType> types_;
};

/// As infer_shapes(model, options), but every type inference reads or gives is read from and
/// written to `types`; `model` is not changed. Types `types` already holds (an input's size for
/// a run) are the starting point. Throws as infer_shapes does.
InferenceReport infer_shapes(const ir::Model& model, const InferenceOptions& options, TypeOverlay& types);

}  // namespace tether::ops
