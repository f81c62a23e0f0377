// The INT8 pipeline from C++, public headers only: Session::run_observe and CompileOptions::keep,
// Calibrator (batching, state bytes, NaN samples), plan() per profile, quantize_qdq() and
// fold_dequantized_constants(), on small models built with GraphBuilder. Expected values are
// worked out in the test from the float data (scales, int8 weights, int32 biases), never read
// back from the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tether/builder.h"
#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"
#include "tether/quant.h"
#include "tether/shape_inference.h"

namespace {

using namespace tether;
using ir::Attribute;
using ir::DType;
using ir::Dim;
using ir::Shape;
using ir::Tensor;

// ---- data and models -------------------------------------------------------------------------

Tensor filled(std::vector<int64_t> dims, float scale, float offset) {
  Tensor t = Tensor::zeros(DType::kFloat32, std::move(dims));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = scale * std::sin(0.37f * static_cast<float>(i) + offset);
  return t;
}

Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::zeros(DType::kFloat32, std::move(dims));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = normal(rng);
  return t;
}

// Rows [begin, end) of a tensor along axis 0, copied.
Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<int64_t> dims = t.dims();
  const int64_t row = t.num_elements() / dims[0];
  dims[0] = end - begin;
  return Tensor::copy_of(DType::kFloat32, dims, t.data<float>() + begin * row,
                         static_cast<int64_t>((end - begin) * row * sizeof(float)));
}

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.num_elements()}; }

constexpr int64_t kC = 4;  // channels of the conv net

// x[N,3,8,8] -> conv1 (3x3, pads 1) -> relu1 -> r1 -> conv2 -> c2; add(r1, c2) -> s
//   -> pool (GlobalAveragePool) -> p -> flatten -> f -> fc (Gemm transB=1) -> y[N,3]
struct ConvNet {
  Tensor w1 = filled({kC, 3, 3, 3}, 0.4f, 0.1f);
  Tensor b1 = filled({kC}, 0.2f, 1.3f);
  Tensor w2 = filled({kC, kC, 3, 3}, 0.3f, 2.1f);
  Tensor b2 = filled({kC}, 0.1f, 0.7f);
  Tensor w3 = filled({3, kC}, 0.5f, 0.3f);
  Tensor b3 = filled({3}, 0.25f, 2.9f);

  GraphBuilder builder(int64_t spatial = 8, int64_t opset = ops::kDefaultBuilderOpset) const {
    GraphBuilder b("convnet", {{"", opset}});
    b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(spatial), Dim(spatial)}));
    for (const auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{
             {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}, {"w3", w3}, {"b3", b3}})
      b.initializer(name, t);
    const Attribute pads = Attribute::ints("pads", {1, 1, 1, 1});
    b.node("Conv", {"x", "w1", "b1"}, {pads}, {.name = "conv1", .outputs = {"c1"}});
    b.node("Relu", {"c1"}, {}, {.name = "relu1", .outputs = {"r1"}});
    b.node("Conv", {"r1", "w2", "b2"}, {pads}, {.name = "conv2", .outputs = {"c2"}});
    b.node("Add", {"r1", "c2"}, {}, {.name = "add", .outputs = {"s"}});
    b.node("GlobalAveragePool", {"s"}, {}, {.name = "pool", .outputs = {"p"}});
    b.node("Flatten", {"p"}, {}, {.name = "flatten", .outputs = {"f"}});
    b.node("Gemm", {"f", "w3", "b3"}, {Attribute::i("transB", 1)}, {.name = "fc", .outputs = {"y"}});
    b.output("y");
    return b;
  }
  ir::Model model(int64_t spatial = 8) const { return builder(spatial).build(); }
};

const ir::Node* node_named(const ir::Model& m, const std::string& name) {
  for (const ir::Node* n : m.graph().nodes())
    if (n->name() == name) return n;
  return nullptr;
}

int count_ops(const ir::Model& m, const std::string& op) {
  int k = 0;
  for (const ir::Node* n : m.graph().nodes()) k += n->op_type() == op;
  return k;
}

const ir::Tensor& init(const ir::Model& m, const std::string& name) {
  const ir::Value* v = m.graph().find(name);
  if (v == nullptr || !v->has_initializer()) throw std::runtime_error("no initializer '" + name + "'");
  return v->initializer();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& what, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
}

// Every observed value, copied, by name, in the order the observer saw them.
struct Recorder {
  std::vector<std::string> order;
  std::vector<size_t> indices;
  std::map<std::string, Tensor> values;
  engine::Observer observer() {
    return [this](const engine::ObservedValue& v) {
      order.push_back(v.name);
      indices.push_back(v.index);
      const int64_t n = ir::checked_num_elements(v.dims).value_or(0);
      values[v.name] = Tensor::copy_of(v.dtype, v.dims, v.data, ir::storage_bytes(v.dtype, n).value_or(0));
    };
  }
};

void expect_close(const Tensor& got, const Tensor& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  for (int64_t i = 0; i < got.num_elements(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tolerance * (1.0 + std::fabs(want.data<float>()[i])))
        << what << " at " << i;
}

void expect_same_stats(const quant::StatsMap& a, const quant::StatsMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, s] : a) {
    const quant::TensorStats& t = b.at(name);
    EXPECT_EQ(s.count, t.count) << name;
    EXPECT_EQ(s.zeros, t.zeros) << name;
    EXPECT_EQ(s.nonfinite, t.nonfinite) << name;
    EXPECT_EQ(std::bit_cast<uint32_t>(s.min), std::bit_cast<uint32_t>(t.min)) << name;
    EXPECT_EQ(std::bit_cast<uint32_t>(s.max), std::bit_cast<uint32_t>(t.max)) << name;
    EXPECT_EQ(s.exponent, t.exponent) << name;
    EXPECT_EQ(s.positive, t.positive) << name;
    EXPECT_EQ(s.negative, t.negative) << name;
    EXPECT_EQ(s.channel_absmax, t.channel_absmax) << name;
  }
}

// ---- Session::run_observe and CompileOptions::keep ----------------------------------------------

TEST(RunObserve, ValuesComeInExecutionOrderWithGraphInputsFirstAndTheirListIndex) {
  ConvNet net;
  auto session = engine::compile(net.model(), {.threads = 1, .keep = {"c1", "c2"}});
  const Tensor x = random_tensor({2, 3, 8, 8}, 1);
  Recorder rec;
  const std::vector<std::string> names = {"s", "c2", "x", "c1", "r1"};
  std::vector<Tensor> out = session->run_observe({{"x", x}}, names, rec.observer());
  EXPECT_EQ(rec.order, (std::vector<std::string>{"x", "c1", "r1", "c2", "s"}));
  EXPECT_EQ(rec.indices, (std::vector<size_t>{2, 3, 4, 1, 0}));
  // The input is handed over as given; the outputs are those of run().
  EXPECT_EQ(values_of(rec.values.at("x")), values_of(x));
  expect_close(out.at(0), session->run({{"x", x}}).at(0), 0, "y");
}

