// The C API (tether/c_api.h) over the C++ API: handles own C++ objects, and every entry point
// turns a thrown error into a status code and a thread-local message.

#include "tether/c_api.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"

struct tether_model {
  tether::ir::Model model;
};

// Dims as the C structs show them (-1 for a dim not known before a run), kept beside the
// session's own TensorInfo so that the pointers handed out live as long as the session.
struct CInfo {
  std::vector<int64_t> dims;
  int64_t rank = -1;
};

struct tether_session {
  std::unique_ptr<tether::engine::Session> session;
  std::vector<CInfo> inputs;
  std::vector<CInfo> outputs;
};

// Holds the output tensors (whose buffers they share with nothing the caller can free) and
// their names, so that it outlives its session.
struct tether_result {
  std::vector<std::string> names;
  std::vector<tether::ir::Tensor> tensors;
};

namespace {

thread_local std::string last_error;

tether_status fail(tether_status status, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory even for the message: the status alone must do
  }
  return status;
}

tether_status fail(tether_status status, const std::string& message) noexcept { return fail(status, message.c_str()); }

// Maps the exception in flight to its status; the most derived classes come first.
tether_status from_exception() {
  using namespace tether;
  try {
    throw;
  } catch (const ModelNotFoundError& e) {
    return fail(TETHER_ERROR_MODEL_NOT_FOUND, e.what());
  } catch (const ParseError& e) {
    return fail(TETHER_ERROR_PARSE, e.what());
  } catch (const GraphError& e) {
    return fail(TETHER_ERROR_GRAPH, e.what());
  } catch (const ExternalDataError& e) {
    return fail(TETHER_ERROR_EXTERNAL_DATA, e.what());
  } catch (const ShapeError& e) {
    return fail(TETHER_ERROR_SHAPE, e.what());
  } catch (const ModelError& e) {
    return fail(TETHER_ERROR_MODEL, e.what());
  } catch (const ArgumentError& e) {
    return fail(TETHER_ERROR_ARGUMENT, e.what());
  } catch (const UnsupportedError& e) {
    return fail(TETHER_ERROR_UNSUPPORTED, e.what());
  } catch (const DeviceError& e) {
    return fail(TETHER_ERROR_DEVICE, e.what());
  } catch (const MemoryLimitError& e) {
    return fail(TETHER_ERROR_MEMORY_LIMIT, e.what());
  } catch (const Interrupted& e) {
    return fail(TETHER_ERROR_INTERRUPTED, e.what());
  } catch (const std::bad_alloc&) {
    return fail(TETHER_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return fail(TETHER_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(TETHER_ERROR_INTERNAL, "an exception that is not a std::exception");
  }
}

// Runs `body`, turning whatever it throws into a status.
template <typename Body>
tether_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return from_exception();
  }
}

void require(const void* pointer, const char* function, const char* argument) {
  if (pointer == nullptr) throw tether::ArgumentError(std::string(function) + ": '" + argument + "' is NULL");
}

CInfo c_info(const tether::engine::TensorInfo& info) {
  CInfo c;
  if (!info.shape.has_rank()) return c;
  c.rank = static_cast<int64_t>(info.shape.rank());
  for (const tether::ir::Dim& d : info.shape.dims()) c.dims.push_back(d.is_known() ? d.value() : -1);
  return c;
}

tether_status get_info(const tether_session* session, size_t index, tether_tensor_info* info, bool input,
                       const char* function) {
  require(session, function, "session");
  require(info, function, "info");
  const auto& infos = input ? session->session->inputs() : session->session->outputs();
  const auto& cinfos = input ? session->inputs : session->outputs;
  if (index >= infos.size())
    return fail(TETHER_ERROR_ARGUMENT, std::string(function) + ": index " + std::to_string(index) +
                                           " is out of range; the session has " + std::to_string(infos.size()) +
                                           (input ? " inputs" : " outputs"));
  info->name = infos[index].name.c_str();
  info->dtype = static_cast<int32_t>(infos[index].dtype);
  info->rank = cinfos[index].rank;
  info->dims = cinfos[index].dims.data();
  return TETHER_OK;
}

