// libFuzzer target: ONNX bytes -> load -> compile on the CPU engine -> run on generated inputs.
//
// The loader's target (load_fuzzer.cc) stops at shape inference; this one goes on into the
// passes, the planner and the kernels. Its seeds (engine_seeds/, from make_engine_seeds.py)
// are small valid models of every op the CPU engine runs, with their integer inputs stored as
// initializers, so the structured mutator (onnx_mutator.cc) edits attributes, dims, dtypes,
// shape-tensor values and wiring of graphs that mostly compile.
//
// tether promises that a model it cannot run, or inputs that do not fit it, raise one of its
// typed errors (tether::Error and subclasses), never a crash. So this target treats as a bug:
//   - tether::InternalError (a broken invariant) and any exception that is not a
//     tether::Error (std::out_of_range, std::bad_alloc, ...) out of load, compile or run;
//   - a second run on the same inputs that does not give the same outputs, bit for bit
//     (uninitialised memory, data races in a one-thread session, state kept between runs);
//   - whatever ASan, UBSan and libFuzzer's time and memory limits report.
// Inputs are generated from a hash of the model bytes: each unknown or symbolic dim is one of
// 0, 1, 2, 3 or 5; float values are small, with now and then a NaN, an infinity or 1e30;
// integer values small, with now and then an extreme (INT64_MIN, INT64_MAX, 2^40, -2^31).
// Sessions have a memory limit of 256 MiB, so a size computed from data must be refused
// with MemoryLimitError before it is allocated.
// A model may name its inputs' run-time shapes in metadata_props["tether.fuzz.shapes"], as
// "x:2,65536;idx:2,3=0" (name:dims, then "=v" to fill every element with v instead of
// generated values): the shape-contract cases of contracts.py give inputs of symbolic dims
// the exact shapes that break a relation between them (a 64k-wide dim, indices wider than data).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tether/engine.h"
#include "tether/error.h"
#include "tether/onnx.h"

namespace {

using tether::ir::DType;

[[noreturn]] void bug(const char* stage, const std::string& what) {
  std::fprintf(stderr, "\n==tether-fuzz== BUG in %s: %s\n", stage, what.c_str());
  std::fflush(stderr);
  std::abort();
}

bool verbose() {
  static const bool v = std::getenv("TETHER_FUZZ_VERBOSE") != nullptr;
  return v;
}

// Runs `f`; a typed tether error is an answer (returns false), anything else is a bug.
template <typename F>
bool expect_typed_errors_only(const char* stage, F&& f) {
  try {
    f();
    return true;
  } catch (const tether::InternalError& e) {
    bug(stage, std::string("InternalError: ") + e.what());
  } catch (const tether::Error& e) {
    if (verbose()) std::fprintf(stderr, "%s: %s: %s\n", stage, typeid(e).name(), e.what());
    return false;
  } catch (const std::exception& e) {
    bug(stage, std::string(typeid(e).name()) + ": " + e.what());
  } catch (...) {
    bug(stage, "an exception that is not a std::exception");
  }
}

// splitmix64 over a seed taken from the input bytes: the same model always gets the same inputs.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h;
}

double float_value(Rng& rng) {
  switch (rng.below(32)) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return std::numeric_limits<double>::infinity();
    case 2: return -std::numeric_limits<double>::infinity();
    case 3: return 1e30;
    case 4: return 0.0;
    default: return (static_cast<double>(rng.below(2001)) - 1000.0) / 250.0;
  }
}

int64_t int_value(Rng& rng) {
  switch (rng.below(48)) {
    case 0: return std::numeric_limits<int64_t>::min();
    case 1: return std::numeric_limits<int64_t>::max();
    case 2: return int64_t{1} << 40;
    case 3: return -(int64_t{1} << 31);
    default: return static_cast<int64_t>(rng.below(8)) - 2;
  }
}

template <typename T>
void fill_ints(tether::ir::Tensor& t, Rng& rng) {
  T* p = t.mutable_data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<T>(int_value(rng));
}

