// ONNX bytes crafted by hand with the test's own wire writer: tensors in typed fields and
// protobuf's merge rules, which tether's writer never produces, and bad input through the C++
// API: corrupt bytes, missing files, external data that is missing, escapes the model's
// folder or lies out of bounds, and malformed graphs. Each family has a well-formed control
// that loads, so that a rejection is known to come from the one thing that was broken.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tether/error.h"
#include "tether/onnx.h"

namespace {

using namespace tether::ir;
using tether_test::Proto;
using tether_test::TempDir;
namespace of = tether_test::onnx_field;
namespace fs = std::filesystem;

constexpr int kFloat = 1;

std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

Proto entry(const std::string& key, const std::string& value) {
  return Proto().bytes(of::kEntryKey, key).bytes(of::kEntryValue, value);
}

// A float32 [2] initializer "w" whose data lies in an external file.
Proto external_tensor(const std::optional<std::string>& location, const std::optional<std::string>& offset,
                      const std::optional<std::string>& length) {
  Proto t;
  t.varint(of::kTensorDims, 2).varint(of::kTensorDataType, kFloat).bytes(of::kTensorName, "w");
  if (location) t.msg(of::kTensorExternalData, entry("location", *location));
  if (offset) t.msg(of::kTensorExternalData, entry("offset", *offset));
  if (length) t.msg(of::kTensorExternalData, entry("length", *length));
  t.varint(of::kTensorDataLocation, 1);
  return t;
}

// A float32 [2] initializer "w" with raw_data inside.
Proto inside_tensor(const std::string& raw, int dtype = kFloat, int64_t dim = 2) {
  Proto t;
  t.varint(of::kTensorDims, static_cast<uint64_t>(dim)).varint(of::kTensorDataType, static_cast<uint64_t>(dtype));
  t.bytes(of::kTensorName, "w").bytes(of::kTensorRawData, raw);
  return t;
}

Proto node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
           const std::string& name) {
  Proto n;
  for (const auto& i : inputs) n.bytes(of::kNodeInput, i);
  for (const auto& o : outputs) n.bytes(of::kNodeOutput, o);
  n.bytes(of::kNodeName, name).bytes(of::kNodeOpType, op);
  return n;
}

Proto value_info(const std::string& name) { return Proto().bytes(of::kValueInfoName, name); }

std::string model_bytes(const Proto& graph, std::optional<uint64_t> ir_version = 8) {
  Proto m;
  if (ir_version) m.varint(of::kModelIrVersion, *ir_version);
  m.msg(of::kModelGraph, graph);
  m.msg(of::kModelOpsetImport, Proto().bytes(of::kOpsetDomain, "").varint(of::kOpsetVersion, 18));
  return m.str();
}

// A model whose graph has the one initializer `w` and outputs it.
std::string model_with(const Proto& tensor) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInitializer, tensor).msg(of::kGraphOutput, value_info("w"));
  return model_bytes(g);
}

Model load_bytes(const std::string& bytes, const std::string& base_dir = "") {
  LoadOptions o;
  o.base_dir = base_dir;
  return load_model_from_bytes(bytes.data(), bytes.size(), o);
}