// A tensor over the caller's bytes (borrowed, not copied), after checking what the C struct
// says against itself.
tether::ir::Tensor borrow_input(const tether_tensor& t, size_t position) {
  using tether::ArgumentError;
  using namespace tether::ir;
  const std::string where = "tether_session_run: input " + std::to_string(position);
  if (t.name == nullptr) throw ArgumentError(where + " has a NULL name");
  const std::string named = where + " '" + t.name + "'";
  if (!dtype_is_known(t.dtype) || t.dtype == 0)
    throw ArgumentError(named + " has dtype " + std::to_string(t.dtype) + ", which is no ONNX element type");
  const DType dtype = static_cast<DType>(t.dtype);
  if (dtype == DType::kString)
    throw tether::UnsupportedError(named + " is a string tensor; the C API takes numeric tensors only");
  if (t.rank > 0 && t.dims == nullptr) throw ArgumentError(named + " has rank " + std::to_string(t.rank) + " and NULL dims");
  std::vector<int64_t> dims(t.dims, t.dims + t.rank);
  const std::optional<int64_t> count = checked_num_elements(dims);
  if (!count) throw ArgumentError(named + " has a negative dim or too many elements");
  const std::optional<int64_t> bytes = storage_bytes(dtype, *count);
  if (!bytes || static_cast<uint64_t>(*bytes) != t.nbytes)
    throw ArgumentError(named + " is " + std::string(dtype_name(dtype)) + " " + Shape::of(dims).to_string() +
                        ", which takes " + (bytes ? std::to_string(*bytes) : std::string("too many")) +
                        " bytes, but nbytes is " + std::to_string(t.nbytes));
  if (t.data == nullptr && t.nbytes > 0) throw ArgumentError(named + " has NULL data");
  return Tensor::from_buffer(dtype, std::move(dims), Buffer::borrow(t.data, *bytes, nullptr));
}

// True when `t`'s bytes lie in memory of one of the caller's inputs (an output that passes an
// input through), which the caller may free before the result.
bool borrows_from(const tether::ir::Tensor& t, const tether_tensor* inputs, size_t count) {
  if (!t.is_valid() || t.dtype() == tether::ir::DType::kString || t.nbytes() == 0) return false;
  const auto* begin = static_cast<const char*>(t.raw_data());
  const char* end = begin + t.nbytes();
  for (size_t i = 0; i < count; ++i) {
    const auto* b = static_cast<const char*>(inputs[i].data);
    if (b != nullptr && begin < b + inputs[i].nbytes && b < end) return true;
  }
  return false;
}

tether_status view_output(const tether_result& r, size_t index, tether_tensor* out) {
  const tether::ir::Tensor& t = r.tensors[index];
  if (t.dtype() == tether::ir::DType::kString)
    return fail(TETHER_ERROR_UNSUPPORTED,
                "output '" + r.names[index] + "' is a string tensor; the C API returns numeric tensors only");
  out->name = r.names[index].c_str();
  out->dtype = static_cast<int32_t>(t.dtype());
  out->rank = t.rank();
  out->dims = t.dims().data();
  out->data = t.raw_data();
  out->nbytes = static_cast<size_t>(t.nbytes());
  return TETHER_OK;
}

}  // namespace