TEST(RunObserve, KeptValuesEqualTheUnoptimizedRun) {
  ConvNet net;
  const std::vector<std::string> names = {"c1", "r1", "c2", "s", "p", "f"};
  auto plain = engine::compile(net.model(), {.threads = 1, .optimize = false});
  auto kept = engine::compile(net.model(), {.threads = 1, .keep = names});
  const Tensor x = random_tensor({3, 3, 8, 8}, 2);
  Recorder a, b;
  plain->run_observe({{"x", x}}, names, a.observer());
  kept->run_observe({{"x", x}}, names, b.observer());
  ASSERT_EQ(a.order, names);
  ASSERT_EQ(b.order, names);
  for (const std::string& n : names) expect_close(b.values.at(n), a.values.at(n), 1e-5, n);
  // The pre-activation c1, computed by a kernel only because it was kept, is relu1's input.
  const std::vector<float> c1 = values_of(b.values.at("c1")), r1 = values_of(b.values.at("r1"));
  for (size_t i = 0; i < c1.size(); ++i) ASSERT_EQ(r1[i], std::max(c1[i], 0.0f)) << i;
}

TEST(RunObserve, FusedAwayUnknownConstantAndRepeatedNamesAreArgumentErrors) {
  ConvNet net;
  auto session = engine::compile(net.model(), {.threads = 1});
  const Tensor x = random_tensor({1, 3, 8, 8}, 3);
  auto ignore = [](const engine::ObservedValue&) {};
  // Without keep, conv1 + relu1 and conv2 + add are fused: c1 and c2 are never computed.
  for (const std::string name : {"c1", "c2", "nope", "w1"}) {
    const std::string what = message_of([&] {
      EXPECT_THROW(session->run_observe({{"x", x}}, {name}, ignore), ArgumentError) << name;
      session->run_observe({{"x", x}}, {name}, ignore);
    });
    expect_contains(what, {"'" + name + "'"});
  }
  EXPECT_THROW(session->run_observe({{"x", x}}, {"r1", "r1"}, ignore), ArgumentError);
  EXPECT_THROW(engine::compile(net.model(), {.keep = {"nope"}}), ArgumentError);
}

// ---- Calibrator ------------------------------------------------------------------------------

quant::Plan plan_of(const ir::Model& prepared, const std::string& profile = "onnxruntime") {
  return quant::plan(prepared, quant::profile_options(profile));
}

TEST(Calibrator, GraphInputStatisticsFollowTheHistogramDefinition) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  quant::Calibrator cal(m, {{"x", 1}}, {.bins = 64, .threads = 1});
  const Tensor x = random_tensor({5, 3, 8, 8}, 4, 2.0f);
  cal.observe({{"x", x}});
  const quant::TensorStats& s = cal.stats().at("x");
  const std::vector<float> v = values_of(x);
  EXPECT_EQ(s.count, static_cast<int64_t>(v.size()));
  EXPECT_EQ(s.min, *std::min_element(v.begin(), v.end()));
  EXPECT_EQ(s.max, *std::max_element(v.begin(), v.end()));
  double absmax = 0;
  for (float f : v) absmax = std::max(absmax, std::fabs(double(f)));
  const int e = static_cast<int>(std::floor(std::log2(absmax))) + 1;
  EXPECT_EQ(s.exponent, e);
  std::vector<uint64_t> pos(64), neg(64);
  for (float f : v) (f >= 0 ? pos : neg)[static_cast<size_t>(std::floor(std::fabs(double(f)) / std::ldexp(1.0, e) * 64))]++;
  EXPECT_EQ(s.positive, pos);
  EXPECT_EQ(s.negative, neg);
  std::vector<float> channels(3, 0.0f);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    float& c = channels[static_cast<size_t>((i / 64) % 3)];
    c = std::max(c, std::fabs(v[static_cast<size_t>(i)]));
  }
  EXPECT_EQ(s.channel_absmax, channels);
}

TEST(Calibrator, OneBatchOfNAndNBatchesOfOneGiveTheSameStatistics) {
  ConvNet net;
  // 48x48 so that the larger tensors (> 32768 values) are observed by every thread.
  const ir::Model m = quant::prepare(net.model(48));
  const quant::Plan plan = plan_of(m);
  const Tensor x = random_tensor({6, 3, 48, 48}, 5);
  quant::Calibrator whole(m, plan.observed(), {.threads = 2});
  whole.observe({{"x", x}});
  quant::Calibrator single(m, plan.observed(), {.threads = 1});
  for (int64_t i = 5; i >= 0; --i) single.observe({{"x", rows(x, i, i + 1)}});  // reversed, one by one
  quant::Calibrator mixed(m, plan.observed(), {.threads = 2});
  mixed.observe({{"x", rows(x, 2, 6)}});
  mixed.observe({{"x", rows(x, 0, 2)}});
  expect_same_stats(single.stats(), whole.stats());
  expect_same_stats(mixed.stats(), whole.stats());
  EXPECT_EQ(whole.samples(), 6);
  EXPECT_EQ(single.samples(), 6);
  EXPECT_EQ(single.batches(), 6);
  EXPECT_EQ(whole.stats().at("x").count, x.num_elements());
}

TEST(Calibrator, StatesMergeIntoTheOnePassResultAndRoundTripByteForByte) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::Plan plan = plan_of(m);
  const Tensor x = random_tensor({6, 3, 8, 8}, 6);
  quant::Calibrator all(m, plan.observed(), {.threads = 1}), a(m, plan.observed(), {.threads = 1}),
      b(m, plan.observed(), {.threads = 1}), fresh(m, plan.observed(), {.threads = 1});
  all.observe({{"x", x}});
  a.observe({{"x", rows(x, 0, 2)}});
  b.observe({{"x", rows(x, 2, 4)}});
  b.observe({{"x", rows(x, 4, 6)}});
  a.merge(b.state());
  expect_same_stats(a.stats(), all.stats());
  EXPECT_EQ(a.samples(), 6);
  EXPECT_EQ(a.batches(), 3);
  fresh.merge(all.state());
  EXPECT_TRUE(fresh.state() == all.state());
  expect_same_stats(fresh.stats(), all.stats());
}

TEST(Calibrator, StatesOfAnotherPlanOrBinCountAreArgumentErrors) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::Plan plan = plan_of(m);
  quant::Calibrator cal(m, plan.observed(), {.threads = 1});
  quant::Calibrator other_bins(m, plan.observed(), {.bins = 256, .threads = 1});
  quant::Calibrator other_plan(m, plan_of(m, "ncnn").observed(), {.threads = 1});
  expect_contains(message_of([&] { cal.merge(other_bins.state()); }), {"256 bins", "2048 bins"});
  EXPECT_THROW(cal.merge(other_bins.state()), ArgumentError);
  EXPECT_THROW(cal.merge(other_plan.state()), ArgumentError);
}

TEST(Calibrator, TruncatedOrForeignBytesAreCalibrationErrorsThatChangeNothing) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::Plan plan = plan_of(m);
  quant::Calibrator cal(m, plan.observed(), {.threads = 1}), src(m, plan.observed(), {.threads = 1});
  cal.observe({{"x", random_tensor({2, 3, 8, 8}, 7)}});
  src.observe({{"x", random_tensor({3, 3, 8, 8}, 8, 3.0f)}});
  const std::string before = cal.state(), good = src.state();
  for (size_t len : {size_t{0}, size_t{5}, size_t{40}, good.size() / 2, good.size() - 1}) {
    EXPECT_THROW(cal.merge(good.substr(0, len)), CalibrationError) << len;
    EXPECT_TRUE(cal.state() == before);
  }
  EXPECT_THROW(cal.merge(good + "x"), CalibrationError);
  EXPECT_THROW(cal.merge("PK\x03\x04 this is a zip file"), CalibrationError);
  EXPECT_TRUE(cal.state() == before);
}

