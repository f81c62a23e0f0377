#include "engine/kernel.h"

#include <algorithm>

namespace tether::engine {

namespace {
std::string key(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return std::string(domain) + ":" + std::string(op_type);
}
}  // namespace

void KernelRegistry::add(std::string_view op_type, KernelFactory create, SupportCheck check, std::string_view domain) {
  entries_[key(domain, op_type)] = {create, check};
}

const KernelRegistry::Entry* KernelRegistry::find(std::string_view domain, std::string_view op_type) const {
  auto it = entries_.find(key(domain, op_type));
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::op_types() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

std::string require_dtype(const KernelInit& init, size_t i, std::initializer_list<ir::DType> allowed) {
  const ir::DType t = init.input_dtype(i);
  for (ir::DType a : allowed)
    if (a == t) return "";
  std::string names;
  for (ir::DType a : allowed) names += (names.empty() ? "" : ", ") + std::string(ir::dtype_name(a));
  return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(t)) + "; supported: " + names;
}

}  // namespace tether::engine
