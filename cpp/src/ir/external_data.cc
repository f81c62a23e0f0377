#include "ir/external_data.h"

#include <cctype>
#include <filesystem>
#include <system_error>

#include "tether/error.h"

namespace tether::ir::external {

namespace fs = std::filesystem;

namespace {

int64_t parse_count(const std::string& text, const std::string& key, const std::string& where) {
  bool ok = !text.empty() && text.size() <= 18;
  int64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) ok = false;
    if (ok) v = v * 10 + (c - '0');
  }
  if (!ok)
    throw ExternalDataError(where + ": external data " + key + " '" + text + "' is not a non-negative integer");
  return v;
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

Reference parse(const std::vector<std::pair<std::string, std::string>>& entries, const std::string& where) {
  Reference ref;
  bool has_location = false;
  for (const auto& [key, value] : entries) {
    if (key == "location") {
      ref.location = value;
      has_location = true;
    } else if (key == "offset") {
      ref.offset = parse_count(value, key, where);
    } else if (key == "length") {
      ref.length = parse_count(value, key, where);
    }
    // "checksum" and keys of newer ONNX versions carry nothing tether needs to read the bytes.
  }
  if (!has_location || ref.location.empty())
    throw ExternalDataError(where + ": external data has no 'location'");
  return ref;
}

void check_relative(const std::string& location, const std::string& where) {
  const fs::path p(location);
  if (location.empty()) throw ExternalDataError(where + ": external data location is empty");
  if (p.is_absolute() || p.has_root_directory() || p.has_root_name())
    throw ExternalDataError(where + ": external data location '" + location +
                            "' is absolute; it must be a path relative to the model's folder");
  for (const auto& part : p)
    if (part == "..")
      throw ExternalDataError(where + ": external data location '" + location +
                              "' contains '..'; it must stay inside the model's folder");
}

std::string resolve(const std::string& base_dir, const std::string& location, const std::string& where) {
  check_relative(location, where);
  std::error_code ec;
  const fs::path base = fs::canonical(base_dir.empty() ? fs::path(".") : fs::path(base_dir), ec);
  if (ec) throw ExternalDataError(where + ": model folder '" + base_dir + "' cannot be read: " + ec.message());
  const fs::path full = base / location;
  if (!fs::exists(full, ec))
    throw ExternalDataError(where + ": external data file '" + location + "' not found in '" + base.string() + "'");
  const fs::path real = fs::canonical(full, ec);
  if (ec) throw ExternalDataError(where + ": external data file '" + full.string() + "': " + ec.message());
  if (!is_within(real, base))
    throw ExternalDataError(where + ": external data location '" + location + "' leads to '" + real.string() +
                            "', outside the model's folder '" + base.string() + "'");
  return real.string();
}

void check_save_location(const std::string& model_path, const std::string& location, const std::string& where) {
  check_relative(location, where);
  const fs::path loc(location);
  const fs::path model(model_path);
  if (loc.filename().empty() || loc.filename() == ".")
    throw ExternalDataError(where + ": external data location '" + location + "' names a folder, not a file");
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(model.has_parent_path() ? model.parent_path() : fs::path("."), ec);
  if (ec) throw ExternalDataError(where + ": the model's folder cannot be resolved: " + ec.message());
  // The folder as the links in it lead; the file itself is replaced by a rename, link or not.
  const fs::path dir = loc.has_parent_path() ? fs::weakly_canonical(base / loc.parent_path(), ec) : base;
  if (ec) throw ExternalDataError(where + ": external data folder of '" + location + "' cannot be resolved: " + ec.message());
  if (!is_within(dir, base))
    throw ExternalDataError(where + ": external data location '" + location + "' leads through a symbolic link to '" +
                            dir.string() + "', outside the model's folder '" + base.string() +
                            "'; load would refuse it, so save does not write there");
  if ((dir / loc.filename()).lexically_normal() == (base / model.filename()).lexically_normal())
    throw ExternalDataError(where + ": external data location '" + location +
                            "' is the model file itself; the data needs a file of its own, e.g. '" +
                            model.filename().string() + ".data'");
}

std::shared_ptr<const util::FileMap> MapCache::get(const std::string& path, const std::string& where) {
  auto it = maps_.find(path);
  if (it != maps_.end()) return it->second;
  std::shared_ptr<const util::FileMap> map;
  try {
    map = util::FileMap::open(path);
  } catch (const ModelError& e) {
    throw ExternalDataError(where + ": " + e.what());
  }
  maps_.emplace(path, map);
  return map;
}

}  // namespace tether::ir::external