// x[N,3,4,4] -> 1x1 conv of `channels` outputs -> z.
ir::Model one_conv(int64_t channels) {
  GraphBuilder b("one_conv");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(4), Dim(4)}));
  b.initializer("w", filled({channels, 3, 1, 1}, 0.5f, 0.3f));
  b.node("Conv", {"x", "w"}, {}, {.name = "conv", .outputs = {"z"}});
  b.node("Relu", {"z"}, {}, {.name = "relu", .outputs = {"y"}});
  b.output("y");
  return quant::prepare(b.build());
}

// A state whose first tensor merges and whose second ("z", after "x" in every order) has another
// channel count: merge() must refuse it before adding the first.
TEST(Calibrator, AStateRefusedAtItsLastTensorLeavesTheFirstOnesUnchanged) {
  const std::vector<std::pair<std::string, int>> tensors = {{"x", 1}, {"z", 1}};
  quant::Calibrator cal(one_conv(4), tensors, {.threads = 1}), src(one_conv(5), tensors, {.threads = 1});
  cal.observe({{"x", random_tensor({2, 3, 4, 4}, 9)}});
  src.observe({{"x", random_tensor({2, 3, 4, 4}, 10, 4.0f)}});
  const std::string before = cal.state();
  const std::string what = message_of([&] { cal.merge(src.state()); });
  expect_contains(what, {"'z'", "5 channels", "4 channels"});
  EXPECT_THROW(cal.merge(src.state()), ArgumentError);
  EXPECT_TRUE(cal.state() == before);
}

// State bytes as Calibrator::state() lays them out (calibrator.cc), for states no calibrator
// could have written.
struct StateBytes {
  std::string out = "tether-calibration-state-1\n";
  template <typename T>
  StateBytes& put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  StateBytes& header(int32_t bins, int64_t samples, const std::vector<int64_t>& skipped, uint64_t tensors) {
    put(bins).put(samples).put(int64_t{1}).put(uint64_t{skipped.size()});
    for (int64_t k : skipped) put(k);
    return put(tensors);
  }
  struct Entry {
    std::string name;
    int32_t axis = 1;
    int64_t count = 1, zeros = 0, nonfinite = 0;
    float min = 1.0f, max = 1.0f;
    int32_t exponent = 1;  // 1.0 < 2^1
    std::vector<float> channels;
    std::vector<std::pair<uint32_t, uint64_t>> positive = {{8, 1}}, negative;  // 1.0 in bin 1 * 16 / 2
  };
  StateBytes& tensor(const Entry& e) {
    put(uint64_t{e.name.size()});
    out += e.name;
    put(e.axis).put(e.count).put(e.zeros).put(e.nonfinite).put(e.min).put(e.max).put(e.exponent);
    put(uint64_t{e.channels.size()});
    for (float c : e.channels) put(c);
    put(uint8_t{1});
    for (const auto* h : {&e.positive, &e.negative}) {
      put(static_cast<uint32_t>(h->size()));
      for (const auto& [i, c] : *h) put(i).put(c);
    }
    return *this;
  }
};

TEST(Calibrator, StateContentsNoCalibratorCouldWriteAreCalibrationErrorsThatChangeNothing) {
  const std::vector<std::pair<std::string, int>> tensors = {{"x", 1}, {"z", 1}};
  quant::Calibrator cal(one_conv(4), tensors, {.bins = 16, .threads = 1});
  cal.observe({{"x", random_tensor({2, 3, 4, 4}, 35)}});
  auto state = [](const StateBytes::Entry& z, int64_t samples = 1, std::vector<int64_t> skipped = {}) {
    StateBytes b;
    b.header(16, samples, skipped, 2).tensor({.name = "x"}).tensor(z);
    return b.out;
  };
  // The writer is right: a consistent state merges.
  quant::Calibrator probe(one_conv(4), tensors, {.bins = 16, .threads = 1});
  probe.merge(state({.name = "z"}));
  EXPECT_EQ(probe.stats().at("z").count, 1);
  EXPECT_EQ(probe.stats().at("z").positive[8], 1u);

  const std::string before = cal.state();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"exponent far below any float", state({.name = "z", .exponent = std::numeric_limits<int32_t>::min() + 1})},
      {"exponent far above any float", state({.name = "z", .exponent = 1 << 30})},
      {"exponent that is not the extremes'", state({.name = "z", .exponent = 5})},
      {"count the histograms do not hold", state({.name = "z", .count = 7})},
      {"negative count", state({.name = "z", .count = -1, .positive = {}})},
      {"more zeros than values", state({.name = "z", .zeros = 2})},
      {"NaN minimum", state({.name = "z", .min = std::numeric_limits<float>::quiet_NaN()})},
      {"minimum above maximum", state({.name = "z", .min = 1.5f})},
      {"values without extremes", state({.name = "z", .min = std::numeric_limits<float>::infinity(),
                                         .max = -std::numeric_limits<float>::infinity()})},
      {"bins holding 2^64 - 1 and 2 values", state({.name = "z", .positive = {{8, ~uint64_t{0}}, {9, 2}}})},
      {"negative channel extreme", state({.name = "z", .channels = {-1.0f, 0, 0, 0}})},
      {"skipped sample past the samples", state({.name = "z"}, 1, {5})},
      {"negative samples", state({.name = "z"}, -3)},
  };
  for (const auto& [what, bytes] : cases) {
    EXPECT_THROW(cal.merge(bytes), CalibrationError) << what;
    EXPECT_TRUE(cal.state() == before) << what;
  }
  const std::string msg = message_of([&] { cal.merge(cases[0].second); });
  expect_contains(msg, {"'z'", "exponent"});
}

TEST(Calibrator, SkippedSampleIndicesOfAMergedStateCountFromTheSamplesBeforeIt) {
  // x -> Sqrt -> conv: a negative input gives NaN in the conv's input.
  GraphBuilder b("sqrtnet");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(2), Dim(4), Dim(4)}));
  b.initializer("w", filled({2, 2, 1, 1}, 0.5f, 0.2f));
  b.node("Sqrt", {"x"}, {}, {.name = "sqrt", .outputs = {"r"}});
  b.node("Conv", {"r", "w"}, {}, {.name = "conv", .outputs = {"y"}});
  b.output("y");
  const ir::Model m = quant::prepare(b.build());
  const quant::Plan plan = plan_of(m);
  auto batch = [](int64_t n, int64_t bad_row, uint32_t seed) {
    Tensor t = random_tensor({n, 2, 4, 4}, seed);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = std::fabs(t.data<float>()[i]);
    if (bad_row >= 0) t.mutable_data<float>()[bad_row * 32 + 5] = -1.0f;
    return t;
  };
  const quant::CalibratorOptions skip{.threads = 1, .skip_nonfinite = true};
  quant::Calibrator a(m, plan.observed(), skip), bb(m, plan.observed(), skip), all(m, plan.observed(), skip);
  const Tensor first = batch(3, 1, 11), second = batch(3, 0, 12);
  a.observe({{"x", first}});
  bb.observe({{"x", second}});
  all.observe({{"x", first}});
  all.observe({{"x", second}});
  ASSERT_EQ(all.skipped(), (std::vector<int64_t>{1, 3}));
  a.merge(bb.state());
  EXPECT_EQ(a.skipped(), all.skipped());
  expect_same_stats(a.stats(), all.stats());
}

