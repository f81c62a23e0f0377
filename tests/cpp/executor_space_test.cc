// A backend with memory of its own plugs into the executor through engine/space.h alone: the
// "mirror" backend keeps every value its kernels touch in buffers of its own (a device's memory,
// on the host), copies what crosses in and out per stretch, and runs Relu, Neg and same-shape
// Add there. Mixed with the CPU backend in one session, everything a session does (runs,
// observed values, profiles, the memory limit, kernels that refuse a plan's shapes, strict)
// must hold as on the CPU engine, whose results are the oracle.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/kernel.h"
#include "engine/space.h"
#include "tether/builder.h"
#include "tether/engine.h"
#include "tether/error.h"

namespace {

using namespace tether;
using engine::Kernel;
using engine::KernelInit;
using engine::Program;
using engine::SpacePlan;
using ir::DType;
using ir::Dim;
using ir::Shape;
using ir::Tensor;
using Dims = std::vector<int64_t>;

// A kernel of the mirror backend: it computes on the mirror's buffers, not on host memory.
class MirrorKernel final : public Kernel {
 public:
  explicit MirrorKernel(std::string op) : op(std::move(op)) {}
  // "" when it takes these shapes: Add only when both inputs have the output's dims.
  std::string refuses(const std::vector<Dims>& in, const Dims& out) const {
    if (op == "Add" && (in[0] != out || in[1] != out)) return "Add takes equal shapes only";
    return "";
  }
  void run(const std::vector<const std::vector<float>*>& in, std::vector<float>& out) const {
    for (size_t i = 0; i < out.size(); ++i) {
      const float x = (*in[0])[i];
      out[i] = op == "Relu" ? (x > 0 ? x : 0.0f) : op == "Neg" ? -x : x + (*in[1])[i];
    }
  }
  std::string op;
};

class MirrorSpace;

// One plan: which steps run in the mirror, a buffer per value they touch, and the copies.
class MirrorPlan final : public SpacePlan {
 public:
  MirrorPlan(const MirrorSpace& space, std::vector<Dims> dims, bool capture);
  const std::vector<Stretch>& stretches() const override { return stretches_; }
  bool on_device(size_t step) const override { return on_device_[step]; }
  std::string refused(size_t step) const override { return refused_[step]; }
  bool captured(size_t value) const override { return captured_[value]; }
  int64_t device_bytes() const override { return bytes_; }
  std::string device_bytes_text() const override { return "mirror buffers " + std::to_string(bytes_); }
  void realize() override {
    for (size_t v = 0; v < mem_.size(); ++v)
      if (touched_[v]) mem_[v].assign(static_cast<size_t>(numel(v)), 0.0f);
    realized_ = true;
  }
  void stats(engine::MemoryStats& m) const override { m.arena_bytes = bytes_; }
  void run(size_t stretch, const std::vector<void*>& data, std::vector<std::pair<int, int64_t>>& times) override;

 private:
  int64_t numel(size_t v) const {
    int64_t n = 1;
    for (int64_t d : dims_[v]) n *= d;
    return n;
  }
  const MirrorSpace& space_;
  std::vector<Dims> dims_;
  std::vector<Stretch> stretches_;
  std::vector<bool> on_device_, captured_, touched_, host_needs_;
  std::vector<std::string> refused_;
  std::vector<std::vector<float>> mem_;
  int64_t bytes_ = 0;
  bool realized_ = false;
};

class MirrorSpace final : public engine::Space {
 public:
  explicit MirrorSpace(bool strict) : strict(strict) {}
  std::unique_ptr<Kernel> create(const KernelInit& init, std::string& why) override {
    auto k = std::make_unique<MirrorKernel>(init.node.op_type());
    std::vector<Dims> in;
    for (const ir::ValueType& t : init.input_types) {
      auto d = t.shape().static_sizes();
      if (!d) return k;  // plans ask again
      in.push_back(*d);
    }
    auto out = init.output_types[0].shape().static_sizes();
    if (out) why = k->refuses(in, *out);
    return why.empty() ? std::move(k) : nullptr;
  }
  bool reads_input(const Kernel&, size_t) const override { return true; }
  void finish(const Program& p) override { program = p; }
  std::string report(const Program& p) const override {
    int kernels = 0;
    for (const engine::ProgramStep& s : p.steps) kernels += s.kernel != nullptr;
    return "mirror: " + std::to_string(kernels) + " kernels in its own memory\n";
  }
  std::unique_ptr<SpacePlan> plan(const std::vector<Dims>& dims, bool capture) const override {
    return std::make_unique<MirrorPlan>(*this, dims, capture);
  }
  void check_usable() const override {}
  void drain() override {}
  bool profiled(const Kernel&) const override { return true; }
  void stats(engine::MemoryStats&) const override {}

