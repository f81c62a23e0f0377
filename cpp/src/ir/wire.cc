#include "ir/wire.h"

#include "tether/error.h"

namespace tether::ir::wire {

namespace {

constexpr int kWireVarint = 0;
constexpr int kWireFixed64 = 1;
constexpr int kWireLengthDelimited = 2;
constexpr int kWireFixed32 = 5;

constexpr uint32_t kModelGraphField = 7;
constexpr uint32_t kGraphInitializerField = 5;
constexpr uint32_t kTensorRawDataField = 9;

// Reads fields of one message from [pos, end) of the input.
class Reader {
 public:
  Reader(const std::byte* base, int64_t begin, int64_t end, const std::string& label)
      : base_(base), pos_(begin), end_(end), label_(label) {}

  bool done() const { return pos_ >= end_; }
  int64_t pos() const { return pos_; }

  struct Field {
    uint32_t number;
    int wire_type;
    int64_t start;          // offset of the tag
    int64_t payload_begin;  // offset of the payload (after the length for wire type 2)
    int64_t end;            // offset just past the field
  };

  Field next() {
    Field f{};
    f.start = pos_;
    uint64_t tag = varint();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<int>(tag & 7);
    if (f.number == 0) fail(f.start, "field number 0");
    switch (f.wire_type) {
      case kWireVarint: varint(); break;
      case kWireFixed64: skip(8, f.number); break;
      case kWireFixed32: skip(4, f.number); break;
      case kWireLengthDelimited: {
        uint64_t len = varint();
        if (len > static_cast<uint64_t>(end_ - pos_))
          fail(f.start, "field " + std::to_string(f.number) + " declares " + std::to_string(len) + " bytes but only " +
                            std::to_string(end_ - pos_) + " remain");
        f.payload_begin = pos_;
        pos_ += static_cast<int64_t>(len);
        break;
      }
      default:
        fail(f.start, "unsupported wire type " + std::to_string(f.wire_type) + " for field " + std::to_string(f.number));
    }
    if (f.wire_type != kWireLengthDelimited) f.payload_begin = pos_;
    f.end = pos_;
    return f;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= end_) fail(pos_, "truncated varint");
      auto b = static_cast<uint8_t>(base_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail(pos_, "varint longer than 10 bytes");
  }

  void skip(int64_t n, uint32_t field) {
    if (end_ - pos_ < n) fail(pos_, "field " + std::to_string(field) + " is truncated");
    pos_ += n;
  }

  [[noreturn]] void fail(int64_t at, const std::string& why) const {
    throw ParseError(label_ + ": not a valid ONNX protobuf: " + why + " at byte " + std::to_string(at));
  }