TEST(Calibrator, ANanSampleIsNamedByTensorAndStreamIndexAndChangesNothing) {
  GraphBuilder b("sqrtnet");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(2), Dim(4), Dim(4)}));
  b.initializer("w", filled({2, 2, 1, 1}, 0.5f, 0.2f));
  b.node("Sqrt", {"x"}, {}, {.name = "sqrt", .outputs = {"r"}});
  b.node("Conv", {"r", "w"}, {}, {.name = "conv", .outputs = {"y"}});
  b.output("y");
  const ir::Model m = quant::prepare(b.build());
  const quant::Plan plan = plan_of(m);
  quant::Calibrator cal(m, plan.observed(), {.threads = 1});
  Tensor clean = random_tensor({3, 2, 4, 4}, 13);
  for (int64_t i = 0; i < clean.num_elements(); ++i) clean.mutable_data<float>()[i] = std::fabs(clean.data<float>()[i]);
  cal.observe({{"x", clean}});
  Tensor bad = Tensor::copy_of(DType::kFloat32, clean.dims(), clean.data<float>(), clean.nbytes());
  bad.mutable_data<float>()[2 * 32 + 7] = -4.0f;  // row 2 of the second batch: sample 5
  const std::string before = cal.state();
  const std::string what = message_of([&] { cal.observe({{"x", bad}}); });
  expect_contains(what, {"sample 5", "batch 1", "row 2", "'r'"});
  EXPECT_THROW(cal.observe({{"x", bad}}), CalibrationError);
  EXPECT_TRUE(cal.state() == before);
  EXPECT_EQ(cal.samples(), 3);
}

TEST(Calibrator, ModelsWithSeveralInputsQuantizeTheirInputsDirectly) {
  GraphBuilder b("two");
  b.input("a", DType::kFloat32, Shape({Dim::symbol("N"), Dim(6)}));
  b.input("b", DType::kFloat32, Shape({Dim::symbol("N"), Dim(6)}));
  b.initializer("w", filled({6, 4}, 0.5f, 0.0f));
  b.node("Add", {"a", "b"}, {}, {.name = "add", .outputs = {"s"}});
  b.node("MatMul", {"s", "w"}, {}, {.name = "mm", .outputs = {"y"}});
  b.output("y");
  const ir::Model m = quant::prepare(b.build());
  const quant::Plan plan = plan_of(m);
  std::vector<std::string> names;
  for (const auto& t : plan.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "s", "y"}));
  quant::Calibrator cal(m, plan.observed(), {.threads = 1});
  const Tensor ta = random_tensor({4, 6}, 14, 1.0f), tb = random_tensor({4, 6}, 15, 5.0f);
  cal.observe({{"b", tb}, {"a", ta}});
  for (const auto& [name, t] : {std::pair{"a", ta}, std::pair{"b", tb}}) {
    const std::vector<float> v = values_of(t);
    EXPECT_EQ(cal.stats().at(name).min, *std::min_element(v.begin(), v.end())) << name;
    EXPECT_EQ(cal.stats().at(name).max, *std::max_element(v.begin(), v.end())) << name;
  }
  EXPECT_THROW(cal.observe({{"a", ta}, {"b", rows(tb, 0, 3)}}), ArgumentError);
}

// ---- plan() ----------------------------------------------------------------------------------

struct TensorRow {
  std::string name;
  int group;
  bool all_readers;
  bool operator==(const TensorRow&) const = default;
};

std::vector<TensorRow> tensor_rows(const quant::Plan& p) {
  std::vector<TensorRow> out;
  for (const auto& t : p.tensors) out.push_back({t.name, t.group, t.all_readers});
  return out;
}

std::vector<std::string> node_names(const quant::Plan& p) {
  std::vector<std::string> out;
  for (const auto& n : p.nodes) out.push_back(n.node);
  return out;
}

const quant::PlannedNode& planned(const quant::Plan& p, const std::string& name) {
  for (const auto& n : p.nodes)
    if (n.node == name) return n;
  throw std::runtime_error("'" + name + "' is not planned");
}

using Names = std::vector<std::string>;

TEST(Plan, OnnxruntimeQuantizesInputsAndOutputsAbsorbsReluAndSharesFlattenParameters) {
  ConvNet net;
  const quant::Plan p = plan_of(quant::prepare(net.model()));
  EXPECT_EQ(tensor_rows(p), (std::vector<TensorRow>{{"x", 0, false}, {"r1", 1, true}, {"c2", 2, true}, {"s", 3, true},
                                                    {"p", 4, true}, {"f", 4, true}, {"y", 5, true}}));
  EXPECT_EQ(node_names(p), (Names{"conv1", "conv2", "add", "pool", "flatten", "fc"}));  // relu1 absorbed
  const quant::PlannedNode& c1 = planned(p, "conv1");
  EXPECT_EQ(c1.inputs, Names{"x"});
  EXPECT_EQ(c1.outputs, Names{"r1"});
  EXPECT_EQ(c1.weight, "w1");
  EXPECT_EQ(c1.weight_axis, 0);
  EXPECT_EQ(c1.bias, "b1");
  EXPECT_EQ(planned(p, "add").inputs, (Names{"r1", "c2"}));
  EXPECT_EQ(planned(p, "add").outputs, Names{"s"});
  EXPECT_EQ(planned(p, "flatten").outputs, Names{"f"});
  const quant::PlannedNode& fc = planned(p, "fc");
  EXPECT_EQ(fc.weight, "w3");
  EXPECT_EQ(fc.weight_axis, 0);  // transB = 1: w3 is [out, in]
  EXPECT_EQ(fc.bias, "b3");
  EXPECT_EQ(p.tensors[0].channel_axis, 1);
}

TEST(Plan, TensorrtQuantizesTheInputsOfItsOpsOnlyWithFloatBiases) {
  ConvNet net;
  const quant::Plan p = plan_of(quant::prepare(net.model()), "tensorrt");
  EXPECT_EQ(tensor_rows(p), (std::vector<TensorRow>{{"x", 0, false}, {"r1", 1, false}, {"c2", 2, false},
                                                    {"s", 3, false}, {"f", 4, false}}));
  EXPECT_EQ(node_names(p), (Names{"conv1", "conv2", "add", "pool", "fc"}));
  for (const auto& n : p.nodes) {
    EXPECT_TRUE(n.outputs.empty()) << n.node;
    EXPECT_EQ(n.bias, "") << n.node;
  }
  EXPECT_EQ(planned(p, "conv2").weight_axis, 0);
}

TEST(Plan, NcnnQuantizesConvAndGemmInputs) {
  ConvNet net;
  const quant::Plan p = plan_of(quant::prepare(net.model()), "ncnn");
  EXPECT_EQ(tensor_rows(p), (std::vector<TensorRow>{{"x", 0, false}, {"r1", 1, false}, {"f", 2, false}}));
  EXPECT_EQ(node_names(p), (Names{"conv1", "conv2", "fc"}));
}

