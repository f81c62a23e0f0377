// Helpers shared by the C++ tests: temporary folders, whole-file reads and writes, and a tiny
// protobuf wire-format writer and reader, so that tests can craft and inspect ONNX bytes
// without going through tether's own encoder.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace tether_test {

namespace fs = std::filesystem;

/// A fresh folder under the system temp folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tether-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Sorted names of the entries in `dir`.
inline std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// ---- protobuf wire format ---------------------------------------------------------------------

/// Builds one protobuf message field by field (wire types 0 and 2 are all ONNX needs here).
class Proto {
 public:
  Proto& varint(uint32_t field, uint64_t v) {
    put_varint((uint64_t{field} << 3) | 0);
    put_varint(v);
    return *this;
  }
  Proto& bytes(uint32_t field, const std::string& payload) {
    put_varint((uint64_t{field} << 3) | 2);
    put_varint(payload.size());
    out_ += payload;
    return *this;
  }
  Proto& msg(uint32_t field, const Proto& m) { return bytes(field, m.str()); }
  const std::string& str() const { return out_; }

 private:
  void put_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

/// One field of a parsed message: the varint value (wire type 0) or the payload (wire type 2).
struct WireField {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t value = 0;
  std::string payload;
  size_t begin = 0;  ///< offset of the tag in the parsed bytes
  size_t end = 0;    ///< offset just past the field
};

/// Splits a message into its fields. Throws std::runtime_error on malformed input.
inline std::vector<WireField> parse_fields(const std::string& bytes) {
  std::vector<WireField> out;
  size_t pos = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= bytes.size()) throw std::runtime_error("truncated varint");
      const auto b = static_cast<uint8_t>(bytes[pos++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw std::runtime_error("varint too long");
  };
  while (pos < bytes.size()) {
    WireField f;
    f.begin = pos;
    const uint64_t tag = varint();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<int>(tag & 7);
    switch (f.wire_type) {
      case 0: f.value = varint(); break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2: {
        const uint64_t len = varint();
        if (len > bytes.size() - pos) throw std::runtime_error("length past the end");
        f.payload = bytes.substr(pos, len);
        pos += len;
        break;
      }
      default: throw std::runtime_error("unsupported wire type");
    }
    if (pos > bytes.size()) throw std::runtime_error("field past the end");
    f.end = pos;
    out.push_back(std::move(f));
  }
  return out;
}

/// The fields numbered `number`, in order.
inline std::vector<WireField> fields_numbered(const std::string& bytes, uint32_t number) {
  std::vector<WireField> out;
  for (WireField& f : parse_fields(bytes))
    if (f.number == number) out.push_back(std::move(f));
  return out;
}

// ONNX field numbers used by the tests.
namespace onnx_field {
constexpr uint32_t kModelIrVersion = 1, kModelGraph = 7, kModelOpsetImport = 8;
constexpr uint32_t kOpsetDomain = 1, kOpsetVersion = 2;
constexpr uint32_t kGraphNode = 1, kGraphName = 2, kGraphInitializer = 5, kGraphInput = 11, kGraphOutput = 12;
constexpr uint32_t kNodeInput = 1, kNodeOutput = 2, kNodeName = 3, kNodeOpType = 4, kNodeAttribute = 5;
constexpr uint32_t kAttributeG = 6;
constexpr uint32_t kValueInfoName = 1;
constexpr uint32_t kTensorDims = 1, kTensorDataType = 2, kTensorName = 8, kTensorRawData = 9,
                   kTensorExternalData = 13, kTensorDataLocation = 14;
constexpr uint32_t kEntryKey = 1, kEntryValue = 2;
}  // namespace onnx_field

}  // namespace tether_test