  bool strict;
  Program program;
};

MirrorPlan::MirrorPlan(const MirrorSpace& space, std::vector<Dims> dims, bool capture) : space_(space), dims_(std::move(dims)) {
  const Program& p = space.program;
  const size_t nv = p.values.size(), ns = p.steps.size();
  on_device_.assign(ns, false);
  refused_.assign(ns, "");
  captured_.assign(nv, false);
  touched_.assign(nv, false);
  host_needs_.assign(nv, false);
  mem_.resize(nv);
  for (size_t s = 0; s < ns; ++s) {
    const engine::ProgramStep& step = p.steps[s];
    if (step.kernel == nullptr) continue;
    std::vector<Dims> in;
    for (int v : step.inputs) in.push_back(dims_[static_cast<size_t>(v)]);
    const std::string why = static_cast<const MirrorKernel*>(step.kernel)->refuses(in, dims_[static_cast<size_t>(step.outputs[0])]);
    if (!why.empty() && space.strict) throw UnsupportedError("strict: mirror refuses " + step.node->describe() + ": " + why);
    refused_[s] = why;
    on_device_[s] = why.empty();
  }
  for (size_t s = 0; s < ns; ++s) {
    if (stretches_.empty() || stretches_.back().device != on_device_[s]) stretches_.push_back({static_cast<int>(s), 0, on_device_[s]});
    stretches_.back().end = static_cast<int>(s) + 1;
    const engine::ProgramStep& step = p.steps[s];
    for (int v : step.inputs) {
      if (v < 0) continue;
      if (on_device_[s]) touched_[static_cast<size_t>(v)] = true;
      else if (!step.dims_only) host_needs_[static_cast<size_t>(v)] = true;  // read on the host
    }
    if (on_device_[s]) touched_[static_cast<size_t>(step.outputs[0])] = true;
  }
  for (size_t v = 0; v < nv; ++v) {
    const engine::ProgramValue& e = p.values[v];
    const bool written_here = e.producer >= 0 && on_device_[static_cast<size_t>(e.producer)];
    captured_[v] = capture && written_here && e.output < 0;
    host_needs_[v] = written_here && (host_needs_[v] || e.output >= 0 || captured_[v]);
    if (touched_[v]) bytes_ += numel(v) * 4;
  }
}

void MirrorPlan::run(size_t stretch, const std::vector<void*>& data, std::vector<std::pair<int, int64_t>>& times) {
  EXPECT_TRUE(realized_) << "a plan ran before realize()";
  const Program& p = space_.program;
  const Stretch& st = stretches_[stretch];
  for (int s = st.begin; s < st.end; ++s) {
    const engine::ProgramStep& step = p.steps[static_cast<size_t>(s)];
    std::vector<const std::vector<float>*> in;
    for (int v : step.inputs) {
      const auto i = static_cast<size_t>(v);
      const engine::ProgramValue& e = p.values[i];
      if (e.producer < 0 || !on_device_[static_cast<size_t>(e.producer)])  // up from the host
        std::memcpy(mem_[i].data(), data[i], mem_[i].size() * sizeof(float));
      in.push_back(&mem_[i]);
    }
    const auto o = static_cast<size_t>(step.outputs[0]);
    const auto t0 = std::chrono::steady_clock::now();
    static_cast<const MirrorKernel*>(step.kernel)->run(in, mem_[o]);
    times.emplace_back(s, std::max<int64_t>(1, (std::chrono::steady_clock::now() - t0).count()));
    if (host_needs_[o]) std::memcpy(data[o], mem_[o].data(), mem_[o].size() * sizeof(float));  // down to the host
  }
}

// The mirror backend: float32 Relu, Neg and Add.
class MirrorBackend final : public engine::Backend {
 public:
  std::string_view name() const override { return "mirror"; }
  std::string supports(const KernelInit& init) const override {
    const std::string& op = init.node.op_type();
    if (!init.node.domain().empty() || (op != "Relu" && op != "Neg" && op != "Add")) return "no mirror kernel for this op";
    for (size_t i = 0; i < init.input_types.size(); ++i)
      if (init.input_dtype(i) != DType::kFloat32) return "input " + std::to_string(i) + " is not float32";
    return "";
  }
  std::unique_ptr<Kernel> create(const KernelInit& init) const override {
    return std::make_unique<MirrorKernel>(init.node.op_type());
  }
  std::vector<std::string> op_types() const override { return {":Add", ":Neg", ":Relu"}; }
  std::unique_ptr<engine::Space> open(const engine::CompileOptions& options) const override {
    return std::make_unique<MirrorSpace>(options.strict);
  }
};

const MirrorBackend& mirror() {
  static const MirrorBackend backend;
  return backend;
}

std::unique_ptr<engine::Session> on_mirror(const ir::Model& m, engine::CompileOptions o = {}) {
  o.threads = 1;
  o.optimize = false;
  return engine::compile_on(m, o, {&mirror(), &engine::cpu_backend()});
}

Tensor filled(Dims dims, float offset) {
  Tensor t = Tensor::zeros(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = std::sin(0.9f * static_cast<float>(i) + offset);
  return t;
}

// x[b, 6] -> Relu (mirror) -> Tanh (cpu) -> Add(tanh, relu) (mirror) -> Neg (mirror) -> y
ir::Model chain() {
  GraphBuilder b("chain");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("batch"), Dim(6)}));
  b.node("Relu", {"x"}, {}, {.name = "act", .outputs = {"act"}});
  b.node("Tanh", {"act"}, {}, {.name = "squash", .outputs = {"squash"}});
  b.node("Add", {"squash", "act"}, {}, {.name = "sum", .outputs = {"sum"}});
  b.node("Neg", {"sum"}, {}, {.name = "flip", .outputs = {"y"}});
  b.output("y");
  return b.build();
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i)
    EXPECT_FLOAT_EQ(got.data<float>()[i], want.data<float>()[i]) << what << ", element " << i;
}