TEST(Plan, ExcludedNodesReadFloatAndRestrictPlanKeepsWhatANodeReads) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  quant::QuantizeOptions o = quant::profile_options("onnxruntime");
  o.exclude_nodes = {"conv2"};
  const quant::Plan p = quant::plan(m, o);
  EXPECT_EQ(node_names(p), (Names{"conv1", "add", "pool", "flatten", "fc"}));
  // c2 is now read quantized by add only.
  EXPECT_EQ(tensor_rows(p)[2], (TensorRow{"c2", 2, false}));
  o.exclude_nodes = {"no such node"};
  expect_contains(message_of([&] { quant::plan(m, o); }), {"'no such node'"});
  EXPECT_THROW(quant::plan(m, o), ArgumentError);

  const quant::Plan whole = plan_of(m);
  const quant::Plan only = quant::restrict_plan(whole, {"conv2"});
  EXPECT_EQ(node_names(only), Names{"conv2"});
  EXPECT_TRUE(only.nodes[0].outputs.empty());
  EXPECT_EQ(only.nodes[0].weight, "w2");
  EXPECT_EQ(tensor_rows(only), (std::vector<TensorRow>{{"r1", 1, false}}));
  EXPECT_THROW(quant::restrict_plan(whole, {"relu1"}), ArgumentError);  // absorbed: not a planned node
}

TEST(Plan, GemmWithoutTransposeAndMatMulWithA3dWeightTakeTheOutputFeatureAxis) {
  GraphBuilder b("fc");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(4)}));
  b.initializer("wg", filled({4, 5}, 0.5f, 0.0f));
  b.initializer("bg", filled({5}, 0.1f, 0.0f));
  b.initializer("wm", filled({2, 5, 3}, 0.5f, 1.0f));
  b.node("Gemm", {"x", "wg", "bg"}, {}, {.name = "gemm", .outputs = {"g"}});
  b.node("MatMul", {"g", "wm"}, {}, {.name = "mm", .outputs = {"y"}});
  b.output("y");
  const quant::Plan p = plan_of(quant::prepare(b.build()));
  EXPECT_EQ(planned(p, "gemm").weight_axis, 1);
  EXPECT_EQ(planned(p, "gemm").bias, "bg");
  EXPECT_EQ(planned(p, "mm").weight_axis, 2);
  EXPECT_EQ(planned(p, "mm").bias, "");
}

TEST(Plan, PrepareNamesUnnamedAndRepeatedNodesApart) {
  ConvNet net;
  ir::Model m = net.model();
  std::vector<ir::Node*> nodes = m.graph().nodes();
  nodes[0]->set_name("");      // conv1
  nodes[2]->set_name("relu1");  // conv2, named like relu1
  const ir::Model p = quant::prepare(m);
  std::set<std::string> names;
  for (const ir::Node* n : p.graph().nodes()) {
    EXPECT_FALSE(n->name().empty());
    EXPECT_TRUE(names.insert(n->name()).second) << n->name();
  }
  EXPECT_EQ(p.graph().find("c1")->producer()->name(), "Conv_0");
  EXPECT_EQ(p.graph().find("c2")->producer()->name(), "relu1_0");
  quant::QuantizeOptions o = quant::profile_options("onnxruntime");
  o.exclude_nodes = {"relu1_0"};
  const quant::Plan plan = quant::plan(p, o);
  EXPECT_EQ(node_names(plan), (Names{"Conv_0", "add", "pool", "flatten", "fc"}));
}

// ---- quantize_qdq ------------------------------------------------------------------------------

struct Quantized {
  ir::Model prepared;
  quant::Plan plan;
  quant::QuantizedModel q;
};

Quantized quantize(const ir::Model& model, const std::vector<std::pair<std::string, Tensor>>& calibration,
                   const quant::QuantizeOptions& options) {
  Quantized out{quant::prepare(model), {}, {}};
  out.plan = quant::plan(out.prepared, options);
  quant::Calibrator cal(out.prepared, out.plan.observed(), {.threads = 1});
  cal.observe(calibration);
  const auto ranges = quant::compute_ranges(out.plan, cal.stats(), {.method = "minmax"}, options);
  out.q = quant::quantize_qdq(out.prepared, out.plan, ranges, options);
  return out;
}

// The DequantizeLinear whose output node `reader` reads at `input`.
const ir::Node* dq_read_by(const ir::Model& m, const std::string& reader, size_t input) {
  const ir::Node* n = node_named(m, reader);
  if (n == nullptr || n->input(input) == nullptr) return nullptr;
  const ir::Node* p = n->input(input)->producer();
  return p != nullptr && p->op_type() == "DequantizeLinear" ? p : nullptr;
}

// Per-channel symmetric int8 scales worked out from the float weight: absmax / 127 along `axis`.
std::vector<float> expected_weight_scales(const Tensor& w, int axis) {
  const auto& d = w.dims();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= d[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) inner *= d[i];
  const int64_t channels = d[static_cast<size_t>(axis)];
  std::vector<double> absmax(static_cast<size_t>(channels), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i)
        absmax[static_cast<size_t>(c)] =
            std::max(absmax[static_cast<size_t>(c)], std::fabs(double(w.data<float>()[(o * channels + c) * inner + i])));
  std::vector<float> out;
  for (double a : absmax) out.push_back(static_cast<float>(2.0 * a / 254.0));
  return out;
}

// The int8 weight behind `reader`'s input `input`: per-channel scales as worked out from the
// float weight, and every dequantized value within half a step of the float one.
void expect_int8_weight(const ir::Model& q, const std::string& reader, size_t input, const Tensor& w, int axis) {
  const ir::Node* dq = dq_read_by(q, reader, input);
  ASSERT_NE(dq, nullptr) << reader;
  ASSERT_TRUE(dq->input(0)->has_initializer());
  const Tensor& qw = dq->input(0)->initializer();
  const Tensor& scale = dq->input(1)->initializer();
  ASSERT_EQ(qw.dtype(), DType::kInt8);
  ASSERT_EQ(qw.dims(), w.dims());
  EXPECT_EQ(dq->attr_int("axis", 1), axis);
  const std::vector<float> want = expected_weight_scales(w, axis);
  ASSERT_EQ(scale.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t c = 0; c < want.size(); ++c) EXPECT_NEAR(scale.data<float>()[c], want[c], 1e-6 * want[c]) << reader << " " << c;
  const auto& d = w.dims();
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) inner *= d[i];
  for (int64_t k = 0; k < w.num_elements(); ++k) {
    const auto c = static_cast<size_t>((k / inner) % d[static_cast<size_t>(axis)]);
    const int8_t v = qw.data<int8_t>()[k];
    ASSERT_GE(v, -127);
    const double s = scale.data<float>()[c];
    ASSERT_LE(std::fabs(v * s - double(w.data<float>()[k])), 0.5 * s * (1 + 1e-6)) << reader << " element " << k;
  }
}

// The int32 bias behind `reader`'s input 2: round(b / (s_in * s_w[c])), s_w per output channel
// (`weight_channel(c)` gives the weight scale index).
void expect_int32_bias(const ir::Model& q, const std::string& reader, const std::string& input, const Tensor& b,
                       const std::function<size_t(size_t)>& weight_channel) {
  const ir::Node* dq = dq_read_by(q, reader, 2);
  ASSERT_NE(dq, nullptr) << reader;
  const Tensor& qb = dq->input(0)->initializer();
  const Tensor& bscale = dq->input(1)->initializer();
  ASSERT_EQ(qb.dtype(), DType::kInt32);
  const float s_in = init(q, input + "_scale").data<float>()[0];
  const Tensor& s_w = dq_read_by(q, reader, 1)->input(1)->initializer();
  for (int64_t c = 0; c < b.num_elements(); ++c) {
    const size_t j = weight_channel(static_cast<size_t>(c));
    ASSERT_LT(static_cast<int64_t>(j), s_w.num_elements());
    const float s = s_in * s_w.data<float>()[j];
    EXPECT_EQ(bscale.data<float>()[c], s) << reader << " channel " << c;
    EXPECT_EQ(qb.data<int32_t>()[c], static_cast<int32_t>(std::nearbyint(b.data<float>()[c] / s))) << reader << " channel " << c;
  }
}