std::vector<float> weights(const Model& m) {
  const Tensor& t = m.graph().find("w")->initializer();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

// Expects `fn` to throw E with every one of `parts` in its message.
template <typename E, typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// ---- the controls -------------------------------------------------------------------------------

TEST(OnnxHandmade, HandMadeModelWithRawDataLoads) {
  Model m = load_bytes(model_with(inside_tensor(float_bytes({1.5f, -4.0f}))));
  EXPECT_EQ(weights(m), (std::vector<float>{1.5f, -4.0f}));
  EXPECT_EQ(m.ir_version, 8);
  EXPECT_EQ(m.opset(""), 18);
}

TEST(OnnxHandmade, HandMadeModelWithExternalDataLoads) {
  TempDir dir;
  // Eight bytes of something else first, so that the offset matters.
  tether_test::write_file(dir.file("d.bin"), float_bytes({9.0f, 9.0f, 1.5f, -4.0f}));
  const std::string bytes = model_with(external_tensor("d.bin", "8", "8"));
  tether_test::write_file(dir.file("m.onnx"), bytes);
  EXPECT_EQ(weights(load_model(dir.file("m.onnx"))), (std::vector<float>{1.5f, -4.0f}));
  EXPECT_EQ(weights(load_bytes(bytes, dir.path().string())), (std::vector<float>{1.5f, -4.0f}));
  // Without offset and length: from the start, as many bytes as the tensor needs.
  EXPECT_EQ(weights(load_bytes(model_with(external_tensor("d.bin", std::nullopt, std::nullopt)), dir.path().string())),
            (std::vector<float>{9.0f, 9.0f}));
}

// ---- typed fields and protobuf merge rules ----------------------------------------------------

constexpr uint32_t kFloatData = 4, kInt32Data = 5, kInt64Data = 7, kDoubleData = 10, kUInt64Data = 11;

std::string varints(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t x : values) {
    auto v = static_cast<uint64_t>(x);  // negative int32/int64 entries take ten bytes
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  return out;
}

template <typename T>
std::string fixed(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// An initializer "w" of `dtype` and `dims` whose values lie in typed field `field` (packed).
Proto typed_tensor(int dtype, const std::vector<int64_t>& dims, uint32_t field, const std::string& packed) {
  Proto t;
  for (int64_t d : dims) t.varint(of::kTensorDims, static_cast<uint64_t>(d));
  t.varint(of::kTensorDataType, static_cast<uint64_t>(dtype)).bytes(of::kTensorName, "w");
  if (!packed.empty()) t.bytes(field, packed);
  return t;
}

// The raw bytes of initializer "w" after loading.
std::vector<uint8_t> raw_of(const Proto& tensor) {
  const Model m = load_bytes(model_with(tensor));
  const Tensor& t = m.graph().find("w")->initializer();
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  return std::vector<uint8_t>(p, p + values.size() * sizeof(T));
}

TEST(OnnxHandmade, TypedFieldsDecodeToRawLittleEndianStorage) {
  using DT = DType;
  auto code = [](DT t) { return static_cast<int>(t); };
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kFloat32), {2}, kFloatData, fixed<float>({1.5f, -4.0f}))),
            bytes_of<float>({1.5f, -4.0f}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kComplex64), {1}, kFloatData, fixed<float>({1.0f, -2.0f}))),
            bytes_of<float>({1.0f, -2.0f}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kFloat64), {2}, kDoubleData, fixed<double>({0.1, -1e300}))),
            bytes_of<double>({0.1, -1e300}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kInt64), {3}, kInt64Data, varints({1, -2, int64_t{1} << 40}))),
            bytes_of<int64_t>({1, -2, int64_t{1} << 40}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kInt32), {2}, kInt32Data, varints({-7, 9}))), bytes_of<int32_t>({-7, 9}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kInt8), {3}, kInt32Data, varints({-1, 127, -128}))),
            (std::vector<uint8_t>{0xFF, 0x7F, 0x80}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kUInt16), {2}, kInt32Data, varints({65535, 1}))),
            bytes_of<uint16_t>({65535, 1}));
  // float16 travels as its bit pattern in int32_data.
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kFloat16), {2}, kInt32Data, varints({0x3C00, 0xC000}))),
            bytes_of<uint16_t>({0x3C00, 0xC000}));
  // Any non-zero bool entry is true, stored as 1.
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kBool), {3}, kInt32Data, varints({0, 5, 1}))),
            (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kUInt32), {2}, kUInt64Data, varints({4000000000, 1}))),
            bytes_of<uint32_t>({4000000000u, 1u}));
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kUInt64), {1}, kUInt64Data, varints({INT64_MIN}))),
            bytes_of<uint64_t>({uint64_t{1} << 63}));
  // int4: two elements per int32 entry, the first in the low nibble; 1, 2, 3 -> 0x21, 0x03.
  EXPECT_EQ(raw_of(typed_tensor(code(DT::kInt4), {3}, kInt32Data, varints({0x21, 0x03}))),
            (std::vector<uint8_t>{0x21, 0x03}));
}

TEST(OnnxHandmade, TypedFieldWithTheWrongCountOrKindIsAModelError) {
  const int f32 = static_cast<int>(DType::kFloat32);
  EXPECT_THROW(load_bytes(model_with(typed_tensor(f32, {3}, kFloatData, fixed<float>({1, 2})))), tether::ModelError);
  expect_error<tether::ModelError>(
      [&] { load_bytes(model_with(typed_tensor(f32, {2}, kInt64Data, varints({1, 2})))); }, {"float_data", "int64_data"});
  // Elements but no data at all.
  EXPECT_THROW(load_bytes(model_with(typed_tensor(f32, {2}, kFloatData, ""))), tether::ModelError);
  // No elements need no data.
  EXPECT_EQ(raw_of(typed_tensor(f32, {0, 3}, kFloatData, "")).size(), 0u);
}

TEST(OnnxHandmade, RepeatedRawDataKeepsTheLastOccurrence) {
  Proto t = inside_tensor(float_bytes({9, 9}));
  t.bytes(of::kTensorRawData, float_bytes({1.5f, -4.0f}));
  EXPECT_EQ(weights(load_bytes(model_with(t))), (std::vector<float>{1.5f, -4.0f}));
}