  const std::byte* base_;
  int64_t pos_;
  int64_t end_;
  const std::string& label_;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::string header(uint32_t field, uint64_t length) {
  std::string h;
  put_varint(h, (static_cast<uint64_t>(field) << 3) | kWireLengthDelimited);
  put_varint(h, length);
  return h;
}

void append(std::string& out, const std::byte* base, int64_t begin, int64_t end) {
  out.append(reinterpret_cast<const char*>(base + begin), static_cast<size_t>(end - begin));
}

std::string strip_tensor(const std::byte* base, const Reader::Field& tf, RawSpan& span, const std::string& label) {
  std::string out;
  Reader r(base, tf.payload_begin, tf.end, label);
  while (!r.done()) {
    Reader::Field f = r.next();
    if (f.number == kTensorRawDataField && f.wire_type == kWireLengthDelimited) {
      span = {f.payload_begin, f.end - f.payload_begin};  // the last occurrence wins, as in protobuf
    } else {
      append(out, base, f.start, f.end);
    }
  }
  return out;
}

std::string strip_graph(const std::byte* base, const Reader::Field& gf, std::vector<RawSpan>& spans,
                        const std::string& label) {
  std::string out;
  Reader r(base, gf.payload_begin, gf.end, label);
  while (!r.done()) {
    Reader::Field f = r.next();
    if (f.number == kGraphInitializerField && f.wire_type == kWireLengthDelimited) {
      RawSpan span;
      std::string tensor = strip_tensor(base, f, span, label);
      spans.push_back(span);
      out += header(kGraphInitializerField, tensor.size());
      out += tensor;
    } else {
      append(out, base, f.start, f.end);
    }
  }
  return out;
}

}  // namespace

SplitModel split_initializer_data(const std::byte* data, int64_t size, const std::string& label) {
  SplitModel split;
  Reader r(data, 0, size, label);
  while (!r.done()) {
    Reader::Field f = r.next();
    if (f.number == kModelGraphField && f.wire_type == kWireLengthDelimited) {
      // A repeated occurrence of the graph field merges into the first, initializers appended.
      std::string graph = strip_graph(data, f, split.initializer, label);
      split.skeleton += header(kModelGraphField, graph.size());
      split.skeleton += graph;
    } else {
      append(split.skeleton, data, f.start, f.end);
    }
  }
  return split;
}

// ---- ModelSplicer --------------------------------------------------------------------------

void ModelSplicer::emit_owned(std::string bytes) {
  owned_.push_back(std::move(bytes));
  emit(owned_.back().data(), static_cast<int64_t>(owned_.back().size()));
}

void ModelSplicer::emit(const void* data, int64_t size) {
  if (size == 0) return;
  chunks_.push_back({data, size});
  size_ += size;
}

namespace {

// A field of TensorProto no ONNX version defines, holding padding bytes that put the next
// field's raw data at an aligned offset in the file. Readers skip unknown fields.
constexpr uint32_t kPaddingField = 1u << 20;

// The bytes of a padding field of exactly `total` bytes (total 0: none). Precondition: total
// is 0 or at least 5 (the key takes 4 bytes, the length 1).
std::string padding(int64_t total) {
  if (total == 0) return {};
  const int64_t key = static_cast<int64_t>(header(kPaddingField, 0).size()) - 1;
  int64_t len = total - key - 1;
  if (len >= 128) len = total - key - 2;  // a two-byte length
  std::string out = header(kPaddingField, static_cast<uint64_t>(len));
  out.append(static_cast<size_t>(len), '\0');
  return out;
}

int64_t varint_size(uint64_t v) {
  int64_t n = 1;
  while (v >= 128) v >>= 7, ++n;
  return n;
}

// Bytes of padding that put the raw data of an initializer starting at `pos` (its field's
// first byte) at a multiple of kRawAlignment: the initializer's own header, its other fields
// (`payload`), the padding field and the raw_data header come first.
constexpr int64_t kRawAlignment = 64;
int64_t padding_for(int64_t pos, int64_t payload, int64_t raw_header, int64_t n) {
  const int64_t min_pad = static_cast<int64_t>(header(kPaddingField, 0).size());
  // (At most 126 padding bytes, so the padding's own length takes one byte.)
  for (int64_t pad = 0; pad <= min_pad + 126; pad = pad == 0 ? min_pad : pad + 1) {
    const int64_t tensor = payload + pad + raw_header + n;
    const int64_t at = pos + 1 + varint_size(static_cast<uint64_t>(tensor)) + payload + pad + raw_header;
    if (at % kRawAlignment == 0) return pad;
  }
  return 0;  // unreachable: some padding always aligns
}

}  // namespace

ModelSplicer::ModelSplicer(const std::string& skeleton, const std::vector<Chunk>& initializer_data) {
  const auto* base = reinterpret_cast<const std::byte*>(skeleton.data());
  const std::string label = "<serialized model>";
  Reader model(base, 0, static_cast<int64_t>(skeleton.size()), label);
  size_t index = 0;
  while (!model.done()) {
    Reader::Field f = model.next();
    if (!(f.number == kModelGraphField && f.wire_type == kWireLengthDelimited)) {
      emit(base + f.start, f.end - f.start);
      continue;
    }
    std::vector<std::pair<Reader::Field, const Chunk*>> fields;
    Reader graph(base, f.payload_begin, f.end, label);
    while (!graph.done()) {
      Reader::Field g = graph.next();
      const Chunk* extra = nullptr;
      if (g.number == kGraphInitializerField && g.wire_type == kWireLengthDelimited) {
        TETHER_CHECK(index < initializer_data.size(), "more initializers than data blocks");
        extra = &initializer_data[index++];
      }
      fields.emplace_back(g, extra);
    }
    // Raw data of 64 bytes and more starts at a multiple of 64 in the file (a loader can then
    // use it in place). Where each initializer lands depends on the graph header's length,
    // which depends on the padding: lay out until the two agree (a pass or two).
    std::vector<int64_t> pads(fields.size(), 0);
    int64_t header_len = 1;
    for (int attempt = 0; attempt < 8; ++attempt) {
      int64_t pos = size_ + 1 + header_len, graph_size = 0;
      for (size_t k = 0; k < fields.size(); ++k) {
        const auto& [g, extra] = fields[k];
        int64_t size = g.end - g.start;
        if (extra != nullptr) {
          const int64_t payload = g.end - g.payload_begin;
          const int64_t raw_header = extra->size > 0 ? static_cast<int64_t>(header(kTensorRawDataField, extra->size).size()) : 0;
          pads[k] = extra->size >= kRawAlignment ? padding_for(pos, payload, raw_header, extra->size) : 0;
          const int64_t tensor = payload + pads[k] + raw_header + extra->size;
          size = static_cast<int64_t>(header(kGraphInitializerField, tensor).size()) + tensor;
        }
        pos += size;
        graph_size += size;
      }
      const int64_t actual = static_cast<int64_t>(header(kModelGraphField, graph_size).size()) - 1;
      if (actual == header_len) break;
      header_len = actual;
    }
    int64_t graph_size = 0;
    for (size_t k = 0; k < fields.size(); ++k) {
      const auto& [g, extra] = fields[k];
      if (extra == nullptr) {
        graph_size += g.end - g.start;
        continue;
      }
      const int64_t raw_header = extra->size > 0 ? static_cast<int64_t>(header(kTensorRawDataField, extra->size).size()) : 0;
      const int64_t tensor = (g.end - g.payload_begin) + pads[k] + raw_header + extra->size;
      graph_size += static_cast<int64_t>(header(kGraphInitializerField, tensor).size()) + tensor;
    }
    emit_owned(header(kModelGraphField, graph_size));
    for (size_t k = 0; k < fields.size(); ++k) {
      const auto& [g, extra] = fields[k];
      if (extra == nullptr) {
        emit(base + g.start, g.end - g.start);
        continue;
      }
      std::string raw_header = extra->size > 0 ? header(kTensorRawDataField, extra->size) : std::string();
      const int64_t tensor = (g.end - g.payload_begin) + pads[k] + static_cast<int64_t>(raw_header.size()) + extra->size;
      emit_owned(header(kGraphInitializerField, tensor));
      emit(base + g.payload_begin, g.end - g.payload_begin);
      if (pads[k] > 0) emit_owned(padding(pads[k]));
      if (extra->size > 0) {
        emit_owned(std::move(raw_header));
        emit(extra->data, extra->size);
      }
    }
  }
  TETHER_CHECK(index == initializer_data.size(), "fewer initializers than data blocks");
}

void ModelSplicer::write(const std::function<void(const void*, int64_t)>& sink) const {
  for (const Chunk& c : chunks_) sink(c.data, c.size);
}

}  // namespace tether::ir::wire
