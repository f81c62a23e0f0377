// tether/quant.h range methods, parameters and files from C++, on statistics built by hand whose
// answers are worked out in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tether/tether.h"

using namespace tether;
using namespace tether::quant;

namespace {

// 2048 bins over [0, 1): w = 1 / 2048.
constexpr double kW = 1.0 / 2048;

// 999 values in positive bin 5 (at 5.25 w), one value in bin 2000 (at 2000.5 w).
TensorStats spike_and_outlier() {
  TensorStats s(2048);
  s.positive.assign(2048, 0);
  s.negative.assign(2048, 0);
  s.positive[5] = 999;
  s.positive[2000] = 1;
  s.count = 1000;
  s.exponent = 0;
  s.min = static_cast<float>(5.25 * kW);
  s.max = static_cast<float>(2000.5 * kW);
  return s;
}

Range range_of(const TensorStats& s, const std::string& method, const Grid& g, double p = 99.999) {
  return compute_range(s, {.method = method, .percentile = p}, g);
}

const Grid kInt8{ir::DType::kInt8, false, false};
const Grid kInt8Sym{ir::DType::kInt8, true, false};

}  // namespace

TEST(QuantGrid, BoundsFollowOnnxruntime) {
  EXPECT_EQ(kInt8.qmin(), -128);
  EXPECT_EQ(kInt8.qmax(), 127);
  EXPECT_EQ(kInt8Sym.qmin(), -127);
  EXPECT_EQ((Grid{ir::DType::kUInt8, true, false}.qmin()), 0);
  EXPECT_EQ((Grid{ir::DType::kUInt8, true, false}.qmax()), 255);
  EXPECT_EQ((Grid{ir::DType::kInt8, true, true}.qmin()), -64);
  EXPECT_EQ((Grid{ir::DType::kInt8, false, true}.qmax()), 64);
  EXPECT_EQ((Grid{ir::DType::kUInt8, false, true}.qmax()), 127);
  EXPECT_THROW((Grid{ir::DType::kFloat32, false, false}.qmin()), ArgumentError);
}

TEST(QuantParams, WorkedExamples) {
  // [-1, 1] on int8: scale 2/255, zero point round(-128 + 127.5) = round(-0.5) = 0 (half to even).
  QParams q = qparams_for_range(-1, 1, kInt8);
  EXPECT_EQ(q.scale[0], static_cast<float>(2.0 / 255));
  EXPECT_EQ(q.zero_point[0], 0);
  // Symmetric int8: 2 / 254; uint8 [-1, 1]: round(127.5) = 128.
  EXPECT_EQ(qparams_for_range(-1, 1, kInt8Sym).scale[0], static_cast<float>(1.0 / 127));
  EXPECT_EQ(qparams_for_range(-1, 1, {ir::DType::kUInt8, false, false}).zero_point[0], 128);
  // [0.5, 2] widens to [0, 2]; [-3, -1] to [-3, 0]: zero point at the grid's top.
  EXPECT_EQ(qparams_for_range(0.5f, 2, kInt8).zero_point[0], -128);
  EXPECT_EQ(qparams_for_range(-3, -1, kInt8).zero_point[0], 127);
  // All zeros and subnormal ranges: scale 1, zero point 0.
  for (float v : {0.0f, 1e-40f}) {
    const QParams z = qparams_for_range(-v, v, kInt8);
    EXPECT_EQ(z.scale[0], 1.0f);
    EXPECT_EQ(z.zero_point[0], 0);
  }
}

TEST(QuantParams, BadRangesAreArgumentErrors) {
  try {
    qparams_for_range(2, 1, kInt8);
    FAIL();
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 1]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(qparams_for_range(std::nanf(""), 1, kInt8), ArgumentError);
  EXPECT_THROW(qparams_for_range(0, std::numeric_limits<float>::infinity(), kInt8), ArgumentError);
}

