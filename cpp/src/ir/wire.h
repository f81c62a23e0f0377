// Protobuf wire-format helpers for ONNX models.
//
// libprotobuf copies every bytes field it parses. For the weights of a model, which are most
// of its bytes, tether avoids that: before parsing, split_initializer_data() takes the raw_data
// fields of the main graph's initializers out of the encoded model (recording where each lies
// in the input), and protobuf parses only the small remainder. When writing, ModelSplicer puts
// raw_data back next to each initializer as the file is written, straight from the tensors'
// buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace tether::ir::wire {

/// Where one initializer's raw_data lies in the input bytes; offset -1 when it has none.
struct RawSpan {
  int64_t offset = -1;
  int64_t size = 0;
};

struct SplitModel {
  std::string skeleton;              ///< the model with those raw_data fields removed
  std::vector<RawSpan> initializer;  ///< one per main-graph initializer, in order
};

/// Splits `data` as described above. Throws ParseError, naming `label` and the byte offset,
/// when the bytes are not well-formed protobuf (truncated, lengths past the end, groups).
SplitModel split_initializer_data(const std::byte* data, int64_t size, const std::string& label);

/// A piece of output: bytes owned elsewhere that must outlive the splicer.
struct Chunk {
  const void* data;
  int64_t size;
};

/// Builds the byte stream of a model from its encoded skeleton plus raw_data blocks to
/// insert into main-graph initializers (by index; an empty chunk inserts nothing).
class ModelSplicer {
 public:
  ModelSplicer(const std::string& skeleton, const std::vector<Chunk>& initializer_data);
  /// Total bytes of the spliced model.
  int64_t size() const { return size_; }
  /// Writes the model through `sink`, chunk by chunk.
  void write(const std::function<void(const void*, int64_t)>& sink) const;

 private:
  void emit_owned(std::string bytes);
  void emit(const void* data, int64_t size);

  std::deque<std::string> owned_;  // headers built here; deque keeps their addresses stable
  std::vector<Chunk> chunks_;
  int64_t size_ = 0;
};

}  // namespace tether::ir::wire
