// Each C++ error class maps to one Python exception class, registered once.
#include "bindings.h"

namespace tether::py {

namespace {

struct Classes {
  PyObject* error;
  PyObject* argument;
  PyObject* model;
  PyObject* not_found;
  PyObject* parse;
  PyObject* graph;
  PyObject* external;
  PyObject* shape;
  PyObject* write;
  PyObject* unsupported;
  PyObject* device;
  PyObject* internal;
  PyObject* calibration;
  PyObject* memory_limit;
};
Classes classes{};

PyObject* make_class(pyb::module_& m, const char* name, const pyb::object& bases, const char* doc) {
  std::string full = std::string("tether.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw pyb::error_already_set();
  m.add_object(name, pyb::handle(cls));
  return cls;
}

pyb::object bases(std::initializer_list<PyObject*> items) {
  pyb::tuple t(items.size());
  size_t i = 0;
  for (PyObject* o : items) t[i++] = pyb::reinterpret_borrow<pyb::object>(o);
  return t;
}

pyb::object base(PyObject* cls) { return pyb::reinterpret_borrow<pyb::object>(cls); }

// Messages quote file paths, which need not be UTF-8: decode leniently rather than fail.
void raise(PyObject* cls, const std::exception& e) {
  const std::string_view what = e.what();
  PyObject* msg = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "replace");
  PyErr_SetObject(cls, msg);
  Py_XDECREF(msg);
}

}  // namespace

void register_errors(pyb::module_& m) {
  Classes& c = classes;
  c.error = make_class(m, "Error", base(PyExc_Exception), "Base of every error tether raises.");
  c.argument = make_class(m, "ArgumentError", bases({c.error, PyExc_ValueError}),
                          "An argument the function cannot accept (a bad option, an unknown name).");
  c.model = make_class(m, "ModelError", base(c.error), "The model is malformed or inconsistent.");
  c.not_found = make_class(m, "ModelNotFoundError", bases({c.model, PyExc_FileNotFoundError}),
                           "The model file does not exist.");
  c.parse = make_class(m, "ParseError", base(c.model), "The bytes are not a valid ONNX protobuf.");
  c.graph = make_class(m, "GraphError", base(c.model), "The graph is structurally wrong: dangling names, duplicates, cycles.");
  c.external = make_class(m, "ExternalDataError", base(c.model),
                          "External tensor data is missing, outside the model's folder, or out of bounds.");
  c.shape = make_class(m, "ShapeError", base(c.model), "Shapes or types contradict each other.");
  c.write = make_class(m, "WriteError", bases({c.error, PyExc_OSError}), "A file could not be written.");
  c.unsupported = make_class(m, "UnsupportedError", base(c.error),
                             "The model uses ops, dtypes or attributes the engine cannot run; every such node is listed.");
  c.device = make_class(m, "DeviceError", base(c.error),
                        "A device failed: out of device memory, a lost device, a shader the driver could not build, "
                        "work that did not finish in time. The message names the device and what to try.");
  c.calibration = make_class(m, "CalibrationError", bases({c.error, PyExc_ValueError}),
                             "Calibration data is unusable: NaN or infinity in a sample (tensor and sample named), no "
                             "data, or states that cannot be merged.");
  c.memory_limit = make_class(m, "MemoryLimitError", bases({c.error, PyExc_MemoryError}),
                              "A run would need more memory than the session may take (compile's max_memory): the "
                              "node, value, shape and bytes are named, before anything is allocated.");
  c.internal = make_class(m, "InternalError", base(c.error), "A bug in tether: an internal invariant failed.");

  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ModelNotFoundError& e) {
      raise(classes.not_found, e);
    } catch (const ParseError& e) {
      raise(classes.parse, e);
    } catch (const GraphError& e) {
      raise(classes.graph, e);
    } catch (const ExternalDataError& e) {
      raise(classes.external, e);
    } catch (const ShapeError& e) {
      raise(classes.shape, e);
    } catch (const ModelError& e) {
      raise(classes.model, e);
    } catch (const ArgumentError& e) {
      raise(classes.argument, e);
    } catch (const WriteError& e) {
      raise(classes.write, e);
    } catch (const UnsupportedError& e) {
      raise(classes.unsupported, e);
    } catch (const DeviceError& e) {
      raise(classes.device, e);
    } catch (const CalibrationError& e) {
      raise(classes.calibration, e);
    } catch (const MemoryLimitError& e) {
      raise(classes.memory_limit, e);
    } catch (const Interrupted& e) {
      // PyErr_CheckSignals set the KeyboardInterrupt (or what a signal handler raised).
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const InternalError& e) {
      raise(classes.internal, e);
    } catch (const Error& e) {
      raise(classes.error, e);
    }
  });
}

}  // namespace tether::py