TEST(QuantParams, WeightPerChannelAndItsErrors) {
  // Channels along axis 0 of a 2x3 weight: [-1, 2, 0.5] and [0, 0, 0].
  std::vector<float> v = {-1, 2, 0.5f, 0, 0, 0};
  ir::Tensor w = ir::Tensor::copy_of(ir::DType::kFloat32, {2, 3}, v.data(), 24);
  w.set_name("fc.w");
  const QParams q = weight_qparams(w, 0, kInt8Sym);
  ASSERT_EQ(q.scale.size(), 2u);
  EXPECT_EQ(q.axis, 0);
  EXPECT_EQ(q.scale[0], static_cast<float>(4.0 / 254));
  EXPECT_EQ(q.scale[1], 1.0f);
  EXPECT_EQ(weight_qparams(w, -1, kInt8Sym).scale, std::vector<float>{static_cast<float>(4.0 / 254)});
  v[4] = std::nanf("");
  ir::Tensor bad = ir::Tensor::copy_of(ir::DType::kFloat32, {2, 3}, v.data(), 24);
  bad.set_name("fc.w");
  try {
    weight_qparams(bad, 1, kInt8Sym);
    FAIL();
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'fc.w' holds nan in channel 1 along axis 1"), std::string::npos) << e.what();
  }
}

TEST(QuantMethods, MinmaxAndPercentileOnASpikeAndAnOutlier) {
  const TensorStats s = spike_and_outlier();
  const Range mm = range_of(s, "minmax", kInt8);
  EXPECT_EQ(mm.min, s.min);
  EXPECT_EQ(mm.max, s.max);
  // 99% of 1000 = 990 is reached in bin 5: t = 6 w, then clamped to [min, max] = [5.25 w, ...].
  for (const Grid& g : {kInt8, kInt8Sym}) {
    const Range p = range_of(s, "percentile", g, 99.0);
    EXPECT_EQ(p.min, s.min);
    EXPECT_EQ(p.max, static_cast<float>(6 * kW));
  }
  // 100 keeps every value: minmax.
  const Range all = range_of(s, "percentile", kInt8, 100.0);
  EXPECT_EQ(all.min, s.min);
  EXPECT_EQ(all.max, s.max);
}

TEST(QuantMethods, EntropyAndMseStayWithinTheExtremes) {
  const TensorStats s = spike_and_outlier();
  for (const char* method : {"entropy", "mse"}) {
    const Range r = range_of(s, method, kInt8Sym);
    EXPECT_LE(r.max, s.max) << method;
    EXPECT_EQ(r.min, -r.max) << method;
  }
  EXPECT_LE(range_of(s, "sqnr", kInt8Sym).max, s.max);
  // Bin 2000 is the last non-empty bin and bin 1999 is empty: every entropy candidate below
  // 2001 bins has outliers over an empty last bin (infinite KL), so the whole range is kept.
  EXPECT_EQ(range_of(s, "entropy", kInt8).max, s.max);
  // Fewer non-empty bins than levels: entropy falls back to minmax.
  TensorStats few(16);
  few.positive.assign(16, 0);
  few.negative.assign(16, 0);
  few.positive[3] = 10;
  few.count = 10;
  few.exponent = 0;
  few.min = few.max = 3.5f / 16;
  EXPECT_EQ(range_of(few, "entropy", kInt8).max, few.max);
}