// Uint16 bits of a float as float16 (round toward zero is fine for fuzz values).
uint16_t to_half(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = b & 0x7fffffu;
  if (((b >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13));
}

// A feed shape named by the model: its dims, and the value of every element when given.
struct FeedSpec {
  std::vector<int64_t> dims;
  std::optional<double> fill;
};

constexpr const char* kShapesKey = "tether.fuzz.shapes";

// Parses "x:2,65536;idx:2,3=0"; entries that do not parse are left out (the model bytes may
// be mutated, and the metadata with them).
std::map<std::string, FeedSpec> feed_specs(const tether::ir::Metadata& metadata) {
  std::map<std::string, FeedSpec> specs;
  for (const auto& [key, value] : metadata) {
    if (key != kShapesKey) continue;
    size_t start = 0;
    while (start <= value.size()) {
      const size_t end = std::min(value.find(';', start), value.size());
      const std::string entry = value.substr(start, end - start);
      start = end + 1;
      const size_t colon = entry.rfind(':');
      if (colon == std::string::npos || colon == 0) continue;
      FeedSpec spec;
      std::string dims = entry.substr(colon + 1);
      if (const size_t eq = dims.find('='); eq != std::string::npos) {
        char* stop = nullptr;
        const double v = std::strtod(dims.c_str() + eq + 1, &stop);
        if (stop != dims.c_str() + eq + 1 && std::isfinite(v)) spec.fill = v;
        dims.resize(eq);
      }
      bool ok = true;
      for (size_t p = 0; p < dims.size() && ok;) {
        const size_t comma = std::min(dims.find(',', p), dims.size());
        char* stop = nullptr;
        const long long d = std::strtoll(dims.c_str() + p, &stop, 10);
        ok = stop == dims.c_str() + comma && d >= 0 && d <= (int64_t{1} << 20);
        spec.dims.push_back(d);
        p = comma + 1;
      }
      if (ok) specs[entry.substr(0, colon)] = std::move(spec);
    }
  }
  return specs;
}

// Sets every element of `t` to `v` (converted to its dtype; false for dtypes without generated values).
bool fill_with(tether::ir::Tensor& t, double v) {
  const int64_t n = t.num_elements();
  auto put = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    // Clamped first: a double at or past an integer type's range does not convert (UB).
    const T x = v <= lo ? std::numeric_limits<T>::lowest() : v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v);
    for (int64_t i = 0; i < n; ++i) p[i] = x;
  };
  switch (t.dtype()) {
    case DType::kFloat32: put(t.mutable_data<float>()); return true;
    case DType::kFloat64: put(t.mutable_data<double>()); return true;
    case DType::kInt64: put(t.mutable_data<int64_t>()); return true;
    case DType::kInt32: put(t.mutable_data<int32_t>()); return true;
    case DType::kInt16: put(t.mutable_data<int16_t>()); return true;
    case DType::kInt8: put(t.mutable_data<int8_t>()); return true;
    case DType::kUInt8: put(t.mutable_data<uint8_t>()); return true;
    case DType::kUInt16: put(t.mutable_data<uint16_t>()); return true;
    case DType::kUInt32: put(t.mutable_data<uint32_t>()); return true;
    case DType::kUInt64: put(t.mutable_data<uint64_t>()); return true;
    case DType::kBool: {
      bool* p = t.mutable_data<bool>();
      for (int64_t i = 0; i < n; ++i) p[i] = v != 0.0;
      return true;
    }
    default: return false;
  }
}

