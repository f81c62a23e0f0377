// libFuzzer target: ONNX bytes -> load -> shape inference -> summary -> serialize -> reload.
//
// tether promises that bad input raises a typed tether::ModelError (or a subclass), never a
// crash, a hang, undefined behaviour or a silent wrong answer. So this target treats as a bug:
//   - any exception that is not a tether::ModelError out of loading or shape inference
//     (InternalError, ArgumentError, std::out_of_range, std::bad_variant_access, ...);
//   - any exception at all out of summarize() or serialize_model() of a model that loaded;
//   - a serialized model that does not load again, or that does not settle: after one
//     save and load, saving and loading again must give the same bytes. (The first round
//     trip may reorder: nodes are written in topological order, so a model stored out of
//     order comes back with its value_info in another order.)
//   - whatever ASan, UBSan and libFuzzer's time and memory limits report.
// Inputs load with base_dir set to a scratch folder of external data files, so that data
// locations, offsets and lengths are fuzzed too.
// Each failure aborts with the stage and the message, so a crash file says what went wrong.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "tether/error.h"
#include "tether/onnx.h"
#include "tether/shape_inference.h"
#include "tether/summary.h"

namespace {

[[noreturn]] void bug(const char* stage, const std::string& what) {
  std::fprintf(stderr, "\n==tether-fuzz== BUG in %s: %s\n", stage, what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string describe(const std::exception& e) { return std::string(typeid(e).name()) + ": " + e.what(); }

// TETHER_FUZZ_VERBOSE=1 prints the expected errors too, to see how far an input gets.
bool verbose() {
  static const bool v = std::getenv("TETHER_FUZZ_VERBOSE") != nullptr;
  return v;
}

// Runs `f`; a tether::ModelError is expected (returns false), anything else is a bug.
template <typename F>
bool expect_model_errors_only(const char* stage, F&& f) {
  try {
    f();
    return true;
  } catch (const tether::ModelError& e) {
    if (verbose()) std::fprintf(stderr, "%s: %s\n", stage, describe(e).c_str());
    return false;
  } catch (const std::exception& e) {
    bug(stage, describe(e));
  } catch (...) {
    bug(stage, "an exception that is not a std::exception");
  }
}

// Runs `f`, which must not throw.
template <typename F>
void expect_no_throw(const char* stage, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    bug(stage, describe(e));
  } catch (...) {
    bug(stage, "an exception that is not a std::exception");
  }
}

// A folder of external data for inputs that refer to it: "w.bin" (4 KiB), "sub/w.bin"
// (100 bytes, unaligned sizes) and "escape.bin", a link that leads out of the folder.
std::string g_base_dir;

}  // namespace

// One folder for every fuzzing process, made once: built under a name of its own and renamed
// into place, so no process ever sees (or maps) a file another one is still writing.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  g_base_dir = (fs::temp_directory_path() / "tether-fuzz-external-data").string();
  if (fs::exists(g_base_dir)) return 0;
  char scratch[] = "/tmp/tether-fuzz-XXXXXX";
  if (mkdtemp(scratch) == nullptr) return 0;
  const std::string dir = scratch;
  fs::create_directory(dir + "/sub");
  std::ofstream(dir + "/w.bin", std::ios::binary) << std::string(4096, '\x3f');
  std::ofstream(dir + "/sub/w.bin", std::ios::binary) << std::string(100, '\x01');
  std::error_code ec;
  fs::create_symlink("/etc/hostname", dir + "/escape.bin", ec);
  fs::rename(dir, g_base_dir, ec);
  if (ec) fs::remove_all(dir, ec);  // another process got there first
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tether::ir::Model model;
  tether::ir::LoadOptions options;
  options.base_dir = g_base_dir;
  if (!expect_model_errors_only("load_model_from_bytes",
                                [&] { model = tether::ir::load_model_from_bytes(data, size, options); }))
    return 0;

  // Inference may reject the model; what it inferred before that stays on the values, and
  // the rest of the pipeline must cope with such a half-inferred model too.
  expect_model_errors_only("infer_shapes", [&] { tether::ops::infer_shapes(model); });

  expect_no_throw("summarize", [&] { (void)tether::ir::summarize(model); });

  std::string bytes;
  expect_no_throw("serialize_model", [&] { bytes = tether::ir::serialize_model(model); });

  std::string settled;
  for (int round = 0; round < 2; ++round) {
    tether::ir::Model again;
    try {
      again = tether::ir::load_model_from_bytes(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      bug("reload of serialized model", describe(e));
    }
    settled = bytes;
    expect_no_throw("serialize_model (reloaded)", [&] { bytes = tether::ir::serialize_model(again); });
  }
  if (bytes != settled)
    bug("round trip", "serialize(load(s)) differs from s = serialize(load(serialize(m))) (" +
                          std::to_string(settled.size()) + " vs " + std::to_string(bytes.size()) + " bytes)");
  return 0;
}