TEST(QuantMethods, SqnrAndClippedFractionWorkedExamples) {
  // Values at the centres of bins 0 and 1 (0.5 w, 1.5 w) with the range [0, 255 w] on uint8:
  // scale w, so they sit at 0.5 and 1.5 steps and round (half to even) to 0 and 2: errors of
  // 0.5 w each, signal 0.25 + 2.25 (w^2), noise 0.5: SQNR = 10 log10(5).
  TensorStats s(2048);
  s.positive.assign(2048, 0);
  s.negative.assign(2048, 0);
  s.positive[0] = s.positive[1] = 1;
  s.count = 2;
  s.exponent = 0;
  s.min = static_cast<float>(0.5 * kW);
  s.max = static_cast<float>(1.5 * kW);
  EXPECT_DOUBLE_EQ(estimate_sqnr_db(s, {0, static_cast<float>(255 * kW)}, {ir::DType::kUInt8, false, false}),
                   10 * std::log10(5.0));
  // Ten values spread over bin 5 ([5 w, 6 w]): the range [5 w, 5.5 w] clips half of them.
  TensorStats c(2048);
  c.positive.assign(2048, 0);
  c.negative.assign(2048, 0);
  c.positive[5] = 10;
  c.count = 10;
  c.exponent = 0;
  c.min = static_cast<float>(5 * kW);
  c.max = static_cast<float>(6 * kW);
  EXPECT_DOUBLE_EQ(clipped_fraction(c, {static_cast<float>(5 * kW), static_cast<float>(5.5 * kW)}), 0.5);
  EXPECT_DOUBLE_EQ(clipped_fraction(c, {c.min, c.max}), 0.0);
  EXPECT_DOUBLE_EQ(clipped_fraction(c, {-1, 0}), 1.0);
}

TEST(QuantMethods, EmptyAndZeroStatistics) {
  const TensorStats empty(64);
  TensorStats zeros(64);
  const std::vector<float> z(7, 0.0f);
  zeros.observe(z.data(), {7});
  for (const std::string& m : method_names()) {
    for (const TensorStats* s : {&empty, static_cast<const TensorStats*>(&zeros)}) {
      const Range r = range_of(*s, m, kInt8);
      EXPECT_EQ(r.min, 0.0f) << m;
      EXPECT_EQ(r.max, 0.0f) << m;
    }
  }
  EXPECT_EQ(estimate_sqnr_db(zeros, {0, 0}, kInt8), std::numeric_limits<double>::infinity());
  EXPECT_EQ(clipped_fraction(zeros, {0.5f, 1}), 1.0);
}

TEST(QuantMethods, OptionErrorsNameWhatIsWrong) {
  const TensorStats s = spike_and_outlier();
  try {
    range_of(s, "kl", kInt8);
    FAIL();
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("known methods: minmax, percentile, entropy, mse, sqnr"), std::string::npos);
  }
  for (double p : {0.0, 100.01, std::nan("")}) EXPECT_THROW(range_of(s, "percentile", kInt8, p), ArgumentError);
  EXPECT_THROW(compute_range(s, {.method = "entropy", .entropy_levels = 1}, kInt8), ArgumentError);
  TensorStats uneven = s;
  uneven.negative.pop_back();
  EXPECT_THROW(range_of(uneven, "mse", kInt8), ArgumentError);
  EXPECT_THROW(clipped_fraction(s, {1, 0}), ArgumentError);
}

TEST(QuantFiles, TensorRtAndNcnnRoundTripsAndErrors) {
  const std::map<std::string, float> scales = {{"prob", 1.0f / 127}, {"a b: c", 0.5f}};
  const std::string text = write_tensorrt_cache(scales, "TRT-8601-EntropyCalibration2");
  EXPECT_EQ(text, "TRT-8601-EntropyCalibration2\na b: c: 3f000000\nprob: 3c010204\n");
  EXPECT_EQ(read_tensorrt_cache(text), scales);
  try {
    read_tensorrt_cache("TRT-8601-EntropyCalibration2\nprob 3c010204\n");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 'prob 3c010204'"), std::string::npos) << e.what();
  }
  const NcnnTable table{{{"conv1", {127.0f, 0.5f}}}, {{"conv1", 12.75f}}};
  const std::string ncnn = write_ncnn_table(table);
  EXPECT_EQ(ncnn, "conv1_param_0 127 0.5\nconv1 12.75\n");
  const NcnnTable back = read_ncnn_table(ncnn);
  EXPECT_EQ(back.weight_scales, table.weight_scales);
  EXPECT_EQ(back.input_scales, table.input_scales);
  EXPECT_THROW(read_ncnn_table("conv1 x\n"), ParseError);
  EXPECT_THROW(write_ncnn_table({{}, {{"has space", 1.0f}}}), ArgumentError);
}
