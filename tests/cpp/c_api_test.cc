// The C API (tether/c_api.h): a model built with the C++ builder runs through the C handles to
// the values plain loops compute, shapes and names read back as the model declares them, every
// misuse gives its status code and a message naming the argument, and results outlive the
// session, the model and the caller's input buffers. c_api_test_c.c drives the same API from C.

#include "tether/c_api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tether/builder.h"
#include "tether/onnx.h"
#include "test_util.h"

using namespace tether;

extern "C" int tether_c_api_test_run_from_c(const void* model_bytes, size_t size, const float* x, int64_t batch,
                                            float* y, size_t y_count, char* error, size_t error_size);

namespace {

constexpr int64_t kIn = 3;
constexpr int64_t kOut = 2;
const float kW[kIn * kOut] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
const float kB[kOut] = {0.125f, -0.5f};

// y = Relu(x @ W + b) for x of shape [batch, 3], batch symbolic.
std::string mlp_bytes() {
  GraphBuilder b("mlp");
  b.input("x", ir::DType::kFloat32, ir::Shape({ir::Dim::symbol("batch"), ir::Dim(kIn)}));
  b.initializer("w", ir::Tensor::copy_of(ir::DType::kFloat32, {kIn, kOut}, kW, sizeof kW));
  b.initializer("b", ir::Tensor::copy_of(ir::DType::kFloat32, {kOut}, kB, sizeof kB));
  std::string h = b.node("MatMul", {"x", "w"})[0];
  h = b.node("Add", {h, "b"})[0];
  b.node("Relu", {h}, {}, {.outputs = {"y"}});
  b.output("y");
  return ir::serialize_model(b.build());
}

std::vector<float> mlp_by_loops(const std::vector<float>& x, int64_t batch) {
  std::vector<float> y(batch * kOut);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t j = 0; j < kOut; ++j) {
      double acc = kB[j];
      for (int64_t k = 0; k < kIn; ++k) acc += static_cast<double>(x[n * kIn + k]) * kW[k * kOut + j];
      y[n * kOut + j] = static_cast<float>(std::max(acc, 0.0));
    }
  return y;
}

std::vector<float> sample_x(int64_t batch) {
  std::vector<float> x(batch * kIn);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 7 % 11) - 5) / 4.0f;
  return x;
}

// Owns the handles of one test; frees them however the test ends.
struct Handles {
  tether_model* model = nullptr;
  tether_session* session = nullptr;
  tether_result* result = nullptr;
  ~Handles() {
    tether_result_free(&result);
    tether_session_free(&session);
    tether_model_free(&model);
  }
};

tether_session* compile_mlp(Handles& h) {
  const std::string bytes = mlp_bytes();
  EXPECT_EQ(tether_model_load_bytes(bytes.data(), bytes.size(), nullptr, &h.model), TETHER_OK) << tether_last_error();
  tether_compile_options options;
  EXPECT_EQ(tether_compile_options_init(&options), TETHER_OK);
  options.threads = 1;
  EXPECT_EQ(tether_session_compile(h.model, &options, &h.session), TETHER_OK) << tether_last_error();
  return h.session;
}

tether_tensor float_input(const char* name, const std::vector<float>& data, const std::vector<int64_t>& dims) {
  return {name, TETHER_DTYPE_FLOAT32, dims.size(), dims.data(), data.data(), data.size() * sizeof(float)};
}

// Runs the session on one input and returns the status; the message must name `expect_in_message`.
void expect_run_error(const tether_session* session, const tether_tensor& input, tether_status status,
                      const std::string& expect_in_message) {
  tether_result* result = nullptr;
  EXPECT_EQ(tether_session_run(session, &input, 1, &result), status) << tether_last_error();
  EXPECT_EQ(result, nullptr);
  EXPECT_NE(std::string(tether_last_error()).find(expect_in_message), std::string::npos) << tether_last_error();
}

}  // namespace

