// Calibrator: runs batches on the CPU engine and reduces the observed tensors into TensorStats.
//
// Each batch is observed into a fresh state that joins the running one only when every value
// in it was finite, so a rejected or skipped sample leaves no trace. The engine gives every
// sample the same results whatever else is in its batch (its kernels never mix samples in a
// reduction), and merging is exact, so the final state depends on the samples alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "tether/engine.h"
#include "tether/quant.h"
#include "tether/shape_inference.h"
#include "util/thread_pool.h"

namespace tether::quant {

namespace {

using Batch = std::vector<std::pair<std::string, ir::Tensor>>;

// Samples of a batch: the size of every input's first dim, which must agree (scalars: one).
int64_t batch_samples(const Batch& batch, int64_t batch_index) {
  int64_t n = -1;
  std::string first;
  for (const auto& [name, t] : batch) {
    const int64_t here = t.rank() == 0 ? 1 : t.dims()[0];
    if (n < 0) {
      n = here;
      first = name;
    } else if (here != n) {
      throw ArgumentError("calibration batch " + std::to_string(batch_index) + ": input '" + name + "' has " +
                          std::to_string(here) + " samples along axis 0 but input '" + first + "' has " + std::to_string(n));
    }
  }
  if (n <= 0)
    throw ArgumentError("calibration batch " + std::to_string(batch_index) + (n < 0 ? " has no inputs" : " has no samples"));
  return n;
}

// Statistics keep per-channel extremes only along an axis the tensor has: any other axis
// would silently track nothing, so it is refused (-1 asks for no channels).
// `rank` is nullopt where it is not known yet.
void check_channel_axis(const std::string& name, int axis, std::optional<size_t> rank) {
  if (axis == -1) return;
  const std::string what = "cannot track the channels of '" + name + "' along axis " + std::to_string(axis);
  if (axis < -1) throw ArgumentError(what + ": a channel axis is 0 or more (-1 tracks no channels)");
  if (rank && static_cast<size_t>(axis) >= *rank)
    throw ArgumentError(what + ": it has rank " + std::to_string(*rank) +
                        (*rank == 0 ? " (no axes)" : " (axes 0 to " + std::to_string(*rank - 1) + ")"));
}

// Sample i of a batch, borrowing the batch's memory.
Batch sample_of(const Batch& batch, int64_t i) {
  Batch one;
  for (const auto& [name, t] : batch) {
    if (t.rank() == 0) {
      one.emplace_back(name, t);
      continue;
    }
    std::vector<int64_t> dims = t.dims();
    const int64_t bytes = dims[0] == 0 ? 0 : t.nbytes() / dims[0];
    dims[0] = 1;
    auto buffer = ir::Buffer::borrow(static_cast<const std::byte*>(t.raw_data()) + i * bytes, bytes, t.buffer());
    one.emplace_back(name, ir::Tensor::from_buffer(t.dtype(), std::move(dims), std::move(buffer)));
  }
  return one;
}

// ---- state bytes ---------------------------------------------------------------------------

constexpr char kMagic[] = "tether-calibration-state-1\n";

class Writer {
 public:
  template <typename T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_raw(std::string_view s) { out_ += s; }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_ += s;
  }
  // Histograms are mostly empty: (index, count) pairs of the non-zero bins.
  void put_bins(const std::vector<uint64_t>& h) {
    uint32_t nonzero = 0;
    for (uint64_t c : h) nonzero += c != 0;
    put<uint32_t>(nonzero);
    for (size_t i = 0; i < h.size(); ++i)
      if (h[i] != 0) {
        put<uint32_t>(static_cast<uint32_t>(i));
        put<uint64_t>(h[i]);
      }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  void get_bins(std::vector<uint64_t>& h) {
    const auto nonzero = get<uint32_t>();
    for (uint32_t k = 0; k < nonzero; ++k) {
      const auto i = get<uint32_t>();
      const auto c = get<uint64_t>();
      if (i >= h.size()) throw CalibrationError("calibration state is corrupt: bin " + std::to_string(i) + " out of range");
      h[i] = c;
    }
  }
  // A count of items of `item_bytes` each that must still fit in what is left.
  size_t get_count(size_t item_bytes) {
    const auto n = get<uint64_t>();
    need(n > (s_.size() - pos_) / item_bytes ? s_.size() + 1 : n * item_bytes);
    return static_cast<size_t>(n);
  }
  void skip(size_t n) {
    need(n);
    pos_ += n;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - pos_) throw CalibrationError("calibration state is truncated or corrupt (" + std::to_string(s_.size()) + " bytes)");
  }
  const std::string& s_;
  size_t pos_ = 0;
};

// Statistics as observe() and merge() leave them: anything else in state bytes is corruption
// (or bytes written by hand), refused before it can reach the histogram arithmetic.
void check_stats(const TensorStats& s, const std::string& name) {
  auto corrupt = [&](const std::string& what) {
    return CalibrationError("calibration state is corrupt: tensor '" + name + "' " + what);
  };
  if (s.count < 0 || s.zeros < 0 || s.nonfinite < 0 || s.zeros > s.count)
    throw corrupt("has " + std::to_string(s.count) + " values, " + std::to_string(s.zeros) + " zeros and " +
                  std::to_string(s.nonfinite) + " non-finite values");
  uint64_t binned = 0;
  for (const auto* h : {&s.positive, &s.negative})
    for (uint64_t c : *h)
      if (__builtin_add_overflow(binned, c, &binned)) throw corrupt("has bins whose counts overflow");
  if (binned != static_cast<uint64_t>(s.count) || (!s.positive.empty() && s.positive[0] < static_cast<uint64_t>(s.zeros)))
    throw corrupt("counts " + std::to_string(s.count) + " values (" + std::to_string(s.zeros) + " zeros) but its bins hold " +
                  std::to_string(binned));
  // The exponent is the smallest e with every magnitude below 2^e (none while all are zero).
  int exponent = TensorStats::kNoExponent;
  if (s.count == 0) {
    if (s.min != std::numeric_limits<float>::infinity() || s.max != -std::numeric_limits<float>::infinity())
      throw corrupt("has no values but extremes [" + std::to_string(s.min) + ", " + std::to_string(s.max) + "]");
  } else {
    if (!std::isfinite(s.min) || !std::isfinite(s.max) || s.min > s.max)
      throw corrupt("has extremes [" + std::to_string(s.min) + ", " + std::to_string(s.max) + "]");
    const float absmax = std::max(std::fabs(s.min), std::fabs(s.max));
    if (absmax > 0) std::frexp(absmax, &exponent);
  }
  if (s.exponent != exponent)
    throw corrupt("has exponent " + std::to_string(s.exponent) + " where its extremes give " +
                  (exponent == TensorStats::kNoExponent ? std::string("none") : std::to_string(exponent)));
  if (exponent == TensorStats::kNoExponent && s.count > 0 && s.positive[0] != static_cast<uint64_t>(s.count))
    throw corrupt("holds only zeros but has values in bins other than the first");
  for (float c : s.channel_absmax)
    if (!(c >= 0.0f) || !std::isfinite(c)) throw corrupt("has channel extreme " + std::to_string(c));
}

}  // namespace

