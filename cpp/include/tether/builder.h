// tether/builder.h: GraphBuilder, which writes an ONNX model node by node and checks each
// node as it is added.
//
// Every call validates at once: an input that names no value, a duplicate name, an op ONNX
// does not have, an attribute of the wrong kind, or shapes and element types that do not fit
// the op (found by running the op's shape-inference rule on the types known so far) throw
// before the node is kept, with a message that names the node and the input concerned. The
// builder is left as it was before the failing call.
//
//   using namespace tether;
//   GraphBuilder b("mlp");
//   b.input("x", ir::DType::kFloat32, ir::Shape({ir::Dim::symbol("batch"), ir::Dim(784)}));
//   b.initializer("w", ir::Tensor::zeros(ir::DType::kFloat32, {784, 10}));
//   std::string y = b.node("MatMul", {"x", "w"}, {}, {.name = "fc"})[0];
//   b.shape(y).to_string();       // "[batch, 10]"
//   b.output(y);
//   ir::Model m = b.build();      // or b.save("mlp.onnx")
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tether/attribute.h"
#include "tether/model.h"
#include "tether/onnx.h"
#include "tether/tensor.h"
#include "tether/type.h"

namespace tether::ops {

/// The ONNX opset a GraphBuilder imports when none is given.
inline constexpr int64_t kDefaultBuilderOpset = 17;

/// Optional parts of GraphBuilder::node().
struct NodeOptions {
  /// Node name; "" gives "<op_type>_<k>", unique in the graph.
  std::string name;
  /// Operator set domain: "" (or "ai.onnx") for ONNX ops, anything else for custom ops.
  std::string domain;
  /// How many outputs to create when `outputs` is empty. Names are "<node name>_output_<i>".
  size_t num_outputs = 1;
  /// Output value names, in order; "" omits an optional output. Overrides num_outputs.
  std::vector<std::string> outputs;
};

/// Builds a model from inputs, initializers and nodes, validating each step.
class GraphBuilder {
 public:
  /// A builder for a graph called `graph_name`. `opsets` maps domain ("" or "ai.onnx" for
  /// ONNX) to version; the ONNX domain defaults to kDefaultBuilderOpset. Throws
  /// ArgumentError for a version < 1.
  explicit GraphBuilder(std::string graph_name = "main", const std::map<std::string, int64_t>& opsets = {});
  ~GraphBuilder();
  GraphBuilder(GraphBuilder&&) noexcept;
  GraphBuilder& operator=(GraphBuilder&&) noexcept;
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  /// Adds a graph input of `dtype` and `shape` (dims may be symbolic: Dim::symbol("batch")).
  /// Returns its name. Throws ArgumentError for an empty name or an undefined dtype,
  /// GraphError when the name is taken.
  std::string input(std::string name, ir::DType dtype, ir::Shape shape);

  /// Adds a constant tensor (a weight) called `name`. Returns its name. Throws ArgumentError
  /// for an empty name or a tensor without data, GraphError when the name is taken.
  std::string initializer(std::string name, ir::Tensor tensor);
  /// A 1-D int64 initializer (Reshape targets, axes, pads).
  std::string initializer_ints(std::string name, const std::vector<int64_t>& values);
  /// A float32 scalar initializer.
  std::string initializer_scalar(std::string name, float value);

  /// Adds a node reading the values named `inputs` ("" for an omitted optional input) and
  /// returns its output names. Throws, leaving the builder unchanged:
  /// - GraphError: an input names no value; the node name or an output name is taken;
  /// - ArgumentError: an empty op type, an ONNX op tether does not know (use a domain of
  ///   your own for custom ops), a repeated attribute, an attribute of the wrong kind;
  /// - ShapeError: input shapes or element types the op cannot take (message: node, both
  ///   types, the dims that differ).
  std::vector<std::string> node(const std::string& op_type, const std::vector<std::string>& inputs,
                                std::vector<ir::Attribute> attributes = {}, NodeOptions options = {});

  /// Marks the value `name` as a graph output; its type is the inferred one. Throws
  /// GraphError when no value has that name, ArgumentError when it is an output already.
  void output(const std::string& name);

  /// The type inferred for value `name` ("?" parts where inference could not tell, as after
  /// a custom op). Throws ArgumentError when no value has that name.
  const ir::ValueType& type(const std::string& name) const;
  /// The shape of value `name`; same errors as type().
  const ir::Shape& shape(const std::string& name) const;

  /// A copy of the model built so far (weights shared, not copied): validated, shapes
  /// inferred, producer "tether". Throws GraphError when no output was marked.
  ir::Model build() const;
  /// build(), then save_model() with `options`. Same errors as both.
  ir::SaveResult save(const std::string& path, const ir::SaveOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tether::ops

namespace tether {
using ops::GraphBuilder;
using ops::NodeOptions;
}  // namespace tether