TEST(CApi, MlpRunsToTheValuesOfPlainLoops) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  for (int64_t batch : {1, 5}) {
    const std::vector<float> x = sample_x(batch);
    const std::vector<int64_t> dims = {batch, kIn};
    const tether_tensor in = float_input("x", x, dims);
    tether_result_free(&h.result);
    ASSERT_EQ(tether_session_run(h.session, &in, 1, &h.result), TETHER_OK) << tether_last_error();
    size_t count = 0;
    ASSERT_EQ(tether_result_count(h.result, &count), TETHER_OK);
    ASSERT_EQ(count, 1u);
    tether_tensor y;
    ASSERT_EQ(tether_result_find(h.result, "y", &y), TETHER_OK) << tether_last_error();
    EXPECT_STREQ(y.name, "y");
    EXPECT_EQ(y.dtype, TETHER_DTYPE_FLOAT32);
    ASSERT_EQ(y.rank, 2u);
    EXPECT_EQ(y.dims[0], batch);
    EXPECT_EQ(y.dims[1], kOut);
    ASSERT_EQ(y.nbytes, batch * kOut * sizeof(float));
    const std::vector<float> expected = mlp_by_loops(x, batch);
    const auto* got = static_cast<const float*>(y.data);
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6f) << "element " << i;
  }
}

TEST(CApi, InputsAndOutputsReadBackWithSymbolicDimsAsMinusOne) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  size_t inputs = 0, outputs = 0;
  ASSERT_EQ(tether_session_input_count(h.session, &inputs), TETHER_OK);
  ASSERT_EQ(tether_session_output_count(h.session, &outputs), TETHER_OK);
  ASSERT_EQ(inputs, 1u);
  ASSERT_EQ(outputs, 1u);
  tether_tensor_info info;
  ASSERT_EQ(tether_session_input_info(h.session, 0, &info), TETHER_OK);
  EXPECT_STREQ(info.name, "x");
  EXPECT_EQ(info.dtype, TETHER_DTYPE_FLOAT32);
  ASSERT_EQ(info.rank, 2);
  EXPECT_EQ(info.dims[0], -1);
  EXPECT_EQ(info.dims[1], kIn);
  ASSERT_EQ(tether_session_output_info(h.session, 0, &info), TETHER_OK);
  EXPECT_STREQ(info.name, "y");
  ASSERT_EQ(info.rank, 2);
  EXPECT_EQ(info.dims[0], -1);
  EXPECT_EQ(info.dims[1], kOut);
  EXPECT_EQ(tether_session_input_info(h.session, 1, &info), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("index 1 is out of range; the session has 1 inputs"), std::string::npos)
      << tether_last_error();
  EXPECT_EQ(tether_session_output_info(h.session, 7, &info), TETHER_ERROR_ARGUMENT);
}

TEST(CApi, ModelLoadsFromAPathAndAMissingFileIsModelNotFound) {
  tether_test::TempDir dir;
  tether_test::write_file(dir.file("mlp.onnx"), mlp_bytes());
  Handles h;
  ASSERT_EQ(tether_model_load(dir.file("mlp.onnx").c_str(), &h.model), TETHER_OK) << tether_last_error();
  ASSERT_EQ(tether_session_compile(h.model, nullptr, &h.session), TETHER_OK) << tether_last_error();
  const std::vector<float> x = sample_x(2);
  const std::vector<int64_t> dims = {2, kIn};
  const tether_tensor in = float_input("x", x, dims);
  ASSERT_EQ(tether_session_run(h.session, &in, 1, &h.result), TETHER_OK) << tether_last_error();
  tether_tensor y;
  ASSERT_EQ(tether_result_output(h.result, 0, &y), TETHER_OK);
  const std::vector<float> expected = mlp_by_loops(x, 2);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(static_cast<const float*>(y.data)[i], expected[i], 1e-6f);

  tether_model* missing = reinterpret_cast<tether_model*>(&h);  // must be overwritten with NULL
  const std::string path = dir.file("absent.onnx");
  EXPECT_EQ(tether_model_load(path.c_str(), &missing), TETHER_ERROR_MODEL_NOT_FOUND);
  EXPECT_EQ(missing, nullptr);
  EXPECT_NE(std::string(tether_last_error()).find("absent.onnx"), std::string::npos) << tether_last_error();
}