TEST(OnnxHandmade, RepeatedGraphFieldsMergeTheirInitializers) {
  // Protobuf merges a repeated message field: repeated fields of the graph concatenate.
  Proto t2;
  t2.varint(of::kTensorDims, 1).varint(of::kTensorDataType, kFloat).bytes(of::kTensorName, "v");
  t2.bytes(of::kTensorRawData, float_bytes({7.0f}));
  Proto g1, g2;
  g1.bytes(of::kGraphName, "first").msg(of::kGraphInitializer, inside_tensor(float_bytes({1.5f, -4.0f})));
  g2.bytes(of::kGraphName, "second").msg(of::kGraphInitializer, t2).msg(of::kGraphOutput, value_info("w"));
  Proto m;
  m.varint(of::kModelIrVersion, 8).msg(of::kModelGraph, g1).msg(of::kModelGraph, g2);
  const Model model = load_bytes(m.str());
  EXPECT_EQ(model.graph().name(), "second");
  EXPECT_EQ(weights(model), (std::vector<float>{1.5f, -4.0f}));
  EXPECT_EQ(model.graph().find("v")->initializer().data<float>()[0], 7.0f);
}

// ---- corrupt bytes ---------------------------------------------------------------------------------

TEST(OnnxHandmade, EmptyBytesAreAParseError) {
  EXPECT_THROW(load_model_from_bytes("", 0), tether::ParseError);
}

TEST(OnnxHandmade, TruncatedBytesAreAParseError) {
  Model m;
  m.set_opset("", 18);
  Value* x = m.graph().add_input("x", ValueType::tensor(DType::kFloat32, Shape::of({2, 3})));
  Value* w = m.graph().add_initializer(Tensor::zeros(DType::kFloat32, {3, 4}), "w");
  Node* n = m.graph().add_node("MatMul", {x, w}, {"y"}, "mm");
  m.graph().add_output(n->output(0));
  const std::string bytes = serialize_model(m);
  ASSERT_NO_THROW(load_bytes(bytes));
  // Every prefix that ends before the graph field does is missing the graph or part of it.
  const auto graphs = tether_test::fields_numbered(bytes, of::kModelGraph);
  ASSERT_EQ(graphs.size(), 1u);
  ASSERT_GT(graphs[0].end, 50u);
  for (size_t len = 0; len < graphs[0].end; ++len) {
    const std::string cut = bytes.substr(0, len);
    EXPECT_THROW(load_model_from_bytes(cut.data(), cut.size()), tether::ParseError) << "prefix of " << len;
  }
}

TEST(OnnxHandmade, RandomBytesAreAParseError) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    std::string bytes(16 + seed * 13, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    EXPECT_THROW(load_model_from_bytes(bytes.data(), bytes.size()), tether::ParseError) << "seed " << seed;
  }
}

TEST(OnnxHandmade, EmptyFileIsAParseError) {
  TempDir dir;
  tether_test::write_file(dir.file("empty.onnx"), "");
  expect_error<tether::ParseError>([&] { load_model(dir.file("empty.onnx")); }, {"empty.onnx"});
}

TEST(OnnxHandmade, TextIsAParseErrorNamingTheFile) {
  TempDir dir;
  tether_test::write_file(dir.file("notes.onnx"), "this is not an ONNX model, just some text\n");
  expect_error<tether::ParseError>([&] { load_model(dir.file("notes.onnx")); }, {dir.file("notes.onnx")});
}

TEST(OnnxHandmade, ModelWithoutIrVersionIsAParseError) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInitializer, inside_tensor(float_bytes({1, 2})));
  EXPECT_THROW(load_bytes(model_bytes(g, std::nullopt)), tether::ParseError);
  EXPECT_NO_THROW(load_bytes(model_bytes(g, 8)));
}

TEST(OnnxHandmade, ModelWithoutGraphIsAParseError) {
  const std::string bytes = Proto().varint(of::kModelIrVersion, 8).str();
  EXPECT_THROW(load_bytes(bytes), tether::ParseError);
}

// ---- missing files ----------------------------------------------------------------------------

TEST(OnnxHandmade, MissingModelFileIsModelNotFound) {
  expect_error<tether::ModelNotFoundError>([] { load_model("/nonexistent"); }, {"/nonexistent"});
  expect_error<tether::ModelNotFoundError>([] { load_model("/nonexistent/folder/m.onnx"); }, {"m.onnx"});
}

