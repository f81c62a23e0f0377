// tether/onnx.h: reading and writing ONNX files, external data included.
//
// Loading maps the model file and its external data files into memory. Weights that lie at
// 64-byte-aligned offsets are used in place (no copy); others are copied once into aligned
// buffers. Weights stored inside the model file never pass through a second copy.
//
//   tether::ir::Model m = tether::ir::load_model("resnet.onnx");
//   tether::ir::SaveOptions opts;
//   opts.external_data = tether::ir::ExternalData::kAlways;   // weights to "resnet2.onnx.data"
//   tether::ir::save_model(m, "resnet2.onnx", opts);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tether/model.h"

namespace tether::ir {

/// The largest file protobuf can parse: a model whose embedded weights would exceed it
/// must keep them in external data.
inline constexpr int64_t kMaxProtobufBytes = (int64_t{1} << 31) - 1;

struct LoadOptions {
  /// Folder against which relative external data locations are resolved. Defaults to the
  /// model file's folder; when loading from bytes with external data, it must be set.
  std::string base_dir;
};

/// Loads a model from an ONNX file.
/// Throws ModelNotFoundError (no such file), ParseError (not valid ONNX), GraphError
/// (dangling names, duplicates, cycles), ExternalDataError, or ModelError (bad tensors,
/// unknown dtypes, negative dims). Every message names the file and the place.
Model load_model(const std::string& path, const LoadOptions& options = {});

/// Loads a model from bytes in memory (copied where needed; `data` may be freed afterwards).
Model load_model_from_bytes(const void* data, size_t size, const LoadOptions& options = {});

/// Where weights go when saving.
enum class ExternalData {
  kAuto,    ///< inside the model file, unless that file would exceed 2 GiB
  kNever,   ///< inside the model file; ArgumentError when it would exceed 2 GiB
  kAlways,  ///< tensors of at least size_threshold bytes go to the external data file
};

struct SaveOptions {
  ExternalData external_data = ExternalData::kAuto;
  /// External data file name, relative to the model's folder. Default: "<model file>.data".
  std::string location;
  /// Initializers smaller than this many bytes stay inside the model file.
  int64_t size_threshold = 1024;
  /// Offsets in the external data file are multiples of this (ONNX recommends the page
  /// size, so that runtimes can map weights instead of reading them).
  int64_t alignment = 4096;
};

/// What save_model wrote.
struct SaveResult {
  std::vector<std::string> files;  ///< the model file, then the external data file if any
  int64_t external_bytes = 0;      ///< bytes of tensor data in the external file
};

/// Saves `model` to `path`. Files are written to temporary names and renamed into place, so
/// a model can be saved over the files it was loaded from, and a failed save leaves the old
/// files intact. Throws WriteError when a file cannot be written, ArgumentError for bad
/// options, a single file over 2 GiB with kNever, or an external data location that is the
/// model file itself, names a folder, or leads out of the model's folder through a link.
SaveResult save_model(const Model& model, const std::string& path, const SaveOptions& options = {});

/// The model as ONNX bytes, every tensor inside. Throws ArgumentError when the result
/// would exceed 2 GiB.
std::string serialize_model(const Model& model);

}  // namespace tether::ir