// Tensors at least this large are observed by every thread, each into a partial state.
constexpr int64_t kParallelElements = int64_t{1} << 15;

struct Calibrator::Impl {
  std::unique_ptr<engine::Session> session;
  // Observation runs between kernels, while the session's own threads wait: a pool of the
  // same size takes it, so that it does not run on one core.
  std::unique_ptr<util::ThreadPool> pool;
  std::vector<std::string> names;
  std::vector<int> axes;
  CalibratorOptions options;
  // Partial states of the threads, reused from tensor to tensor (observation is sequential).
  mutable std::vector<TensorStats> parts;

  void observe(TensorStats& s, const float* data, const std::vector<int64_t>& dims) const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (n < kParallelElements || pool->threads() == 1) {
      s.observe(data, dims);
      return;
    }
    if (parts.empty()) parts.assign(static_cast<size_t>(pool->threads()), TensorStats(s.bins));
    for (TensorStats& p : parts) p.clear();
    pool->parallel_for_indexed(n, kParallelElements / 4, [&](int thread, int64_t begin, int64_t end) {
      parts[static_cast<size_t>(thread)].observe_values(data + begin, end - begin);
    });
    s.observe_channels(data, dims);
    for (const TensorStats& p : parts) s.merge(p);
  }

  StatsMap fresh() const {
    StatsMap m;
    for (size_t k = 0; k < names.size(); ++k) m.emplace(names[k], TensorStats(options.bins, axes[k]));
    return m;
  }

  // Runs `batch` into `into`; returns the name of the first observed tensor (in execution order)
  // holding a non-finite value, or "" when all were finite.
  std::string run(const Batch& batch, StatsMap& into) const {
    std::vector<TensorStats*> slots;
    for (const std::string& n : names) slots.push_back(&into.at(n));
    std::string first_bad;
    session->run_observe(batch, names, [&](const engine::ObservedValue& v) {
      TensorStats& s = *slots[v.index];
      // A rank unknown when compiling is known now.
      check_channel_axis(v.name, s.channel_axis, v.dims.size());
      const int64_t before = s.nonfinite;
      observe(s, static_cast<const float*>(v.data), v.dims);
      if (s.nonfinite != before && first_bad.empty()) first_bad = v.name;
    });
    return first_bad;
  }
};

