// External data: where a tensor's bytes live outside the model file, and how tether checks
// that the place is safe to read (inside the model's folder, within the file's bounds).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/file_map.h"

namespace tether::ir::external {

/// A tensor's external data reference, as ONNX's external_data key-value pairs give it.
struct Reference {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;  ///< -1: as many bytes as the tensor needs
};

/// Parses the key-value pairs. Throws ExternalDataError naming `where` for a missing
/// location or an offset / length that is not a non-negative integer.
Reference parse(const std::vector<std::pair<std::string, std::string>>& entries, const std::string& where);

/// Checks that `location` is a relative path that stays in its folder: not absolute and
/// without '..' components. Throws ExternalDataError naming `where`.
void check_relative(const std::string& location, const std::string& where);

/// The file `location` names inside `base_dir`, after check_relative() and after making sure
/// that symbolic links do not lead outside `base_dir`. Throws ExternalDataError when the
/// file is missing or escapes.
std::string resolve(const std::string& base_dir, const std::string& location, const std::string& where);

/// Checks a location that save is about to write the external data of the model file
/// `model_path` to: check_relative(), a file name (not a folder), a folder that stays inside the
/// model's folder once symbolic links are followed (load would refuse data outside it), and a
/// file other than the model file itself (both are renamed into place: the second would replace
/// the first). Throws ExternalDataError naming `where`; writes nothing.
void check_save_location(const std::string& model_path, const std::string& location, const std::string& where);

/// Maps each external file once per load.
class MapCache {
 public:
  std::shared_ptr<const util::FileMap> get(const std::string& path, const std::string& where);

 private:
  std::map<std::string, std::shared_ptr<const util::FileMap>> maps_;
};

}  // namespace tether::ir::external
