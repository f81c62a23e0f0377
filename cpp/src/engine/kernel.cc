#include "engine/kernel.h"

#include "engine/space.h"

#include "tether/engine.h"
#include "tether/error.h"

#include <algorithm>
#include <cstring>

namespace tether::engine {

namespace {
std::string key(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return std::string(domain) + ":" + std::string(op_type);
}
}  // namespace

std::unique_ptr<Space> Backend::open(const CompileOptions&) const { return nullptr; }

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

namespace {
bool inside(const ir::Graph* g, const ir::Graph* root) {
  for (; g != nullptr; g = g->parent())
    if (g == root) return true;
  return false;
}

void collect_captures(const ir::Graph& g, const ir::Graph& root, std::vector<const ir::Value*>& out) {
  auto note = [&](const ir::Value* v) {
    if (v == nullptr || inside(v->graph(), &root) || (v->has_initializer() && !v->is_input())) return;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const ir::Node* n : g.nodes()) {
    for (const ir::Value* v : n->inputs()) note(v);
    for (const ir::Attribute& a : n->attributes()) {
      if (!a.ref_attr_name().empty()) continue;
      if (a.kind() == ir::AttrKind::kGraph) collect_captures(*a.as_graph(), root, out);
      if (a.kind() == ir::AttrKind::kGraphs)
        for (const auto& sub : a.as_graphs()) collect_captures(*sub, root, out);
    }
  }
  for (const ir::Value* v : g.outputs()) note(v);
}
}  // namespace

std::vector<const ir::Value*> captured_values(const ir::Node& node) {
  std::vector<const ir::Value*> out;
  for (const ir::Attribute& a : node.attributes()) {
    if (!a.ref_attr_name().empty()) continue;
    if (a.kind() == ir::AttrKind::kGraph) collect_captures(*a.as_graph(), *a.as_graph(), out);
    if (a.kind() == ir::AttrKind::kGraphs)
      for (const auto& sub : a.as_graphs()) collect_captures(*sub, *sub, out);
  }
  return out;
}

void AllocatingKernel::run(const RunContext& ctx, const std::vector<View>& inputs, std::vector<View>& outputs) const {
  std::vector<ir::Tensor> made = run_alloc(ctx, inputs, outputs);
  for (size_t k = 0; k < outputs.size() && k < made.size(); ++k) {
    if (outputs[k].data == nullptr || !made[k].is_valid()) continue;
    TETHER_CHECK(made[k].dims() == outputs[k].dims && made[k].dtype() == outputs[k].dtype,
                 "an allocating kernel's output differs from its planned shape");
    if (made[k].nbytes() > 0) std::memcpy(outputs[k].data, made[k].raw_data(), static_cast<size_t>(made[k].nbytes()));
  }
}

std::string require_dtype(const KernelInit& init, size_t i, std::initializer_list<ir::DType> allowed) {
  const ir::DType t = init.input_dtype(i);
  for (ir::DType a : allowed)
    if (a == t) return "";
  std::string names;
  for (ir::DType a : allowed) names += (names.empty() ? "" : ", ") + std::string(ir::dtype_name(a));
  return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(t)) + "; supported: " + names;
}

std::string RegistryBackend::supports(const KernelInit& init) const {
  const KernelRegistry::Entry* e = registry_.find(init.node.domain(), init.node.op_type());
  if (e == nullptr) return missing_;
  return e->check ? e->check(init) : "";
}

std::unique_ptr<Kernel> RegistryBackend::create(const KernelInit& init) const {
  return registry_.find(init.node.domain(), init.node.op_type())->create(init);
}

namespace {
thread_local InterruptScope* t_interrupt = nullptr;
}  // namespace

InterruptScope::InterruptScope(std::function<bool()> check, std::chrono::microseconds interval)
    : check_(std::move(check)), interval_(interval), next_(std::chrono::steady_clock::now() + interval), outer_(t_interrupt) {
  t_interrupt = this;
}

InterruptScope::~InterruptScope() { t_interrupt = outer_; }

void InterruptScope::poll() {
  InterruptScope* scope = t_interrupt;
  if (scope == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < scope->next_) return;
  scope->next_ = now + scope->interval_;
  if (scope->check_()) throw Interrupted("the run was interrupted by its caller");
}

}  // namespace tether::engine