Calibrator::Calibrator(const ir::Model& model, const std::vector<std::pair<std::string, int>>& tensors,
                       const CalibratorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (tensors.empty()) throw ArgumentError("nothing to calibrate: no tensors to observe");
  TensorStats(options.bins);  // validates the bin count
  ir::Model typed = model.clone();
  ops::infer_shapes(typed);
  for (const auto& [name, axis] : tensors) {
    const ir::Value* v = typed.graph().find(name);
    if (v == nullptr) throw ArgumentError("cannot observe '" + name + "': the model has no value of that name");
    if (v->type().dtype() != ir::DType::kFloat32)
      throw ArgumentError("cannot observe '" + name + "': it is " + std::string(ir::dtype_name(v->type().dtype())) +
                          ", calibration observes float32 values");
    if (v->producer() == nullptr && !v->is_input())
      throw ArgumentError("cannot observe '" + name + "': it is a constant, not a value computed from the inputs");
    const ir::Shape& shape = v->type().shape();
    check_channel_axis(name, axis, shape.has_rank() ? std::optional<size_t>(shape.rank()) : std::nullopt);
  }
  impl_->options = options;
  for (const auto& [name, axis] : tensors) {
    if (std::find(impl_->names.begin(), impl_->names.end(), name) != impl_->names.end())
      throw ArgumentError("tensor '" + name + "' is listed twice for calibration");
    impl_->names.push_back(name);
    impl_->axes.push_back(axis);
  }
  engine::CompileOptions co;
  co.threads = options.threads;
  co.keep = impl_->names;
  impl_->session = engine::compile(model, co);
  impl_->pool = std::make_unique<util::ThreadPool>(impl_->session->threads());
  stats_ = impl_->fresh();
}

Calibrator::~Calibrator() = default;

void Calibrator::observe(const Batch& batch) {
  const int64_t index = batches_;
  const int64_t n = batch_samples(batch, index);
  StatsMap state = impl_->fresh();
  std::string bad;
  try {
    bad = impl_->run(batch, state);
  } catch (const ArgumentError& e) {
    throw ArgumentError("calibration batch " + std::to_string(index) + ": " + e.what());
  }
  if (!bad.empty()) {
    // Find the samples at fault by running them one by one; keep the clean ones.
    state = impl_->fresh();
    for (int64_t i = 0; i < n; ++i) {
      StatsMap one = impl_->fresh();
      std::string tensor;
      try {
        tensor = impl_->run(sample_of(batch, i), one);
      } catch (const ArgumentError& e) {
        throw CalibrationError("calibration batch " + std::to_string(index) + " (samples " + std::to_string(samples_) +
                               " to " + std::to_string(samples_ + n - 1) + "): tensor '" + bad +
                               "' holds NaN or infinity; the sample cannot be named because the model does not run "
                               "one sample alone (" + e.what() + ")");
      }
      if (tensor.empty()) {
        for (auto& [name, s] : state) s.merge(one.at(name));
        continue;
      }
      const int64_t sample = samples_ + i;
      if (!impl_->options.skip_nonfinite)
        throw CalibrationError("calibration sample " + std::to_string(sample) + " (batch " + std::to_string(index) +
                               ", row " + std::to_string(i) + "): tensor '" + tensor +
                               "' holds NaN or infinity; fix the data, or skip such samples (skip_nonfinite)");
      skipped_.push_back(sample);
    }
  }
  for (auto& [name, s] : stats_) s.merge(state.at(name));
  samples_ += n;
  ++batches_;
}

std::string Calibrator::state() const {
  Writer w;
  w.put_raw(kMagic);
  w.put<int32_t>(impl_->options.bins);
  w.put<int64_t>(samples_);
  w.put<int64_t>(batches_);
  w.put<uint64_t>(skipped_.size());
  for (int64_t s : skipped_) w.put<int64_t>(s);
  w.put<uint64_t>(impl_->names.size());
  for (size_t k = 0; k < impl_->names.size(); ++k) {
    const TensorStats& s = stats_.at(impl_->names[k]);
    w.put_string(impl_->names[k]);
    w.put<int32_t>(impl_->axes[k]);
    w.put<int64_t>(s.count);
    w.put<int64_t>(s.zeros);
    w.put<int64_t>(s.nonfinite);
    w.put<float>(s.min);
    w.put<float>(s.max);
    w.put<int32_t>(s.exponent);
    w.put<uint64_t>(s.channel_absmax.size());
    for (float c : s.channel_absmax) w.put<float>(c);
    w.put<uint8_t>(s.positive.empty() ? 0 : 1);
    if (!s.positive.empty()) {
      w.put_bins(s.positive);
      w.put_bins(s.negative);
    }
  }
  return w.take();
}

