// tether/model.h: Model (a graph with its opsets and metadata) and local Functions.
//
//   tether::ir::Model m;
//   m.set_opset("", 20);
//   tether::ir::Graph& g = m.graph();
//   // ... add inputs, nodes, outputs to g ...
//   m.opset("");   // 20
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tether/graph.h"

namespace tether::ir {

/// One operator set a model or function imports.
struct OpsetImport {
  std::string domain;  ///< "" is the default ONNX domain ("ai.onnx" is written as "").
  int64_t version = 0;
};

/// A model-local function (ONNX FunctionProto). Its body is a Graph whose inputs and outputs
/// are the formal parameters (their types are unknown until the function is called).
struct Function {
  std::string name;
  std::string domain;
  std::string overload;
  std::vector<std::string> attribute_names;  ///< attributes without defaults
  std::vector<Attribute> attribute_defaults; ///< attributes with defaults
  std::vector<OpsetImport> opset_imports;
  std::string doc_string;
  Metadata metadata;
  std::unique_ptr<Graph> body = std::make_unique<Graph>();
};

/// A model: the main graph, the operator sets it imports, its local functions and metadata.
class Model {
 public:
  Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }

  /// ONNX IR version (the file format's version); 10 is written when unset.
  int64_t ir_version = 10;
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string;
  Metadata metadata;
  std::vector<OpsetImport> opset_imports;
  std::vector<Function> functions;
  /// Training graphs (ONNX TrainingInfoProto) and device configurations, kept as encoded
  /// bytes so that a load and save carries them through unchanged.
  std::vector<std::string> training_info;
  std::vector<std::string> device_configurations;

  /// Where the model was loaded from ("" when built in memory or loaded from bytes).
  std::string source_path;

  /// The imported version of `domain` ("" or "ai.onnx" for the default), or -1 if none.
  int64_t opset(std::string_view domain) const;
  /// Sets (adds or replaces) the imported version of `domain`.
  void set_opset(std::string_view domain, int64_t version);

  /// A deep copy: new graphs, nodes and values; tensors share their (copy-on-write) buffers,
  /// so cloning a large model copies no weights.
  Model clone() const;

 private:
  std::unique_ptr<Graph> graph_;
};

}  // namespace tether::ir
