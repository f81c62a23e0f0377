// A third backend plugs into the executor without touching it: a small reference backend
// (plain loops over host memory, its own name) is registered from this test, mixed with the CPU
// backend in one session, and its results are checked against the CPU backend's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backends.h"
#include "engine/executor.h"
#include "engine/kernel.h"
#include "tether/builder.h"
#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"

namespace {

using namespace tether;
using engine::Backend;
using engine::HostKernel;
using engine::Kernel;
using engine::KernelInit;
using engine::RunContext;
using engine::View;
using ir::DType;
using ir::Dim;
using ir::Shape;
using ir::Tensor;

// Offset into a tensor of `dims` for the output index `at` of `out_dims`, numpy broadcasting.
int64_t broadcast_offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims, int64_t at) {
  int64_t offset = 0, stride = 1;
  for (size_t k = out_dims.size(); k-- > 0;) {
    const int64_t i = at % out_dims[k];
    at /= out_dims[k];
    const size_t back = out_dims.size() - 1 - k;
    if (back >= dims.size()) continue;
    const int64_t d = dims[dims.size() - 1 - back];
    offset += (d == 1 ? 0 : i) * stride;
    stride *= d;
  }
  return offset;
}

class Binary final : public HostKernel {
 public:
  explicit Binary(std::string op) : op_(std::move(op)) {}
  void run(const RunContext&, const std::vector<View>& in, std::vector<View>& out) const override {
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const double a = in[0].as<float>()[broadcast_offset(in[0].dims, out[0].dims, i)];
      const double b = in[1].as<float>()[broadcast_offset(in[1].dims, out[0].dims, i)];
      out[0].as<float>()[i] = static_cast<float>(op_ == "Add"   ? a + b
                                                 : op_ == "Sub" ? a - b
                                                 : op_ == "Mul" ? a * b
                                                                : a / b);
    }
  }

 private:
  std::string op_;
};

class Unary final : public HostKernel {
 public:
  explicit Unary(std::string op) : op_(std::move(op)) {}
  double apply(double x) const {
    if (op_ == "Relu") return x > 0 ? x : 0.0;
    if (op_ == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (op_ == "Neg") return -x;
    if (op_ == "Abs") return std::fabs(x);
    if (op_ == "Exp") return std::exp(x);
    if (op_ == "Tanh") return std::tanh(x);
    return std::sqrt(x);
  }
  void run(const RunContext&, const std::vector<View>& in, std::vector<View>& out) const override {
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      out[0].as<float>()[i] = static_cast<float>(apply(in[0].as<float>()[i]));
    }
  }

 private:
  std::string op_;
};

// [m, k] x [k, n], accumulated in float64.
class MatMul2d final : public HostKernel {
 public:
  void run(const RunContext&, const std::vector<View>& in, std::vector<View>& out) const override {
    const int64_t m = in[0].dims[0], k = in[0].dims[1], n = in[1].dims[1];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += double{in[0].as<float>()[i * k + p]} * in[1].as<float>()[p * n + j];
        out[0].as<float>()[i * n + j] = static_cast<float>(acc);
      }
  }
};

// The test's backend: float32 Add, Sub, Mul, Div, Relu, Sigmoid, Neg, Abs, Exp, Tanh, Sqrt and
// 2-D MatMul, nothing else; a unary op only on its own shape (no views, no strides).
class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string supports(const KernelInit& init) const override {
    const std::string& op = init.node.op_type();
    if (!init.node.domain().empty() || !is_op(op)) return "no reference kernel for this op";
    for (size_t i = 0; i < init.input_types.size(); ++i)
      if (init.input_dtype(i) != DType::kFloat32) return "input " + std::to_string(i) + " is not float32";
    if (op == "MatMul")
      for (size_t i = 0; i < 2; ++i)
        if (!init.input_types[i].shape().has_rank() || init.input_types[i].shape().rank() != 2)
          return "input " + std::to_string(i) + " is not of rank 2";
    return "";
  }
  std::unique_ptr<Kernel> create(const KernelInit& init) const override {
    const std::string& op = init.node.op_type();
    if (op == "MatMul") return std::make_unique<MatMul2d>();
    if (is_unary(op)) return std::make_unique<Unary>(op);
    return std::make_unique<Binary>(op);
  }
  std::vector<std::string> op_types() const override {
    return {":Abs", ":Add", ":Div", ":Exp", ":MatMul", ":Mul", ":Neg", ":Relu", ":Sigmoid", ":Sqrt", ":Sub", ":Tanh"};
  }

 private:
  static bool is_unary(const std::string& op) {
    return op == "Relu" || op == "Sigmoid" || op == "Neg" || op == "Abs" || op == "Exp" || op == "Tanh" || op == "Sqrt";
  }
  static bool is_op(const std::string& op) {
    return is_unary(op) || op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "MatMul";
  }
};