void Calibrator::reset() {
  stats_ = impl_->fresh();
  samples_ = 0;
  batches_ = 0;
  skipped_.clear();
}

void Calibrator::merge(const std::string& state) {
  const std::string_view magic = kMagic;
  if (state.compare(0, magic.size(), magic) != 0) throw CalibrationError("these bytes are not a tether calibration state");
  Reader r(state);
  r.skip(magic.size());
  const auto bins = r.get<int32_t>();
  if (bins != impl_->options.bins)
    throw ArgumentError("cannot merge a calibration state of " + std::to_string(bins) + " bins into one of " +
                        std::to_string(impl_->options.bins) + " bins");
  const auto samples = r.get<int64_t>();
  const auto batches = r.get<int64_t>();
  if (samples < 0 || batches < 0 || samples > std::numeric_limits<int64_t>::max() - samples_ ||
      batches > std::numeric_limits<int64_t>::max() - batches_)
    throw CalibrationError("calibration state is corrupt: " + std::to_string(samples) + " samples in " +
                           std::to_string(batches) + " batches");
  std::vector<int64_t> skipped(r.get_count(sizeof(int64_t)));
  for (int64_t& s : skipped) {
    s = r.get<int64_t>();
    if (s < 0 || s >= samples)
      throw CalibrationError("calibration state is corrupt: skipped sample " + std::to_string(s) + " of " +
                             std::to_string(samples));
  }
  const auto tensors = r.get<uint64_t>();
  if (tensors != impl_->names.size())
    throw ArgumentError("cannot merge a calibration state of " + std::to_string(tensors) + " tensors into one of " +
                        std::to_string(impl_->names.size()) + " tensors: the states come from different models or plans");
  // Everything is read and checked before anything is added: a bad state changes nothing.
  StatsMap incoming;
  for (size_t k = 0; k < tensors; ++k) {
    const std::string name = r.get_string();
    const auto axis = r.get<int32_t>();
    if (name != impl_->names[k] || axis != impl_->axes[k])
      throw ArgumentError("cannot merge a calibration state whose tensor " + std::to_string(k) + " is '" + name +
                          "' (channel axis " + std::to_string(axis) + ") into one whose tensor " + std::to_string(k) +
                          " is '" + impl_->names[k] + "' (channel axis " + std::to_string(impl_->axes[k]) + ")");
    TensorStats s(bins, axis);
    s.count = r.get<int64_t>();
    s.zeros = r.get<int64_t>();
    s.nonfinite = r.get<int64_t>();
    s.min = r.get<float>();
    s.max = r.get<float>();
    s.exponent = r.get<int32_t>();
    s.channel_absmax.resize(r.get_count(sizeof(float)));
    for (float& c : s.channel_absmax) c = r.get<float>();
    if (r.get<uint8_t>() != 0) {
      s.positive.assign(static_cast<size_t>(bins), 0);
      s.negative.assign(static_cast<size_t>(bins), 0);
      r.get_bins(s.positive);
      r.get_bins(s.negative);
    }
    check_stats(s, name);
    const TensorStats& mine = stats_.at(name);
    if (s.count > std::numeric_limits<int64_t>::max() - mine.count)
      throw CalibrationError("calibration state is corrupt: tensor '" + name + "' has " + std::to_string(s.count) + " values");
    if (!s.channel_absmax.empty() && !mine.channel_absmax.empty() && s.channel_absmax.size() != mine.channel_absmax.size())
      throw ArgumentError("cannot merge a calibration state whose tensor '" + name + "' has " +
                          std::to_string(s.channel_absmax.size()) + " channels on axis " + std::to_string(axis) +
                          " into one where it has " + std::to_string(mine.channel_absmax.size()) +
                          " channels: the states come from different models");
    incoming.emplace(name, std::move(s));
  }
  if (!r.done()) throw CalibrationError("calibration state is corrupt: bytes left after the last tensor");
  for (auto& [name, s] : stats_) s.merge(incoming.at(name));
  // The merged samples follow this calibrator's own in the stream.
  for (int64_t s : skipped) skipped_.push_back(samples_ + s);
  samples_ += samples;
  batches_ += batches;
}

}  // namespace tether::quant