extern "C" {

const char* tether_last_error(void) { return last_error.c_str(); }

const char* tether_status_name(tether_status status) {
  switch (status) {
    case TETHER_OK: return "TETHER_OK";
    case TETHER_ERROR_ARGUMENT: return "TETHER_ERROR_ARGUMENT";
    case TETHER_ERROR_MODEL: return "TETHER_ERROR_MODEL";
    case TETHER_ERROR_MODEL_NOT_FOUND: return "TETHER_ERROR_MODEL_NOT_FOUND";
    case TETHER_ERROR_PARSE: return "TETHER_ERROR_PARSE";
    case TETHER_ERROR_GRAPH: return "TETHER_ERROR_GRAPH";
    case TETHER_ERROR_EXTERNAL_DATA: return "TETHER_ERROR_EXTERNAL_DATA";
    case TETHER_ERROR_SHAPE: return "TETHER_ERROR_SHAPE";
    case TETHER_ERROR_UNSUPPORTED: return "TETHER_ERROR_UNSUPPORTED";
    case TETHER_ERROR_DEVICE: return "TETHER_ERROR_DEVICE";
    case TETHER_ERROR_MEMORY_LIMIT: return "TETHER_ERROR_MEMORY_LIMIT";
    case TETHER_ERROR_INTERRUPTED: return "TETHER_ERROR_INTERRUPTED";
    case TETHER_ERROR_OUT_OF_MEMORY: return "TETHER_ERROR_OUT_OF_MEMORY";
    case TETHER_ERROR_INTERNAL: return "TETHER_ERROR_INTERNAL";
  }
  return "unknown status";
}

const char* tether_version(void) { return TETHER_VERSION; }

tether_status tether_compile_options_init(tether_compile_options* options) {
  return guarded([&] {
    require(options, "tether_compile_options_init", "options");
    options->device = "cpu";
    options->threads = 0;
    options->optimize = 1;
    options->max_memory = 0;
    return TETHER_OK;
  });
}

tether_status tether_model_load(const char* path, tether_model** model) {
  return guarded([&] {
    require(model, "tether_model_load", "model");
    *model = nullptr;
    require(path, "tether_model_load", "path");
    *model = new tether_model{tether::ir::load_model(path)};
    return TETHER_OK;
  });
}

tether_status tether_model_load_bytes(const void* data, size_t size, const char* base_dir, tether_model** model) {
  return guarded([&] {
    require(model, "tether_model_load_bytes", "model");
    *model = nullptr;
    if (size > 0) require(data, "tether_model_load_bytes", "data");
    tether::ir::LoadOptions options;
    if (base_dir != nullptr) options.base_dir = base_dir;
    *model = new tether_model{tether::ir::load_model_from_bytes(data, size, options)};
    return TETHER_OK;
  });
}

void tether_model_free(tether_model** model) {
  if (model == nullptr) return;
  delete *model;
  *model = nullptr;
}

tether_status tether_session_compile(const tether_model* model, const tether_compile_options* options,
                                     tether_session** session) {
  return guarded([&] {
    require(session, "tether_session_compile", "session");
    *session = nullptr;
    require(model, "tether_session_compile", "model");
    tether::engine::CompileOptions o;
    if (options != nullptr) {
      if (options->device != nullptr) o.device = options->device;
      o.threads = options->threads;
      o.optimize = options->optimize != 0;
      o.max_memory = options->max_memory;
    }
    auto s = std::make_unique<tether_session>();
    s->session = tether::engine::compile(model->model, o);
    for (const auto& info : s->session->inputs()) s->inputs.push_back(c_info(info));
    for (const auto& info : s->session->outputs()) s->outputs.push_back(c_info(info));
    *session = s.release();
    return TETHER_OK;
  });
}

void tether_session_free(tether_session** session) {
  if (session == nullptr) return;
  delete *session;
  *session = nullptr;
}

tether_status tether_session_input_count(const tether_session* session, size_t* count) {
  return guarded([&] {
    require(session, "tether_session_input_count", "session");
    require(count, "tether_session_input_count", "count");
    *count = session->inputs.size();
    return TETHER_OK;
  });
}

tether_status tether_session_output_count(const tether_session* session, size_t* count) {
  return guarded([&] {
    require(session, "tether_session_output_count", "session");
    require(count, "tether_session_output_count", "count");
    *count = session->outputs.size();
    return TETHER_OK;
  });
}

tether_status tether_session_input_info(const tether_session* session, size_t index, tether_tensor_info* info) {
  return guarded([&] { return get_info(session, index, info, true, "tether_session_input_info"); });
}

tether_status tether_session_output_info(const tether_session* session, size_t index, tether_tensor_info* info) {
  return guarded([&] { return get_info(session, index, info, false, "tether_session_output_info"); });
}

tether_status tether_session_run(const tether_session* session, const tether_tensor* inputs, size_t count,
                                 tether_result** result) {
  return guarded([&] {
    require(result, "tether_session_run", "result");
    *result = nullptr;
    require(session, "tether_session_run", "session");
    if (count > 0) require(inputs, "tether_session_run", "inputs");
    std::vector<std::pair<std::string, tether::ir::Tensor>> named;
    named.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      tether::ir::Tensor t = borrow_input(inputs[i], i);
      named.emplace_back(inputs[i].name, std::move(t));
    }
    auto r = std::make_unique<tether_result>();
    r->tensors = session->session->run(named);
    for (const auto& info : session->session->outputs()) r->names.push_back(info.name);
    TETHER_CHECK(r->names.size() == r->tensors.size(), "a run returns one tensor per output");
    for (tether::ir::Tensor& t : r->tensors)
      if (borrows_from(t, inputs, count)) t = tether::ir::Tensor::copy_of(t.dtype(), t.dims(), t.raw_data(), t.nbytes());
    *result = r.release();
    return TETHER_OK;
  });
}

void tether_result_free(tether_result** result) {
  if (result == nullptr) return;
  delete *result;
  *result = nullptr;
}

tether_status tether_result_count(const tether_result* result, size_t* count) {
  return guarded([&] {
    require(result, "tether_result_count", "result");
    require(count, "tether_result_count", "count");
    *count = result->tensors.size();
    return TETHER_OK;
  });
}

tether_status tether_result_output(const tether_result* result, size_t index, tether_tensor* tensor) {
  return guarded([&] {
    require(result, "tether_result_output", "result");
    require(tensor, "tether_result_output", "tensor");
    if (index >= result->tensors.size())
      return fail(TETHER_ERROR_ARGUMENT, "tether_result_output: index " + std::to_string(index) +
                                             " is out of range; the result has " +
                                             std::to_string(result->tensors.size()) + " outputs");
    return view_output(*result, index, tensor);
  });
}

tether_status tether_result_find(const tether_result* result, const char* name, tether_tensor* tensor) {
  return guarded([&] {
    require(result, "tether_result_find", "result");
    require(name, "tether_result_find", "name");
    require(tensor, "tether_result_find", "tensor");
    for (size_t i = 0; i < result->names.size(); ++i)
      if (result->names[i] == name) return view_output(*result, i, tensor);
    std::string known;
    for (const std::string& n : result->names) known += (known.empty() ? "'" : ", '") + n + "'";
    return fail(TETHER_ERROR_ARGUMENT, "tether_result_find: the result has no output '" + std::string(name) +
                                           "'; its outputs are " + known);
  });
}

}  // extern "C"
