// tether/error.h: the typed errors every tether call throws.
//
// A message names what is wrong and where: the file, graph, node, op, input or tensor, and
// what was expected versus found. User input never reaches an assert; internal invariants
// use TETHER_CHECK, which throws InternalError naming the source file and line.
//
//   try { auto model = tether::ir::load_model("m.onnx"); }
//   catch (const tether::ExternalDataError& e) { /* a weight file is missing or out of bounds */ }
//   catch (const tether::ModelError& e) { /* anything else wrong with the model */ }
#pragma once

#include <stdexcept>
#include <string>

namespace tether {

/// Base of every error tether throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A caller passed an argument the function cannot accept (a bad option, an unknown name).
class ArgumentError : public Error {
 public:
  using Error::Error;
};

/// The model is malformed or inconsistent. Subclasses say which layer found the problem.
class ModelError : public Error {
 public:
  using Error::Error;
};

/// The model file does not exist or cannot be opened.
class ModelNotFoundError : public ModelError {
 public:
  using ModelError::ModelError;
};

/// The bytes are not a valid ONNX protobuf: truncated, corrupt, or not ONNX at all.
class ParseError : public ModelError {
 public:
  using ModelError::ModelError;
};

/// The graph is structurally wrong: a dangling input, a duplicate name, a cycle.
class GraphError : public ModelError {
 public:
  using ModelError::ModelError;
};

/// A tensor's external data is missing, escapes the model's folder, or lies out of bounds.
class ExternalDataError : public ModelError {
 public:
  using ModelError::ModelError;
};

/// Shapes or types contradict each other (found by shape and type inference).
class ShapeError : public ModelError {
 public:
  using ModelError::ModelError;
};

/// The model uses ops, dtypes or attributes an engine cannot run. The message lists every
/// node concerned, found at compile time, never at run time.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

/// A device failed to do what was asked: out of device memory, a lost device, a driver that
/// could not build a shader, work that did not finish in time. The message names the device,
/// what was being done and what to try. A session that saw a lost device cannot run again.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A run would need more memory than the session may take (CompileOptions::max_memory): the
/// message names the node, the value, its shape and the bytes asked for, before anything is
/// allocated.
class MemoryLimitError : public Error {
 public:
  using Error::Error;
};

/// Writing a file failed (disk full, permission denied, a folder that does not exist).
class WriteError : public Error {
 public:
  using Error::Error;
};

/// Calibration data is unusable: NaN or infinity in a sample (the message names the tensor and
/// the sample index), an empty stream, or calibration states that cannot be merged.
class CalibrationError : public Error {
 public:
  using Error::Error;
};

/// A run stopped before its end because its caller asked (engine::InterruptScope): in Python, a
/// KeyboardInterrupt. The session stays usable.
class Interrupted : public Error {
 public:
  using Error::Error;
};

/// An internal invariant failed: a bug in tether, never a problem with user input.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace tether

/// Internal invariant check; throws tether::InternalError with file and line when it fails.
#define TETHER_CHECK(cond, ...)                                                      \
  do {                                                                               \
    if (!(cond)) ::tether::detail::check_failed(__FILE__, __LINE__, #cond, std::string(__VA_ARGS__)); \
  } while (0)