// The quantized model validates (reloads from its bytes, shapes infer), runs on the CPU engine
// and stays close to the float model.
void expect_runs_close(const ir::Model& qdq, const ir::Model& reference, const std::vector<std::pair<std::string, Tensor>>& in,
                       double relative) {
  qdq.graph().validate();
  const std::string bytes = ir::serialize_model(qdq);
  ir::Model reloaded = ir::load_model_from_bytes(bytes.data(), bytes.size());
  ops::infer_shapes(reloaded);
  const std::vector<Tensor> got = engine::compile(reloaded, {.threads = 1})->run(in);
  const std::vector<Tensor> want = engine::compile(reference, {.threads = 1})->run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].dims(), want[k].dims());
    double peak = 0, err = 0;
    for (int64_t i = 0; i < want[k].num_elements(); ++i) {
      peak = std::max(peak, std::fabs(double(want[k].data<float>()[i])));
      err = std::max(err, std::fabs(double(got[k].data<float>()[i]) - want[k].data<float>()[i]));
    }
    EXPECT_GT(peak, 0);
    EXPECT_LE(err, relative * peak) << "output " << k;
  }
}

TEST(QuantizeQdq, ActivationsWeightsAndBiasesAreWrittenAsOnnxruntimeWouldAndTheModelRunsClose) {
  ConvNet net;
  const Tensor x = random_tensor({8, 3, 8, 8}, 20);
  const Quantized r = quantize(net.model(), {{"x", x}}, quant::profile_options("onnxruntime"));
  const ir::Model& q = r.q.model;
  // Activation x: QuantizeLinear -> DequantizeLinear with the documented names; conv1 reads it.
  for (const char* v : {"x_quantized", "x_dequantized", "x_scale", "x_zero_point"}) EXPECT_NE(q.graph().find(v), nullptr) << v;
  EXPECT_NE(node_named(q, "x_QuantizeLinear"), nullptr);
  EXPECT_EQ(node_named(q, "conv1")->input(0)->name(), "x_dequantized");
  // minmax on int8 asymmetric: scale (max - min) / 255 over the range widened to hold 0.
  const std::vector<float> xv = values_of(x);
  const double lo = std::min(0.0f, *std::min_element(xv.begin(), xv.end())), hi = std::max(0.0f, *std::max_element(xv.begin(), xv.end()));
  EXPECT_NEAR(init(q, "x_scale").data<float>()[0], (hi - lo) / 255.0, 1e-6 * (hi - lo) / 255.0);
  EXPECT_EQ(init(q, "x_zero_point").dtype(), DType::kInt8);
  // Relu absorbed: conv1's output is not quantized, relu1's is, and both readers of r1 read it.
  EXPECT_EQ(q.graph().find("c1_quantized"), nullptr);
  EXPECT_EQ(node_named(q, "conv2")->input(0)->name(), "r1_dequantized");
  EXPECT_EQ(node_named(q, "add")->input(0)->name(), "r1_dequantized");
  EXPECT_EQ(node_named(q, "flatten")->input(0)->name(), "p_dequantized");
  // p and f share parameters.
  EXPECT_EQ(init(q, "p_scale").data<float>()[0], init(q, "f_scale").data<float>()[0]);
  // The graph output y keeps its float value: nobody reads a quantized y.
  EXPECT_EQ(q.graph().outputs()[0]->name(), "y");
  EXPECT_EQ(q.graph().outputs()[0]->producer()->name(), "fc");
  EXPECT_EQ(q.graph().find("y_quantized"), nullptr);

  expect_int8_weight(q, "conv1", 1, net.w1, 0);
  expect_int8_weight(q, "conv2", 1, net.w2, 0);
  expect_int8_weight(q, "fc", 1, net.w3, 0);
  auto same = [](size_t c) { return c; };
  expect_int32_bias(q, "conv1", "x", net.b1, same);
  expect_int32_bias(q, "conv2", "r1", net.b2, same);
  expect_int32_bias(q, "fc", "f", net.b3, same);
  // The float weights are gone: read only through their DequantizeLinear.
  for (const char* w : {"w1", "w2", "w3", "b1", "b2", "b3"}) EXPECT_EQ(q.graph().find(w), nullptr) << w;
  // Nodes are in an order that runs, and unique by name.
  std::set<std::string> seen_values, names;
  for (const ir::Value* in : q.graph().inputs()) seen_values.insert(in->name());
  for (const ir::Value* v : q.graph().initializers()) seen_values.insert(v->name());
  for (const ir::Node* n : q.graph().nodes()) {
    EXPECT_TRUE(names.insert(n->name()).second) << "node name repeated: " << n->name();
    for (const ir::Value* in : n->inputs())
      if (in != nullptr) {
        EXPECT_TRUE(seen_values.count(in->name())) << n->name() << " reads " << in->name() << " before it exists";
      }
    for (const ir::Value* out : n->outputs())
      if (out != nullptr) seen_values.insert(out->name());
  }
  expect_runs_close(q, net.model(), {{"x", random_tensor({4, 3, 8, 8}, 21)}}, 0.05);
}

