#include "tether/model.h"

namespace tether::ir {

namespace {
bool same_domain(std::string_view a, std::string_view b) {
  auto norm = [](std::string_view d) { return d == "ai.onnx" ? std::string_view() : d; };
  return norm(a) == norm(b);
}
}  // namespace

Model::Model() : graph_(std::make_unique<Graph>("main")) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

int64_t Model::opset(std::string_view domain) const {
  for (const OpsetImport& o : opset_imports)
    if (same_domain(o.domain, domain)) return o.version;
  return -1;
}

void Model::set_opset(std::string_view domain, int64_t version) {
  for (OpsetImport& o : opset_imports)
    if (same_domain(o.domain, domain)) {
      o.version = version;
      return;
    }
  opset_imports.push_back({std::string(domain), version});
}

}  // namespace tether::ir