TEST(CApi, BytesThatAreNotOnnxAreAParseError) {
  const char garbage[] = "\x0a\xff\xff\xff\xff\x0fnot a model";
  tether_model* model = nullptr;
  EXPECT_EQ(tether_model_load_bytes(garbage, sizeof garbage - 1, nullptr, &model), TETHER_ERROR_PARSE);
  EXPECT_EQ(model, nullptr);
  EXPECT_STRNE(tether_last_error(), "");
  const std::string bytes = mlp_bytes();
  EXPECT_EQ(tether_model_load_bytes(bytes.data(), bytes.size() / 2, nullptr, &model), TETHER_ERROR_PARSE);
  EXPECT_EQ(model, nullptr);
}

TEST(CApi, NullPointersAreArgumentErrorsNamingTheArgument) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  size_t count = 0;
  tether_tensor_info info;
  tether_tensor t;
  tether_result* result = nullptr;
  const auto expect_null = [](tether_status s, const char* message) {
    EXPECT_EQ(s, TETHER_ERROR_ARGUMENT);
    EXPECT_NE(std::string(tether_last_error()).find(message), std::string::npos) << tether_last_error();
  };
  tether_model* model = nullptr;
  expect_null(tether_model_load(nullptr, &model), "tether_model_load: 'path' is NULL");
  expect_null(tether_model_load("x.onnx", nullptr), "tether_model_load: 'model' is NULL");
  expect_null(tether_model_load_bytes(nullptr, 10, nullptr, &model), "tether_model_load_bytes: 'data' is NULL");
  expect_null(tether_compile_options_init(nullptr), "'options' is NULL");
  tether_session* session = nullptr;
  expect_null(tether_session_compile(nullptr, nullptr, &session), "tether_session_compile: 'model' is NULL");
  expect_null(tether_session_compile(h.model, nullptr, nullptr), "tether_session_compile: 'session' is NULL");
  expect_null(tether_session_input_count(nullptr, &count), "'session' is NULL");
  expect_null(tether_session_output_count(h.session, nullptr), "'count' is NULL");
  expect_null(tether_session_input_info(nullptr, 0, &info), "tether_session_input_info: 'session' is NULL");
  expect_null(tether_session_output_info(h.session, 0, nullptr), "tether_session_output_info: 'info' is NULL");
  expect_null(tether_session_run(nullptr, nullptr, 0, &result), "tether_session_run: 'session' is NULL");
  expect_null(tether_session_run(h.session, nullptr, 1, &result), "tether_session_run: 'inputs' is NULL");
  expect_null(tether_session_run(h.session, nullptr, 0, nullptr), "tether_session_run: 'result' is NULL");
  expect_null(tether_result_count(nullptr, &count), "tether_result_count: 'result' is NULL");
  expect_null(tether_result_output(nullptr, 0, &t), "tether_result_output: 'result' is NULL");
  expect_null(tether_result_find(nullptr, "y", &t), "tether_result_find: 'result' is NULL");

  const std::vector<float> x = sample_x(1);
  const std::vector<int64_t> dims = {1, kIn};
  tether_tensor in = float_input(nullptr, x, dims);
  expect_run_error(h.session, in, TETHER_ERROR_ARGUMENT, "input 0 has a NULL name");
  in = float_input("x", x, dims);
  in.data = nullptr;
  expect_run_error(h.session, in, TETHER_ERROR_ARGUMENT, "input 0 'x' has NULL data");
  in = float_input("x", x, dims);
  in.dims = nullptr;
  expect_run_error(h.session, in, TETHER_ERROR_ARGUMENT, "input 0 'x' has rank 2 and NULL dims");
  ASSERT_EQ(tether_session_run(h.session, &in, 0, &h.result), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("'x'"), std::string::npos) << tether_last_error();
  // Freeing through a NULL address, or a NULL handle, does nothing.
  tether_model_free(nullptr);
  tether_session_free(nullptr);
  tether_result_free(nullptr);
}