const ReferenceBackend& reference_backend() {
  static const ReferenceBackend backend;
  return backend;
}

// The "reference" device: the reference backend first, the CPU backend for everything else.
class ReferenceDevice final : public engine::DeviceBackend {
 public:
  std::string_view name() const override { return "reference"; }
  bool claims(std::string_view device) const override { return device == "reference"; }
  std::string device_forms() const override { return "reference"; }
  std::vector<engine::DeviceInfo> devices() const override {
    engine::DeviceInfo d;
    d.device = d.backend = d.name = "reference";
    d.type = "cpu";
    return {d};
  }
  std::vector<std::string> op_types() const override { return reference_backend().op_types(); }
  std::unique_ptr<engine::Session> compile(const ir::Model& model, const engine::CompileOptions& options) const override {
    return engine::compile_on(model, options, {&reference_backend(), &engine::cpu_backend()});
  }
};

void register_once() {
  static const ReferenceDevice device;
  static const bool done = (engine::register_device_backend(device), true);
  (void)done;
}

Tensor filled(std::vector<int64_t> dims, float scale, float offset) {
  Tensor t = Tensor::zeros(DType::kFloat32, std::move(dims));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = scale * std::sin(0.7f * static_cast<float>(i) + offset);
  return t;
}

// x[b, 5] -> MatMul -> Add -> Relu -> Softmax (the CPU's) -> Mul -> Sigmoid -> Reshape -> y
ir::Model mixed_model() {
  GraphBuilder b("mixed");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("batch"), Dim(5)}));
  b.initializer("w", filled({5, 7}, 0.5f, 0.1f));
  b.initializer("bias", filled({7}, 0.2f, 1.3f));
  b.initializer("scale", filled({1, 7}, 3.0f, 0.4f));
  Tensor shape = Tensor::zeros(DType::kInt64, {1});
  shape.mutable_data<int64_t>()[0] = -1;
  b.initializer("shape", shape);
  auto h = b.node("MatMul", {"x", "w"}, {}, {.name = "fc"});
  auto a = b.node("Add", {h[0], "bias"}, {}, {.name = "fc.bias"});
  auto r = b.node("Relu", {a[0]}, {}, {.name = "act"});
  auto s = b.node("Softmax", {r[0]}, {ir::Attribute::i("axis", 1)}, {.name = "soft"});
  auto m = b.node("Mul", {s[0], "scale"}, {}, {.name = "gain"});
  auto g = b.node("Sigmoid", {m[0]}, {}, {.name = "gate"});
  b.node("Reshape", {g[0], "shape"}, {}, {.name = "flat", .outputs = {"y"}});
  b.output("y");
  return b.build();
}