TEST(OnnxHandmade, FolderInsteadOfModelFileIsAModelError) {
  TempDir dir;
  EXPECT_THROW(load_model(dir.path().string()), tether::ModelError);
}

// ---- external data ------------------------------------------------------------------------------

TEST(OnnxHandmade, ExternalLocationWithDotDotIsRejectedEvenWhenTheFileExists) {
  TempDir dir;
  fs::create_directories(dir.path() / "outer" / "inner" / "sub");
  tether_test::write_file((dir.path() / "outer" / "x").string(), float_bytes({1, 2}));
  const std::string inner = (dir.path() / "outer" / "inner").string();
  for (const char* location : {"../x", "sub/../../x"}) {
    const std::string bytes = model_with(external_tensor(location, "0", "8"));
    expect_error<tether::ExternalDataError>([&] { load_bytes(bytes, inner); }, {location, "'w'"});
    tether_test::write_file(inner + "/m.onnx", bytes);
    expect_error<tether::ExternalDataError>([&] { load_model(inner + "/m.onnx"); }, {location});
  }
}

TEST(OnnxHandmade, AbsoluteExternalLocationIsRejected) {
  TempDir dir;
  tether_test::write_file(dir.file("abs.bin"), float_bytes({1, 2}));
  for (const std::string& location : {std::string("/etc/passwd"), dir.file("abs.bin")}) {
    const std::string bytes = model_with(external_tensor(location, "0", "8"));
    expect_error<tether::ExternalDataError>([&] { load_bytes(bytes, dir.path().string()); }, {location});
  }
}

TEST(OnnxHandmade, SymlinkLeadingOutOfTheModelFolderIsRejected) {
  TempDir dir;
  fs::create_directories(dir.path() / "inner");
  tether_test::write_file(dir.file("outside.bin"), float_bytes({1, 2}));
  fs::create_symlink(dir.path() / "outside.bin", dir.path() / "inner" / "link.bin");
  tether_test::write_file(dir.file("inner/inside.bin"), float_bytes({3, 4}));
  fs::create_symlink("inside.bin", dir.path() / "inner" / "good_link.bin");
  const std::string inner = dir.file("inner");
  expect_error<tether::ExternalDataError>(
      [&] { load_bytes(model_with(external_tensor("link.bin", "0", "8")), inner); }, {"link.bin", "outside"});
  // A link that stays inside the folder is fine.
  EXPECT_EQ(weights(load_bytes(model_with(external_tensor("good_link.bin", "0", "8")), inner)),
            (std::vector<float>{3, 4}));
}

TEST(OnnxHandmade, MissingExternalFileIsAnExternalDataError) {
  TempDir dir;
  expect_error<tether::ExternalDataError>(
      [&] { load_bytes(model_with(external_tensor("gone.bin", "0", "8")), dir.path().string()); }, {"gone.bin"});
}

TEST(OnnxHandmade, ExternalDataPastTheEndOfTheFileIsAnExternalDataError) {
  TempDir dir;
  tether_test::write_file(dir.file("d.bin"), float_bytes({1, 2}));  // 8 bytes
  const std::string base = dir.path().string();
  EXPECT_NO_THROW(load_bytes(model_with(external_tensor("d.bin", "0", "8")), base));
  expect_error<tether::ExternalDataError>([&] { load_bytes(model_with(external_tensor("d.bin", "4", "8")), base); },
                                          {"d.bin", "offset 4"});
  EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", "1", std::nullopt)), base), tether::ExternalDataError);
  EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", "9", std::nullopt)), base), tether::ExternalDataError);
  // An offset so large that offset + length overflows int64.
  EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", "999999999999999999", "8")), base),
               tether::ExternalDataError);
}

TEST(OnnxHandmade, BadExternalDataEntriesAreExternalDataErrors) {
  TempDir dir;
  tether_test::write_file(dir.file("d.bin"), float_bytes({1, 2, 3, 4}));
  const std::string base = dir.path().string();
  // The length must be what the tensor needs.
  EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", "0", "4")), base), tether::ExternalDataError);
  EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", "0", "16")), base), tether::ExternalDataError);
  for (const char* offset : {"-8", "abc", "", "8 ", "0x8"})
    EXPECT_THROW(load_bytes(model_with(external_tensor("d.bin", offset, "8")), base), tether::ExternalDataError)
        << "offset '" << offset << "'";
  EXPECT_THROW(load_bytes(model_with(external_tensor(std::nullopt, "0", "8")), base), tether::ExternalDataError);
  EXPECT_THROW(load_bytes(model_with(external_tensor("", "0", "8")), base), tether::ExternalDataError);
}