TEST(CApi, WrongNameDtypeRankSizeOrDimIsAnArgumentErrorNamingTheInput) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  const std::vector<float> x = sample_x(2);
  const std::vector<int64_t> dims = {2, kIn};
  expect_run_error(h.session, float_input("z", x, dims), TETHER_ERROR_ARGUMENT, "'z'");

  std::vector<int64_t> ints(x.size());
  tether_tensor wrong_dtype = {"x", TETHER_DTYPE_INT64, 2, dims.data(), ints.data(), ints.size() * sizeof(int64_t)};
  expect_run_error(h.session, wrong_dtype, TETHER_ERROR_ARGUMENT, "'x'");

  const std::vector<int64_t> flat = {2 * kIn};
  expect_run_error(h.session, float_input("x", x, flat), TETHER_ERROR_ARGUMENT, "'x'");

  const std::vector<int64_t> wide = {1, 2 * kIn};
  expect_run_error(h.session, float_input("x", x, wide), TETHER_ERROR_ARGUMENT, "'x'");

  tether_tensor short_buffer = float_input("x", x, dims);
  short_buffer.nbytes -= 4;
  expect_run_error(h.session, short_buffer, TETHER_ERROR_ARGUMENT,
                   "input 0 'x' is float32 [2, 3], which takes 24 bytes, but nbytes is 20");

  const std::vector<int64_t> negative = {-2, kIn};
  expect_run_error(h.session, float_input("x", x, negative), TETHER_ERROR_ARGUMENT, "'x' has a negative dim");

  tether_tensor unknown_dtype = float_input("x", x, dims);
  unknown_dtype.dtype = 99;
  expect_run_error(h.session, unknown_dtype, TETHER_ERROR_ARGUMENT, "'x' has dtype 99, which is no ONNX element type");

  tether_tensor strings = float_input("x", x, dims);
  strings.dtype = 8;
  expect_run_error(h.session, strings, TETHER_ERROR_UNSUPPORTED, "'x' is a string tensor");

  const tether_tensor twice[2] = {float_input("x", x, dims), float_input("x", x, dims)};
  tether_result* result = nullptr;
  EXPECT_EQ(tether_session_run(h.session, twice, 2, &result), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("'x' is given twice"), std::string::npos) << tether_last_error();
}

TEST(CApi, CompileErrorsMapToTheirStatus) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  tether_compile_options options;
  ASSERT_EQ(tether_compile_options_init(&options), TETHER_OK);
  tether_session* session = nullptr;
  options.device = "tpu";
  EXPECT_EQ(tether_session_compile(h.model, &options, &session), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("tpu"), std::string::npos) << tether_last_error();
  EXPECT_EQ(session, nullptr);
  options.device = "cpu";
  options.threads = -1;
  EXPECT_EQ(tether_session_compile(h.model, &options, &session), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("threads"), std::string::npos) << tether_last_error();

  GraphBuilder b("custom");
  b.input("x", ir::DType::kFloat32, ir::Shape::of({2}));
  b.node("Frobnicate", {"x"}, {}, {.name = "frob", .domain = "com.example", .outputs = {"y"}});
  b.output("y");
  const std::string bytes = ir::serialize_model(b.build());
  tether_model* custom = nullptr;
  ASSERT_EQ(tether_model_load_bytes(bytes.data(), bytes.size(), nullptr, &custom), TETHER_OK) << tether_last_error();
  EXPECT_EQ(tether_session_compile(custom, nullptr, &session), TETHER_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(tether_last_error()).find("frob"), std::string::npos) << tether_last_error();
  tether_model_free(&custom);
}

TEST(CApi, RunOverTheMemoryLimitIsAMemoryLimitError) {
  const std::string bytes = mlp_bytes();
  Handles h;
  ASSERT_EQ(tether_model_load_bytes(bytes.data(), bytes.size(), nullptr, &h.model), TETHER_OK);
  tether_compile_options options;
  ASSERT_EQ(tether_compile_options_init(&options), TETHER_OK);
  options.max_memory = 64;
  ASSERT_EQ(tether_session_compile(h.model, &options, &h.session), TETHER_OK) << tether_last_error();
  const std::vector<float> x = sample_x(1000);
  const std::vector<int64_t> dims = {1000, kIn};
  expect_run_error(h.session, float_input("x", x, dims), TETHER_ERROR_MEMORY_LIMIT, "bytes");
}

