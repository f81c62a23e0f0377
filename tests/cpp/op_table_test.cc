// The shared op table (tests/python/_op_cases.py) on the CPU engine, from files: each case's
// model with its feeds as input defaults and the oracle's outputs beside it
// (tests/python/_op_table_files.py writes them into the folder TETHER_OP_TABLE_DIR names). So the
// table runs where Python does not: under qemu-aarch64 on the NEON kernels (Makefile,
// test-arm64), and on this machine (tests/python/test_op_table_files.py). Floats must be within
// the case's tolerance of the largest magnitude, other types equal. Without the folder (plain
// ctest) the test is skipped: the Makefile and the Python test drive it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"

namespace {

using namespace tether;
using ir::DType;
using ir::Tensor;

std::string meta(const ir::Model& m, const std::string& key) {
  for (const auto& [k, v] : m.metadata)
    if (k == key) return v;
  return "";
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  float v = exp == 0    ? std::ldexp(static_cast<float>(frac), -24)
            : exp == 31 ? (frac ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(frac | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// The elements of a floating tensor as double; empty for other dtypes.
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32: v[i] = t.data<float>()[i]; break;
      case DType::kFloat64: v[i] = t.data<double>()[i]; break;
      case DType::kFloat16: v[i] = half_to_float(static_cast<const uint16_t*>(t.raw_data())[i]); break;
      case DType::kBFloat16: {
        const uint32_t bits = uint32_t{static_cast<const uint16_t*>(t.raw_data())[i]} << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        v[i] = f;
        break;
      }
      default: return {};
    }
  }
  return v;
}

// "" when `got` matches `want`, else what differs.
std::string mismatch(const Tensor& got, const Tensor& want, double rtol) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + std::string(ir::dtype_name(got.dtype())) + ", expected " +
           std::string(ir::dtype_name(want.dtype()));
  if (got.dims() != want.dims()) return "dims differ";
  const std::vector<double> g = as_doubles(got), w = as_doubles(want);
  if (g.empty() && w.empty()) {
    if (want.dtype() == DType::kString) return got.string_values() == want.string_values() ? "" : "strings differ";
    return std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())) == 0 ? "" : "values differ";
  }
  double scale = 0, err = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      if (!(std::isnan(w[i]) && std::isnan(g[i]))) return "NaN at element " + std::to_string(i);
      continue;
    }
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) return "infinity differs at element " + std::to_string(i);
      continue;
    }
    scale = std::max(scale, std::fabs(w[i]));
    err = std::max(err, std::fabs(g[i] - w[i]));
  }
  if (err > rtol * std::max(scale, 1e-30) && err > 0)
    return "largest error " + std::to_string(err) + " against a largest magnitude of " + std::to_string(scale);
  return "";
}

TEST(OpTable, TheCpuEngineMatchesTheOracleOnEveryCase) {
  const char* dir = std::getenv("TETHER_OP_TABLE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "TETHER_OP_TABLE_DIR is not set (tests/python/_op_table_files.py writes the cases)";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".onnx" && name.find(".expected.") == std::string::npos) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no cases in " << dir;
  int passed = 0;
  for (const auto& file : files) {
    std::filesystem::path expected_file = file;
    expected_file.replace_extension(".expected.onnx");
    const ir::Model expected = ir::load_model(expected_file.string());
    const std::string id = meta(expected, "case");
    const double rtol = std::atof(meta(expected, "rtol").c_str());
    try {
      auto session = engine::compile(ir::load_model(file.string()), {.threads = 1});
      const std::vector<Tensor> got = session->run({});
      ASSERT_EQ(got.size(), session->outputs().size()) << id;
      bool ok = true;
      for (size_t k = 0; k < got.size(); ++k) {
        const ir::Value* want = expected.graph().find(session->outputs()[k].name);
        ASSERT_TRUE(want != nullptr && want->has_initializer()) << id << ": no expected " << session->outputs()[k].name;
        const std::string why = mismatch(got[k], want->initializer(), rtol);
        EXPECT_EQ(why, "") << id << ", output " << session->outputs()[k].name;
        ok = ok && why.empty();
      }
      passed += ok;
    } catch (const Error& e) {
      ADD_FAILURE() << id << ": " << e.what();
    }
  }
  std::cout << "op-table: " << passed << " of " << files.size() << " cases match their oracle\n";
}

}  // namespace