TEST(QuantizeQdq, AnExcludedReaderReadsTheFloatTensorAndKeepsItsFloatWeight) {
  ConvNet net;
  quant::QuantizeOptions o = quant::profile_options("onnxruntime");
  o.exclude_nodes = {"conv2"};
  const Tensor x = random_tensor({8, 3, 8, 8}, 22);
  const Quantized r = quantize(net.model(), {{"x", x}}, o);
  const ir::Model& q = r.q.model;
  EXPECT_EQ(node_named(q, "conv2")->input(0)->name(), "r1");
  EXPECT_EQ(node_named(q, "conv2")->input(1)->name(), "w2");
  EXPECT_TRUE(q.graph().find("w2")->has_initializer());
  EXPECT_EQ(node_named(q, "add")->input(0)->name(), "r1_dequantized");
  EXPECT_EQ(node_named(q, "add")->input(1)->name(), "c2_dequantized");
  expect_runs_close(q, net.model(), {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, AGraphOutputReadByAQuantizedNodeStaysFloat) {
  ConvNet net;
  GraphBuilder b = net.builder();
  b.output("r1");
  const ir::Model model = b.build();
  const Tensor x = random_tensor({8, 3, 8, 8}, 23);
  const Quantized r = quantize(model, {{"x", x}}, quant::profile_options("onnxruntime"));
  const ir::Model& q = r.q.model;
  ASSERT_EQ(q.graph().outputs().size(), 2u);
  EXPECT_EQ(q.graph().outputs()[1]->name(), "r1");
  EXPECT_EQ(q.graph().outputs()[1]->producer()->op_type(), "Relu");
  EXPECT_EQ(node_named(q, "conv2")->input(0)->name(), "r1_dequantized");
  expect_runs_close(q, model, {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, GemmWithoutTransposeAndA3dMatMulWeightArePerOutputFeature) {
  GraphBuilder b("fc");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(4)}));
  const Tensor wg = filled({4, 5}, 0.5f, 0.0f), bg = filled({5}, 0.1f, 0.4f), wm = filled({2, 5, 3}, 0.5f, 1.0f);
  b.initializer("wg", wg);
  b.initializer("bg", bg);
  b.initializer("wm", wm);
  b.node("Gemm", {"x", "wg", "bg"}, {}, {.name = "gemm", .outputs = {"g"}});
  b.node("MatMul", {"g", "wm"}, {}, {.name = "mm", .outputs = {"y"}});
  b.output("y");
  const ir::Model model = b.build();
  const Tensor x = random_tensor({16, 4}, 24);
  const Quantized r = quantize(model, {{"x", x}}, quant::profile_options("onnxruntime"));
  expect_int8_weight(r.q.model, "gemm", 1, wg, 1);
  expect_int8_weight(r.q.model, "mm", 1, wm, 2);
  expect_int32_bias(r.q.model, "gemm", "x", bg, [](size_t c) { return c; });
  expect_runs_close(r.q.model, model, {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, GroupedConvTransposeBiasUsesTheScaleOfEachOutputChannel) {
  // 4 input channels in 2 groups, 3 output channels per group: the weight is [4, 3, 3, 3],
  // quantized per channel along axis 1 (3 scales), and output channel c uses scale c % 3.
  GraphBuilder b("deconv");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(4), Dim(5), Dim(5)}));
  const Tensor w = filled({4, 3, 3, 3}, 0.4f, 0.5f), bias = filled({6}, 0.3f, 0.9f);
  b.initializer("w", w);
  b.initializer("b", bias);
  b.node("ConvTranspose", {"x", "w", "b"}, {Attribute::i("group", 2)}, {.name = "deconv", .outputs = {"y"}});
  b.output("y");
  const ir::Model model = b.build();
  const Tensor x = random_tensor({4, 4, 5, 5}, 25);
  const Quantized r = quantize(model, {{"x", x}}, quant::profile_options("onnxruntime"));
  expect_int8_weight(r.q.model, "deconv", 1, w, 1);
  expect_int32_bias(r.q.model, "deconv", "x", bias, [](size_t c) { return c % 3; });
  expect_runs_close(r.q.model, model, {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, TwoConvsSharingWeightsAndBiasReadOneInt8WeightAndNodeNamesStayUnique) {
  // A siamese pair: the same w and b on two inputs (so two int32 biases, one per input scale).
  GraphBuilder b("siamese");
  b.input("x1", DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(6), Dim(6)}));
  b.input("x2", DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(6), Dim(6)}));
  const Tensor w = filled({4, 3, 3, 3}, 0.4f, 0.2f), bias = filled({4}, 0.2f, 0.1f);
  b.initializer("w", w);
  b.initializer("b", bias);
  b.node("Conv", {"x1", "w", "b"}, {}, {.name = "left", .outputs = {"l"}});
  b.node("Conv", {"x2", "w", "b"}, {}, {.name = "right", .outputs = {"r"}});
  b.node("Add", {"l", "r"}, {}, {.name = "join", .outputs = {"y"}});
  b.output("y");
  const ir::Model model = b.build();
  const Tensor x1 = random_tensor({4, 3, 6, 6}, 26), x2 = random_tensor({4, 3, 6, 6}, 27, 3.0f);
  const Quantized r = quantize(model, {{"x1", x1}, {"x2", x2}}, quant::profile_options("onnxruntime"));
  const ir::Model& q = r.q.model;
  EXPECT_EQ(node_named(q, "left")->input(1), node_named(q, "right")->input(1));
  EXPECT_NE(node_named(q, "left")->input(2), node_named(q, "right")->input(2));
  expect_int32_bias(q, "left", "x1", bias, [](size_t c) { return c; });
  expect_int32_bias(q, "right", "x2", bias, [](size_t c) { return c; });
  std::set<std::string> names;
  for (const ir::Node* n : q.graph().nodes()) EXPECT_TRUE(names.insert(n->name()).second) << "node name repeated: " << n->name();
  expect_runs_close(q, model, {{"x1", x1}, {"x2", x2}}, 0.05);
}

TEST(QuantizeQdq, ATiedWeightReadOnTwoAxesGivesEachBiasTheScalesOfItsOwnAxis) {
  // w[5, 3] is read by MatMul as [in 5, out 3] (per channel along axis 1: 3 scales) and, tied,
  // by Gemm transB=1 as [out 5, in 3] (along axis 0: 5 scales), whose bias has 5 values.
  GraphBuilder b("tied");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(5)}));
  const Tensor w = filled({5, 3}, 0.5f, 0.7f), bias = filled({5}, 0.2f, 0.1f);
  b.initializer("w", w);
  b.initializer("b", bias);
  b.node("MatMul", {"x", "w"}, {}, {.name = "encode", .outputs = {"h"}});
  b.node("Gemm", {"h", "w", "b"}, {Attribute::i("transB", 1)}, {.name = "decode", .outputs = {"y"}});
  b.output("y");
  const ir::Model model = b.build();
  const Tensor x = random_tensor({16, 5}, 33);
  const Quantized r = quantize(model, {{"x", x}}, quant::profile_options("onnxruntime"));
  expect_int8_weight(r.q.model, "encode", 1, w, 1);
  expect_int8_weight(r.q.model, "decode", 1, w, 0);
  expect_int32_bias(r.q.model, "decode", "h", bias, [](size_t c) { return c; });
  expect_runs_close(r.q.model, model, {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, OpsetTwelveQuantizesWeightsPerTensorAndSaysSo) {
  ConvNet net;
  const ir::Model model = net.builder(8, 12).build();
  const Tensor x = random_tensor({8, 3, 8, 8}, 28);
  const Quantized r = quantize(model, {{"x", x}}, quant::profile_options("onnxruntime"));
  bool noted = false;
  for (const std::string& n : r.plan.notes) noted = noted || n.find("opset 12") != std::string::npos;
  EXPECT_TRUE(noted);
  const ir::Node* dq = dq_read_by(r.q.model, "conv1", 1);
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(dq->attr("axis"), nullptr);
  EXPECT_EQ(dq->input(1)->initializer().rank(), 0u);
  double absmax = 0;
  for (float v : values_of(net.w1)) absmax = std::max(absmax, std::fabs(double(v)));
  EXPECT_NEAR(dq->input(1)->initializer().data<float>()[0], 2 * absmax / 254, 1e-6 * absmax / 127);
  expect_runs_close(r.q.model, model, {{"x", x}}, 0.05);
}

TEST(QuantizeQdq, APlanOfAnotherModelIsAnArgumentErrorNamingWhatIsMissing) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::QuantizeOptions o = quant::profile_options("onnxruntime");
  const quant::Plan p = quant::plan(m, o);
  quant::Calibrator cal(m, p.observed(), {.threads = 1});
  cal.observe({{"x", random_tensor({2, 3, 8, 8}, 36)}});
  const auto ranges = quant::compute_ranges(p, cal.stats(), {}, o);
  // The same net with conv2 renamed, and one whose fc weight is an input rather than a constant.
  ir::Model renamed = m.clone();
  for (ir::Node* n : renamed.graph().nodes())
    if (n->name() == "conv2") n->set_name("conv2b");
  expect_contains(message_of([&] { quant::quantize_qdq(renamed, p, ranges, o); }), {"'conv2'"});
  EXPECT_THROW(quant::quantize_qdq(renamed, p, ranges, o), ArgumentError);
  GraphBuilder b("other");
  b.input("x", DType::kFloat32, Shape({Dim::symbol("N"), Dim(3), Dim(8), Dim(8)}));
  b.node("Relu", {"x"}, {}, {.name = "conv1", .outputs = {"y"}});
  b.output("y");
  const ir::Model other = b.build();
  expect_contains(message_of([&] { quant::quantize_qdq(other, p, ranges, o); }), {"conv1", "'w1'"});
  EXPECT_THROW(quant::quantize_qdq(other, p, ranges, o), ArgumentError);
}