TEST(ExecutorSpace, ABackendWithItsOwnMemoryRunsBesideTheCpuAndMatchesIt) {
  const ir::Model m = chain();
  auto mixed = on_mirror(m);
  auto cpu = engine::compile(m, {.threads = 1, .optimize = false});
  std::vector<std::string> placed;
  for (const engine::StepInfo& s : mixed->steps()) placed.push_back(s.name + "@" + s.backend);
  EXPECT_EQ(placed, (std::vector<std::string>{"act@mirror", "squash@cpu", "sum@mirror", "flip@mirror"}));
  EXPECT_NE(mixed->report().find("mirror: 3 kernels in its own memory"), std::string::npos) << mixed->report();
  for (int64_t batch : {1, 4, 9}) {
    const Tensor x = filled({batch, 6}, static_cast<float>(batch));
    expect_equal(mixed->run({{"x", x}})[0], cpu->run({{"x", x}})[0], "batch " + std::to_string(batch));
  }
  EXPECT_EQ(mixed->memory().plans, 3);
}

TEST(ExecutorSpace, ObservedValuesComeDownFromTheSpaceAndMatchTheCpus) {
  const ir::Model m = chain();
  auto mixed = on_mirror(m);
  auto cpu = engine::compile(m, {.threads = 1, .optimize = false});
  const Tensor x = filled({3, 6}, 0.5f);
  std::vector<std::pair<std::string, Tensor>> got, want;
  mixed->run_capture({{"x", x}}, {"act", "sum"}, got);
  cpu->run_capture({{"x", x}}, {"act", "sum"}, want);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(want.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k].first, want[k].first);
    expect_equal(got[k].second, want[k].second, got[k].first);
  }
  std::vector<std::string> seen;
  mixed->run_observe({{"x", x}}, {"x", "sum"}, [&](const engine::ObservedValue& o) { seen.push_back(o.name); });
  EXPECT_EQ(seen, (std::vector<std::string>{"x", "sum"}));
}