// Inputs for `info`, or false when the model's inputs cannot be made (too large, a dtype
// without generated values). An input named in `specs` gets its shape (and fill) from there.
bool make_inputs(const std::vector<tether::engine::TensorInfo>& info, const std::map<std::string, FeedSpec>& specs,
                 Rng& rng, std::vector<std::pair<std::string, tether::ir::Tensor>>& inputs) {
  int64_t total = 0;
  for (const auto& in : info) {
    std::vector<int64_t> dims;
    const auto spec = specs.find(in.name);
    if (spec != specs.end()) {
      dims = spec->second.dims;
    } else if (!in.shape.has_rank()) {
      for (size_t r = rng.below(4); r > 0; --r) dims.push_back(static_cast<int64_t>(rng.below(4)));
    } else {
      for (size_t d = 0; d < in.shape.rank(); ++d) {
        const tether::ir::Dim& dim = in.shape[d];
        static constexpr int64_t kSizes[] = {0, 1, 2, 3, 5};
        dims.push_back(dim.is_known() ? dim.value() : kSizes[rng.below(5)]);
      }
    }
    // A named shape may be wider: a 64k dim is what some contract cases are about.
    const int64_t limit = spec != specs.end() ? int64_t{1} << 20 : int64_t{1} << 18;
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0 || d > (int64_t{1} << 20)) return false;
      n *= d;
      if (n > limit) return false;
    }
    total += n;
    if (total > limit) return false;
    if (in.dtype == DType::kString || tether::ir::dtype_bits(in.dtype) == 0) return false;  // no values to make
    tether::ir::Tensor t = tether::ir::Tensor::zeros(in.dtype, dims);
    if (spec != specs.end() && spec->second.fill) {
      if (!fill_with(t, *spec->second.fill)) return false;
      inputs.emplace_back(in.name, std::move(t));
      continue;
    }
    switch (in.dtype) {
      case DType::kFloat32: {
        float* p = t.mutable_data<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(float_value(rng));
        break;
      }
      case DType::kFloat64: {
        double* p = t.mutable_data<double>();
        for (int64_t i = 0; i < n; ++i) p[i] = float_value(rng);
        break;
      }
      case DType::kFloat16: {
        uint16_t* p = t.mutable_data<uint16_t>();
        for (int64_t i = 0; i < n; ++i) p[i] = to_half(static_cast<float>(float_value(rng)));
        break;
      }
      case DType::kBool: {
        bool* p = t.mutable_data<bool>();
        for (int64_t i = 0; i < n; ++i) p[i] = rng.below(2) != 0;
        break;
      }
      case DType::kInt64: fill_ints<int64_t>(t, rng); break;
      case DType::kInt32: fill_ints<int32_t>(t, rng); break;
      case DType::kInt16: fill_ints<int16_t>(t, rng); break;
      case DType::kInt8: fill_ints<int8_t>(t, rng); break;
      case DType::kUInt8: fill_ints<uint8_t>(t, rng); break;
      case DType::kUInt16: fill_ints<uint16_t>(t, rng); break;
      case DType::kUInt32: fill_ints<uint32_t>(t, rng); break;
      case DType::kUInt64: fill_ints<uint64_t>(t, rng); break;
      default: return false;  // zeros are a valid input of any other fixed-size dtype
    }
    inputs.emplace_back(in.name, std::move(t));
  }
  return true;
}

bool same_bits(const tether::ir::Tensor& a, const tether::ir::Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  if (a.dtype() == DType::kString) return a.string_values() == b.string_values();
  return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tether::ir::Model model;
  if (!expect_typed_errors_only("load_model_from_bytes", [&] { model = tether::ir::load_model_from_bytes(data, size); }))
    return 0;
  Rng rng{fnv1a(data, size)};
  tether::engine::CompileOptions options;
  options.threads = 1;
  options.optimize = rng.below(4) != 0;
  options.max_memory = int64_t{256} << 20;
  std::unique_ptr<tether::engine::Session> session;
  if (!expect_typed_errors_only("compile", [&] { session = tether::engine::compile(model, options); })) return 0;
  std::vector<std::pair<std::string, tether::ir::Tensor>> inputs;
  if (!make_inputs(session->inputs(), feed_specs(model.metadata), rng, inputs)) return 0;
  std::vector<tether::ir::Tensor> first, second;
  if (!expect_typed_errors_only("run", [&] { first = session->run(inputs); })) return 0;
  expect_typed_errors_only("second run", [&] { second = session->run(inputs); });
  if (second.size() != first.size()) bug("second run", "a different number of outputs");
  for (size_t i = 0; i < first.size(); ++i)
    if (!same_bits(first[i], second[i]))
      bug("second run", "output " + std::to_string(i) + " (" + session->outputs()[i].name + ") differs from the first run's");
  return 0;
}