TEST(QuantizeQdq, AMissingRangeIsACalibrationErrorNamingTheTensor) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::QuantizeOptions o = quant::profile_options("onnxruntime");
  const quant::Plan p = quant::plan(m, o);
  const std::string what = message_of([&] { quant::quantize_qdq(m, p, {}, o); });
  expect_contains(what, {"'x'"});
  EXPECT_THROW(quant::quantize_qdq(m, p, {}, o), CalibrationError);
  EXPECT_THROW(quant::compute_ranges(p, {}, {}, o), CalibrationError);
}

TEST(FoldDequantizedConstants, NoDequantizeOfConstantsIsLeftAndOutputsStayTheSame) {
  ConvNet net;
  const Tensor x = random_tensor({8, 3, 8, 8}, 29);
  const Quantized r = quantize(net.model(), {{"x", x}}, quant::profile_options("onnxruntime"));
  const ir::Model folded = quant::fold_dequantized_constants(r.q.model);
  for (const ir::Node* n : folded.graph().nodes()) {
    if (n->op_type() != "DequantizeLinear") continue;
    EXPECT_FALSE(n->input(0)->has_initializer() && !n->input(0)->is_input()) << n->name();
  }
  // The activations' Q/DQ pairs stay: one DequantizeLinear per quantized activation read.
  EXPECT_EQ(count_ops(folded, "DequantizeLinear"), count_ops(r.q.model, "QuantizeLinear"));
  // The folded weights are the dequantized int8 values.
  const Tensor& w1 = init(folded, "w1_dequantized");
  const Tensor& q1 = init(r.q.model, "w1_quantized");
  const Tensor& s1 = init(r.q.model, "w1_scale");
  for (int64_t k = 0; k < w1.num_elements(); ++k)
    ASSERT_EQ(w1.data<float>()[k], q1.data<int8_t>()[k] * s1.data<float>()[k / 27]) << k;
  const Tensor probe = random_tensor({2, 3, 8, 8}, 30);
  const std::vector<Tensor> a = engine::compile(r.q.model, {.threads = 1})->run({{"x", probe}});
  const std::vector<Tensor> b = engine::compile(folded, {.threads = 1})->run({{"x", probe}});
  expect_close(b.at(0), a.at(0), 1e-5, "y");
}

// ---- TensorStats given malformed fields ------------------------------------------------------------

// TensorStats is a plain struct (and Python can write its fields): merge() and observe() must
// refuse histograms of the wrong size or an exponent no float has, not index past them.
TEST(TensorStats, MalformedHistogramsOrExponentsAreArgumentErrorsThatChangeNothing) {
  const Tensor v = random_tensor({200}, 34);
  quant::TensorStats good(16);
  good.observe(v.data<float>(), v.dims());
  auto malformed = [&](const std::function<void(quant::TensorStats&)>& edit) {
    quant::TensorStats s = good;
    edit(s);
    return s;
  };
  const std::vector<quant::TensorStats> bad = {
      malformed([](quant::TensorStats& s) { s.positive.resize(3); }),
      malformed([](quant::TensorStats& s) { s.negative.resize(32); }),
      malformed([](quant::TensorStats& s) { s.exponent = 100000; }),
      malformed([](quant::TensorStats& s) { s.exponent = std::numeric_limits<int>::min() + 1; }),
  };
  for (size_t k = 0; k < bad.size(); ++k) {
    quant::TensorStats into = good;
    EXPECT_THROW(into.merge(bad[k]), ArgumentError) << k;
    EXPECT_EQ(into.positive, good.positive) << k;
    EXPECT_EQ(into.count, good.count) << k;
    quant::TensorStats from = bad[k];
    EXPECT_THROW(from.merge(good), ArgumentError) << k;
    EXPECT_THROW(from.observe(v.data<float>(), v.dims()), ArgumentError) << k;
  }
}

// ---- Calibrator::merge against hostile bytes ------------------------------------------------------

// Every truncation of a valid state, random bytes, and random edits of a valid state: merge()
// either accepts the bytes or throws CalibrationError / ArgumentError and changes nothing.
// Nothing else may escape (and under ASan/UBSan nothing may read or write out of bounds).
TEST(CalibratorMergeFuzz, TruncatedRandomAndEditedStatesOnlyGiveTypedErrors) {
  ConvNet net;
  const ir::Model m = quant::prepare(net.model());
  const quant::Plan plan = plan_of(m);
  const quant::CalibratorOptions options{.bins = 64, .threads = 1};
  quant::Calibrator src(m, plan.observed(), options);
  src.observe({{"x", random_tensor({2, 3, 8, 8}, 31)}});
  const std::string good = src.state();
  auto target = std::make_unique<quant::Calibrator>(m, plan.observed(), options);
  target->observe({{"x", random_tensor({2, 3, 8, 8}, 32)}});
  std::string before = target->state();
  int typed = 0, accepted = 0, cases = 0;
  auto attempt = [&](const std::string& bytes, bool check_unchanged) {
    ++cases;
    try {
      target->merge(bytes);
    } catch (const CalibrationError&) {
      ++typed;
      if (check_unchanged) {
        EXPECT_TRUE(target->state() == before);
      }
      return;
    } catch (const ArgumentError&) {
      ++typed;
      if (check_unchanged) {
        EXPECT_TRUE(target->state() == before);
      }
      return;
    }
    ++accepted;
    // Whatever was accepted must stay usable: ranges by every method, then a fresh target.
    for (const std::string& method : quant::method_names()) {
      try {
        quant::compute_ranges(plan, target->stats(), {.method = method}, quant::profile_options("onnxruntime"));
      } catch (const ArgumentError&) {
      }
    }
    target = std::make_unique<quant::Calibrator>(m, plan.observed(), options);
    before = target->state();
  };
  for (size_t len = 0; len < good.size(); ++len) attempt(good.substr(0, len), len % 97 == 0);
  std::mt19937 rng(2024);
  const std::string magic = good.substr(0, good.find('\n') + 1);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    attempt(i % 2 == 0 ? bytes : magic + bytes, i % 50 == 0);
  }
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = magic.size() + rng() % (bytes.size() - magic.size());
      bytes[at] = static_cast<char>(rng() % 4 == 0 ? 0xff : rng());
    }
    attempt(bytes, i % 50 == 0);
  }
  EXPECT_GT(cases, 5000);
  EXPECT_GT(typed, cases / 2);
  std::printf("merge fuzz: %d cases, %d typed errors, %d accepted\n", cases, typed, accepted);
}

}  // namespace