TEST(CApi, ResultOutlivesSessionModelAndInputBuffers) {
  // Both outputs hold x's bytes unchanged (x itself, and x reshaped): neither may keep
  // pointing into the caller's buffer.
  GraphBuilder b("pass");
  b.input("x", ir::DType::kFloat32, ir::Shape::of({2, 3}));
  b.output("x");
  b.node("Reshape", {"x", b.initializer_ints("shape", {3, 2})}, {}, {.outputs = {"y"}});
  b.output("y");
  const std::string bytes = ir::serialize_model(b.build());
  Handles h;
  ASSERT_EQ(tether_model_load_bytes(bytes.data(), bytes.size(), nullptr, &h.model), TETHER_OK);
  ASSERT_EQ(tether_session_compile(h.model, nullptr, &h.session), TETHER_OK) << tether_last_error();
  tether_model_free(&h.model);
  EXPECT_EQ(h.model, nullptr);

  auto x = std::make_unique<std::vector<float>>(sample_x(2));
  const std::vector<float> expected = *x;
  const std::vector<int64_t> dims = {2, 3};
  const tether_tensor in = float_input("x", *x, dims);
  ASSERT_EQ(tether_session_run(h.session, &in, 1, &h.result), TETHER_OK) << tether_last_error();
  std::fill(x->begin(), x->end(), -7.0f);
  x.reset();
  tether_session_free(&h.session);
  EXPECT_EQ(h.session, nullptr);

  for (const char* name : {"x", "y"}) {
    tether_tensor out;
    ASSERT_EQ(tether_result_find(h.result, name, &out), TETHER_OK) << tether_last_error();
    ASSERT_EQ(out.nbytes, expected.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(out.data, expected.data(), out.nbytes), 0) << name;
  }
}

TEST(CApi, FreedHandlesAreNullAndRefusedNotReused) {
  Handles h;
  ASSERT_NE(compile_mlp(h), nullptr);
  tether_session_free(&h.session);
  ASSERT_EQ(h.session, nullptr);
  tether_session_free(&h.session);  // a second free is harmless
  size_t count = 0;
  EXPECT_EQ(tether_session_input_count(h.session, &count), TETHER_ERROR_ARGUMENT);
  tether_result* result = nullptr;
  EXPECT_EQ(tether_session_run(h.session, nullptr, 0, &result), TETHER_ERROR_ARGUMENT);
  EXPECT_NE(std::string(tether_last_error()).find("'session' is NULL"), std::string::npos);
  tether_result_free(&h.result);
  EXPECT_EQ(tether_result_count(h.result, &count), TETHER_ERROR_ARGUMENT);
}

TEST(CApi, EveryStatusHasItsName) {
  EXPECT_STREQ(tether_status_name(TETHER_OK), "TETHER_OK");
  EXPECT_STREQ(tether_status_name(TETHER_ERROR_MEMORY_LIMIT), "TETHER_ERROR_MEMORY_LIMIT");
  EXPECT_STREQ(tether_status_name(TETHER_ERROR_INTERNAL), "TETHER_ERROR_INTERNAL");
  EXPECT_STREQ(tether_status_name(static_cast<tether_status>(99)), "unknown status");
  EXPECT_STREQ(tether_version(), TETHER_EXPECTED_VERSION);
}

TEST(CApi, ProgramWrittenInCRunsTheMlp) {
  const std::string bytes = mlp_bytes();
  const int64_t batch = 3;
  const std::vector<float> x = sample_x(batch);
  std::vector<float> y(batch * kOut, -1.0f);
  char error[256] = "";
  ASSERT_EQ(tether_c_api_test_run_from_c(bytes.data(), bytes.size(), x.data(), batch, y.data(), y.size(), error,
                                         sizeof error),
            0)
      << error;
  const std::vector<float> expected = mlp_by_loops(x, batch);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-6f) << "element " << i;
  // The same C code reports a failure with the library's message.
  ASSERT_NE(tether_c_api_test_run_from_c("junk", 4, x.data(), batch, y.data(), y.size(), error, sizeof error), 0);
  EXPECT_STRNE(error, "");
}