TEST(OnnxHandmade, ExternalDataFromBytesNeedsABaseDir) {
  TempDir dir;
  tether_test::write_file(dir.file("d.bin"), float_bytes({1, 2}));
  expect_error<tether::ExternalDataError>([&] { load_bytes(model_with(external_tensor("d.bin", "0", "8"))); },
                                          {"base_dir"});
}

TEST(OnnxHandmade, SavedModelWithTruncatedOrMissingDataFileIsAnExternalDataError) {
  TempDir dir;
  Model m;
  m.set_opset("", 18);
  Value* w = m.graph().add_initializer(Tensor::zeros(DType::kFloat32, {1024}), "w");
  m.graph().add_output(w);
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;
  const std::string path = dir.file("m.onnx");
  save_model(m, path, opts);
  ASSERT_NO_THROW(load_model(path));
  const std::string data = tether_test::read_file(path + ".data");
  ASSERT_EQ(data.size(), 4096u);
  tether_test::write_file(path + ".data", data.substr(0, 4095));
  expect_error<tether::ExternalDataError>([&] { load_model(path); }, {"m.onnx.data"});
  fs::remove(path + ".data");
  expect_error<tether::ExternalDataError>([&] { load_model(path); }, {"m.onnx.data"});
}

// ---- malformed tensors and graphs ---------------------------------------------------------------

TEST(OnnxHandmade, RawDataOfTheWrongSizeIsAModelError) {
  EXPECT_THROW(load_bytes(model_with(inside_tensor(float_bytes({1, 2, 3})))), tether::ModelError);
  EXPECT_THROW(load_bytes(model_with(inside_tensor(std::string(7, 'x')))), tether::ModelError);
}

TEST(OnnxHandmade, UnknownDataTypeIsAModelError) {
  expect_error<tether::ModelError>([] { load_bytes(model_with(inside_tensor(std::string(8, 'x'), 99))); }, {"99"});
  EXPECT_THROW(load_bytes(model_with(inside_tensor(std::string(8, 'x'), 0))), tether::ModelError);
}

TEST(OnnxHandmade, NegativeDimIsAModelError) {
  // -1 as a varint is ten bytes of two's complement.
  EXPECT_THROW(load_bytes(model_with(inside_tensor("", kFloat, -1))), tether::ModelError);
}

TEST(OnnxHandmade, NodeInputNamingNothingIsAGraphError) {
  Proto g;
  g.bytes(of::kGraphName, "g");
  g.msg(of::kGraphInput, value_info("x"));
  g.msg(of::kGraphNode, node("Add", {"x", "nowhere"}, {"y"}, "adder"));
  g.msg(of::kGraphOutput, value_info("y"));
  expect_error<tether::GraphError>([&] { load_bytes(model_bytes(g)); }, {"adder", "nowhere"});
}

TEST(OnnxHandmade, OutputNamingNothingIsAGraphError) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInput, value_info("x")).msg(of::kGraphOutput, value_info("ghost"));
  expect_error<tether::GraphError>([&] { load_bytes(model_bytes(g)); }, {"ghost"});
}

TEST(OnnxHandmade, ValueDefinedTwiceIsAGraphError) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInput, value_info("x"));
  g.msg(of::kGraphNode, node("Relu", {"x"}, {"y"}, "a"));
  g.msg(of::kGraphNode, node("Neg", {"x"}, {"y"}, "b"));
  g.msg(of::kGraphOutput, value_info("y"));
  EXPECT_THROW(load_bytes(model_bytes(g)), tether::GraphError);
}

TEST(OnnxHandmade, CycleInTheFileIsAGraphErrorNamingItsNodes) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInput, value_info("x"));
  g.msg(of::kGraphNode, node("Add", {"x", "b"}, {"a"}, "first"));
  g.msg(of::kGraphNode, node("Relu", {"a"}, {"b"}, "second"));
  g.msg(of::kGraphOutput, value_info("b"));
  expect_error<tether::GraphError>([&] { load_bytes(model_bytes(g)); }, {"'first'", "'second'", "cycle"});
}

TEST(OnnxHandmade, NodesOutOfOrderInTheFileAreAccepted) {
  Proto g;
  g.bytes(of::kGraphName, "g").msg(of::kGraphInput, value_info("x"));
  g.msg(of::kGraphNode, node("Relu", {"a"}, {"b"}, "second"));
  g.msg(of::kGraphNode, node("Neg", {"x"}, {"a"}, "first"));
  g.msg(of::kGraphOutput, value_info("b"));
  Model m = load_bytes(model_bytes(g));
  EXPECT_EQ(m.graph().find("b")->producer()->input(0), m.graph().find("a"));
}

}  // namespace