TEST(ExecutorBackend, ARegisteredBackendRunsBesideTheCpuAndMatchesIt) {
  register_once();
  const ir::Model model = mixed_model();
  auto mixed = engine::compile(model, {.device = "reference", .threads = 1, .optimize = false});
  auto cpu = engine::compile(model, {.threads = 1, .optimize = false});

  std::vector<std::string> backends;
  for (const engine::StepInfo& s : mixed->steps()) backends.push_back(s.name + "@" + s.backend);
  EXPECT_EQ(backends, (std::vector<std::string>{"fc@reference", "fc.bias@reference", "act@reference", "soft@cpu",
                                                "gain@reference", "gate@reference", "flat@cpu"}));
  EXPECT_NE(mixed->report().find("reference: 5 kernels"), std::string::npos) << mixed->report();

  for (int64_t batch : {1, 3, 13}) {
    const Tensor x = filled({batch, 5}, 1.5f, 0.3f * static_cast<float>(batch));
    const Tensor got = mixed->run({{"x", x}})[0];
    const Tensor want = cpu->run({{"x", x}})[0];
    ASSERT_EQ(got.dims(), want.dims());
    ASSERT_EQ(got.dims(), (std::vector<int64_t>{batch * 7}));
    for (int64_t i = 0; i < want.num_elements(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << "batch " << batch << ", element " << i;
  }
}

TEST(ExecutorBackend, ARegisteredBackendIsListedLikeTheBuiltInOnes) {
  register_once();
  EXPECT_EQ(engine::supported_ops("reference"),
            (std::vector<std::string>{":Abs", ":Add", ":Constant", ":Div", ":Exp", ":MatMul", ":Mul", ":Neg", ":Relu",
                                      ":Sigmoid", ":Sqrt", ":Sub", ":Tanh"}));
  bool listed = false;
  for (const engine::DeviceInfo& d : engine::devices()) listed = listed || d.device == "reference";
  EXPECT_TRUE(listed);
  static const ReferenceDevice twin;
  EXPECT_THROW(engine::register_device_backend(twin), ArgumentError);
}

TEST(ExecutorBackend, ANodeTheBackendsLackIsRefusedWithTheirReasons) {
  try {
    engine::compile_on(mixed_model(), {.threads = 1, .optimize = false}, {&reference_backend()});
    FAIL() << "compiled a Softmax and a Reshape on a backend without them";
  } catch (const UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("reference cannot run 2 nodes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Softmax 'soft': no reference kernel for this op"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Reshape 'flat'"), std::string::npos) << msg;
  }
}

TEST(ExecutorBackend, StrictRefusesNodesLeftToTheNextBackend) {
  register_once();
  try {
    engine::compile(mixed_model(), {.device = "reference", .threads = 1, .optimize = false, .strict = true});
    FAIL() << "strict compiled a Softmax the reference backend lacks";
  } catch (const UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("strict: the reference backend cannot run 2 nodes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Softmax 'soft': no reference kernel for this op"), std::string::npos) << msg;
  }
}

// The shared op table (tests/python/_op_cases.py), run here on the reference device: its cases,
// written by tests/python/test_op_table_backend.py as models whose inputs carry the case's
// feeds as defaults, into the folder TETHER_OP_TABLE_DIR names. Every case with a node of the
// reference backend's ops runs mixed with the CPU and must match the CPU engine alone: floats
// within `TETHER_OP_TABLE_RTOL` (1e-4 by default) of the largest magnitude, other types exactly.
// Each op of the backend must run on it in at least one case. Without the folder (plain ctest),
// the case is skipped: the Python test drives it.
TEST(ExecutorBackend, RunsTheOpTableCasesOfItsOps) {
  const char* dir = std::getenv("TETHER_OP_TABLE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "TETHER_OP_TABLE_DIR is not set (tests/python/test_op_table_backend.py sets it)";
  register_once();
  const double rtol = std::getenv("TETHER_OP_TABLE_RTOL") ? std::atof(std::getenv("TETHER_OP_TABLE_RTOL")) : 1e-4;
  std::vector<std::string> ops;
  for (const std::string& o : reference_backend().op_types()) ops.push_back(o.substr(1));
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".onnx" && entry.path().stem().extension() != ".expected") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no .onnx cases in " << dir;

  std::set<std::string> ran_ops;
  int cases = 0;
  for (const auto& file : files) {
    const std::string id = file.stem().string();
    const ir::Model model = ir::load_model(file.string());
    bool has_op = false;
    for (const ir::Node* n : model.graph().nodes())
      has_op = has_op || (n->domain().empty() && std::find(ops.begin(), ops.end(), n->op_type()) != ops.end());
    if (!has_op) continue;
    ++cases;
    auto mixed = engine::compile(model, {.device = "reference", .threads = 1, .optimize = false});
    auto cpu = engine::compile(model, {.threads = 1, .optimize = false});
    int on_reference = 0;
    for (const engine::StepInfo& st : mixed->steps())
      if (st.backend == "reference") {
        ++on_reference;
        ran_ops.insert(st.op_type);
      }
    const std::vector<Tensor> got = mixed->run({});
    const std::vector<Tensor> want = cpu->run({});
    ASSERT_EQ(got.size(), want.size()) << id;
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].dims(), want[k].dims()) << id << ", output " << k;
      ASSERT_EQ(got[k].dtype(), want[k].dtype()) << id << ", output " << k;
      if (want[k].dtype() != DType::kFloat32) {
        EXPECT_EQ(0, std::memcmp(got[k].raw_data(), want[k].raw_data(), static_cast<size_t>(want[k].nbytes())))
            << id << ", output " << k;
        continue;
      }
      double scale = 1e-30, err = 0;
      for (int64_t i = 0; i < want[k].num_elements(); ++i) {
        const double w = want[k].data<float>()[i], g = got[k].data<float>()[i];
        if (std::isnan(w) || std::isnan(g)) {
          EXPECT_TRUE(std::isnan(w) && std::isnan(g)) << id << ", output " << k << ", element " << i;
          continue;
        }
        scale = std::max(scale, std::fabs(w));
        err = std::max(err, std::fabs(g - w));
      }
      worst = std::max(worst, err / scale);
    }
    EXPECT_LE(worst, rtol) << id;
    std::cout << "op-table " << id << ": " << on_reference << " reference kernels, error " << worst << "\n";
  }
  EXPECT_GT(cases, 0);
  for (const std::string& op : ops) EXPECT_TRUE(ran_ops.count(op)) << op << " ran on the reference backend in no case";
}

}  // namespace
