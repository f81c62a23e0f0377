// Shape slots and views (ops/node_facts.h).
#include "ops/node_facts.h"

#include <string>

namespace tether::ops {

namespace {

bool onnx_domain(const ir::Node& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

}  // namespace

bool is_shape_slot(const ir::Node& n, size_t i) {
  if (!onnx_domain(n)) return false;
  const std::string& op = n.op_type();
  if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "Squeeze" || op == "Unsqueeze" || op == "Split" ||
      op == "TopK" || op == "Upsample" || op == "OneHot" || op == "CenterCropPad")
    return i == 1;
  if (op == "ConstantOfShape") return i == 0;
  if (op == "Range") return i <= 2;
  if (op == "Slice") return i >= 1;
  if (op == "Resize") return i == 2 || i == 3;
  if (op == "Pad") return i == 1 || i == 3;
  if (op.rfind("Reduce", 0) == 0) return i == 1;
  return false;
}

bool reads_dims_only(const ir::Node& n) {
  return onnx_domain(n) && (n.op_type() == "Shape" || n.op_type() == "Size");
}

bool keeps_bytes(const ir::Node& n) {
  if (!onnx_domain(n)) return false;
  const std::string& op = n.op_type();
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity";
}

}  // namespace tether::ops