TEST(ExecutorSpace, ProfilesListEachDeviceStretchThenItsSteps) {
  auto mixed = on_mirror(chain(), {.profile = true});
  for (int k = 0; k < 2; ++k) mixed->run({{"x", filled({2, 6}, 0.0f)}});
  std::vector<std::string> ops;
  for (const engine::NodeProfile& p : mixed->profile()) {
    ops.push_back(p.op_type);
    EXPECT_EQ(p.runs, 2) << p.name;
    EXPECT_GT(p.seconds, 0) << p.name;
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"mirror:segment", "Relu", "Tanh", "mirror:segment", "Add", "Neg"}));
}

TEST(ExecutorSpace, TheMemoryLimitCountsTheSpacesBytes) {
  auto mixed = on_mirror(chain(), {.max_memory = 4096});
  mixed->run({{"x", filled({4, 6}, 0.0f)}});
  try {
    mixed->run({{"x", filled({100, 6}, 0.0f)}});  // 2.4 KB a value: the mirror's buffers pass the limit
    FAIL() << "a run past max_memory";
  } catch (const MemoryLimitError& e) {
    EXPECT_NE(std::string(e.what()).find("mirror buffers"), std::string::npos) << e.what();
  }
  mixed->run({{"x", filled({2, 6}, 0.0f)}});  // the session stays usable
}

// y = a + b with a [n, 4], b [m, 4]: the mirror takes it when n == m, the CPU broadcasts otherwise.
ir::Model broadcast_add() {
  GraphBuilder b("badd");
  b.input("a", DType::kFloat32, Shape({Dim::symbol("n"), Dim(4)}));
  b.input("b", DType::kFloat32, Shape({Dim::symbol("m"), Dim(4)}));
  b.node("Add", {"a", "b"}, {}, {.name = "add", .outputs = {"y"}});
  b.output("y");
  return b.build();
}

TEST(ExecutorSpace, AStepWhoseKernelRefusesAPlansShapesRunsOnTheHostInThatPlan) {
  const ir::Model m = broadcast_add();
  auto mixed = on_mirror(m);
  auto cpu = engine::compile(m, {.threads = 1, .optimize = false});
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3, 3}, {3, 1}, {1, 5}, {2, 2}}) {
    const Tensor a = filled({n, 4}, 1.0f), b = filled({k, 4}, 2.0f);
    expect_equal(mixed->run({{"a", a}, {"b", b}})[0], cpu->run({{"a", a}, {"b", b}})[0],
                 std::to_string(n) + " + " + std::to_string(k));
  }
  auto strict = on_mirror(m, {.strict = true});
  strict->run({{"a", filled({2, 4}, 0.0f)}, {"b", filled({2, 4}, 1.0f)}});
  EXPECT_THROW(strict->run({{"a", filled({2, 4}, 0.0f)}, {"b", filled({1, 4}, 1.0f)}}), UnsupportedError);
}

TEST(ExecutorSpace, ANodeThatSizesItsOutputsFromDataIsRefusedWithASpace) {
  GraphBuilder b("nz");
  b.input("x", DType::kFloat32, Shape({Dim(5)}));
  auto r = b.node("Relu", {"x"}, {}, {.name = "act"});
  b.node("NonZero", {r[0]}, {}, {.name = "where", .outputs = {"y"}});
  b.output("y");
  try {
    on_mirror(b.build());
    FAIL() << "compiled a NonZero beside a space";
  } catch (const UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mirror backend needs every shape to follow from the input shapes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NonZero 'where'"), std::string::npos) << msg;
  }
}

}  // namespace
