// Control flow: If, Loop and Scan. Each body is compiled once, as a standalone graph whose
// inputs are the body's own and then the values it reads from enclosing graphs, and run by the
// same engine (its own plans per input shapes, the session's threads). Outputs are sized by what
// the bodies return, so these kernels allocate them (AllocatingKernel).
#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

using ir::Tensor;

// A tensor that reads a view's bytes in place (valid while the view is).
Tensor borrowed(const View& v) {
  const auto bytes = ir::storage_bytes(v.dtype, v.numel()).value_or(0);
  return Tensor::from_buffer(v.dtype, v.dims, ir::Buffer::borrow(v.data, bytes, nullptr));
}

// A tensor that owns its bytes: outputs outlive the run's arenas.
Tensor owned(const Tensor& t) {
  if (t.buffer() != nullptr && t.buffer()->writable()) return t;
  return Tensor::copy_of(t.dtype(), t.dims(), t.raw_data(), t.nbytes());
}

template <typename T>
Tensor scalar(DType dtype, T value) {
  return Tensor::copy_of(dtype, {}, &value, sizeof value);
}

bool truth(const View& v, const std::string& node, const char* what) {
  if (v.numel() != 1)
    throw ArgumentError(node + ": " + what + " has " + std::to_string(v.numel()) + " elements; it must be a single bool");
  return v.as<uint8_t>()[0] != 0;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

const ir::Graph& body_attr(const ir::Node& n, const char* name) {
  const ir::Attribute* a = n.attr(name);
  if (a == nullptr || a->kind() != ir::AttrKind::kGraph)
    throw ModelError(n.describe() + ": attribute '" + name + "' (a graph) is missing");
  return *a->as_graph();
}

// `input_types`: the body inputs' types where the body leaves them undeclared.
std::unique_ptr<Subgraph> compile_body(const KernelInit& init, const char* name,
                                       const std::vector<ir::ValueType>& input_types = {}) {
  if (init.model == nullptr) throw UnsupportedError(init.node.describe() + ": a subgraph is compiled only within a session");
  return compile_subgraph(body_attr(init.node, name), captured_values(init.node), *init.model, init.pool, input_types);
}

// The dtypes a Loop body's inputs take from the Loop: iteration number, condition, then the
// loop-carried values.
std::vector<ir::ValueType> loop_body_types(const KernelInit& init) {
  std::vector<ir::ValueType> t{ir::ValueType::tensor(DType::kInt64, ir::Shape::of({})),
                               ir::ValueType::tensor(DType::kBool, ir::Shape::of({}))};
  for (size_t k = 2; k < init.node.inputs().size(); ++k) t.push_back(ir::ValueType::tensor(init.input_dtype(k), ir::Shape()));
  return t;
}

// A Scan body's inputs: the states, then one step of each scan input.
std::vector<ir::ValueType> scan_body_types(const KernelInit& init) {
  std::vector<ir::ValueType> t;
  for (size_t k = 0; k < init.node.inputs().size(); ++k) t.push_back(ir::ValueType::tensor(init.input_dtype(k), ir::Shape()));
  return t;
}

// The values the bodies read from enclosing graphs: the kernel's inputs past the node's own.
void append_captured(std::vector<Tensor>& feeds, const std::vector<View>& in, size_t own) {
  for (size_t k = own; k < in.size(); ++k) feeds.push_back(borrowed(in[k]));
}

std::string needs_session(const KernelInit& init) {
  if (init.model == nullptr) return "control flow runs within a session only";
  for (size_t i = 0; i < init.input_types.size(); ++i)
    if (init.input_dtype(i) == DType::kString) return "input " + std::to_string(i) + " is a string tensor";
  return "";
}

// ---- If ---------------------------------------------------------------------------------------

class IfKernel final : public AllocatingKernel {
 public:
  explicit IfKernel(const KernelInit& init)
      : then_(compile_body(init, "then_branch")),
        else_(compile_body(init, "else_branch")),
        own_(init.node.inputs().size()),
        outputs_(init.node.outputs().size()),
        name_(init.node.describe()) {}

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in, const std::vector<View>&) const override {
    std::vector<Tensor> feeds;
    append_captured(feeds, in, own_);
    std::vector<Tensor> out = (truth(in[0], name_, "the condition") ? then_ : else_)->run(feeds);
    if (out.size() != outputs_)
      throw ModelError(name_ + ": the branch taken has " + std::to_string(out.size()) + " outputs; the node has " +
                       std::to_string(outputs_));
    for (Tensor& t : out) t = owned(t);
    return out;
  }

 private:
  std::unique_ptr<Subgraph> then_, else_;
  size_t own_, outputs_;
  std::string name_;
};

// ---- Loop -------------------------------------------------------------------------------------

// The shape of an output made of no steps: the planned one where the plan knows it (no
// elements), else [0].
std::vector<int64_t> empty_shape(const std::vector<int64_t>& planned) {
  const bool usable = !planned.empty() && std::find(planned.begin(), planned.end(), 0) != planned.end();
  return usable ? planned : std::vector<int64_t>{0};
}

// Stacks per-iteration values along a new leading axis (every iteration must give one shape).
Tensor stack(const std::vector<Tensor>& parts, DType dtype, const std::string& node, size_t k,
             const std::vector<int64_t>& planned) {
  std::vector<int64_t> dims{static_cast<int64_t>(parts.size())};
  if (parts.empty()) return Tensor::zeros(dtype, empty_shape(planned));
  const std::vector<int64_t>& one = parts[0].dims();
  dims.insert(dims.end(), one.begin(), one.end());
  Tensor out = Tensor::zeros(dtype, dims);
  auto* dst = static_cast<std::byte*>(out.nbytes() > 0 ? out.mutable_raw_data() : nullptr);
  const int64_t step = parts[0].nbytes();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].dims() != one)
      throw ArgumentError(node + ": scan output " + std::to_string(k) + " is " + dims_str(parts[i].dims()) + " in iteration " +
                          std::to_string(i) + " but " + dims_str(one) + " in iteration 0; every iteration must give one shape");
    if (step > 0) std::memcpy(dst + static_cast<int64_t>(i) * step, parts[i].raw_data(), static_cast<size_t>(step));
  }
  return out;
}

class LoopKernel final : public AllocatingKernel {
 public:
  explicit LoopKernel(const KernelInit& init)
      : body_(compile_body(init, "body", loop_body_types(init))),
        own_(init.node.inputs().size()),
        carried_(init.node.inputs().size() - 2),
        name_(init.node.describe()) {
    for (size_t k = 0; k < init.output_types.size(); ++k) dtypes_.push_back(init.output_dtype(k));
    const ir::Graph& body = body_attr(init.node, "body");
    if (body.inputs().size() != carried_ + 2 || body.outputs().size() < carried_ + 1)
      throw ModelError(name_ + ": the body has " + std::to_string(body.inputs().size()) + " inputs and " +
                       std::to_string(body.outputs().size()) + " outputs; with " + std::to_string(carried_) +
                       " loop-carried values it needs " + std::to_string(carried_ + 2) + " inputs and at least " +
                       std::to_string(carried_ + 1) + " outputs");
    scans_ = body.outputs().size() - 1 - carried_;
  }

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in,
                                const std::vector<View>& planned) const override {
    const int64_t trips = present(in, 0) ? scalar_int(in[0]) : std::numeric_limits<int64_t>::max();
    bool cond = present(in, 1) ? truth(in[1], name_, "the initial condition") : true;
    std::vector<Tensor> carried;
    for (size_t k = 0; k < carried_; ++k) carried.push_back(borrowed(in[2 + k]));
    std::vector<Tensor> captured;
    append_captured(captured, in, own_);
    std::vector<std::vector<Tensor>> scans(scans_);
    for (int64_t i = 0; i < trips && cond; ++i) {
      std::vector<Tensor> feeds;
      feeds.reserve(2 + carried_ + captured.size());
      feeds.push_back(scalar<int64_t>(DType::kInt64, i));
      feeds.push_back(scalar<uint8_t>(DType::kBool, 1));
      for (Tensor& t : carried) feeds.push_back(std::move(t));
      feeds.insert(feeds.end(), captured.begin(), captured.end());
      std::vector<Tensor> out = body_->run(feeds);
      const View c{out[0].dtype(), out[0].dims(), const_cast<void*>(out[0].raw_data())};
      cond = truth(c, name_, "the body's condition output");
      carried.assign(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(carried_));
      for (size_t k = 0; k < scans_; ++k) scans[k].push_back(std::move(out[1 + carried_ + k]));
    }
    std::vector<Tensor> result;
    for (Tensor& t : carried) result.push_back(owned(t));
    for (size_t k = 0; k < scans_; ++k)
      result.push_back(stack(scans[k], dtypes_[carried_ + k], name_, k,
                             carried_ + k < planned.size() ? planned[carried_ + k].dims : std::vector<int64_t>{}));
    return result;
  }

 private:
  std::unique_ptr<Subgraph> body_;
  size_t own_, carried_, scans_ = 0;
  std::vector<DType> dtypes_;
  std::string name_;
};

// ---- Scan -------------------------------------------------------------------------------------

// Sizes before and after `axis` of `dims`.
std::pair<int64_t, int64_t> around(const std::vector<int64_t>& dims, size_t axis) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d < axis) outer *= dims[d];
    if (d > axis) inner *= dims[d];
  }
  return {outer, inner};
}

size_t resolve_axis(int64_t axis, size_t rank, const std::string& node, const char* what) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw ModelError(node + ": " + what + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

class ScanKernel final : public AllocatingKernel {
 public:
  explicit ScanKernel(const KernelInit& init)
      : body_(compile_body(init, "body", scan_body_types(init))),
        own_(init.node.inputs().size()),
        scan_inputs_(static_cast<size_t>(init.node.attr_int("num_scan_inputs", 0))),
        name_(init.node.describe()) {
    if (scan_inputs_ == 0 || scan_inputs_ > own_)
      throw ModelError(name_ + ": num_scan_inputs is " + std::to_string(scan_inputs_) + "; it must be 1 to " +
                       std::to_string(own_));
    states_ = own_ - scan_inputs_;
    scan_outputs_ = init.node.outputs().size() - states_;
    in_axes_ = init.node.attr_ints("scan_input_axes", std::vector<int64_t>(scan_inputs_, 0));
    in_dirs_ = init.node.attr_ints("scan_input_directions", std::vector<int64_t>(scan_inputs_, 0));
    out_axes_ = init.node.attr_ints("scan_output_axes", std::vector<int64_t>(scan_outputs_, 0));
    out_dirs_ = init.node.attr_ints("scan_output_directions", std::vector<int64_t>(scan_outputs_, 0));
    if (in_axes_.size() != scan_inputs_ || in_dirs_.size() != scan_inputs_ || out_axes_.size() != scan_outputs_ ||
        out_dirs_.size() != scan_outputs_)
      throw ModelError(name_ + ": scan_input_axes/directions need one entry per scan input (" + std::to_string(scan_inputs_) +
                       ") and scan_output_axes/directions one per scan output (" + std::to_string(scan_outputs_) + ")");
    for (size_t k = 0; k < init.output_types.size(); ++k) dtypes_.push_back(init.output_dtype(k));
  }

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in,
                                const std::vector<View>& planned) const override {
    // The sequence length: the same along every scan input's axis.
    int64_t len = -1;
    std::vector<size_t> axes(scan_inputs_);
    for (size_t j = 0; j < scan_inputs_; ++j) {
      const View& x = in[states_ + j];
      axes[j] = resolve_axis(in_axes_[j], x.rank(), name_, "scan_input_axes entry");
      const int64_t n = x.dims[axes[j]];
      if (len >= 0 && n != len)
        throw ArgumentError(name_ + ": scan input " + std::to_string(j) + " has " + std::to_string(n) + " steps along axis " +
                            std::to_string(axes[j]) + ", scan input 0 has " + std::to_string(len));
      len = n;
    }
    std::vector<Tensor> states;
    for (size_t k = 0; k < states_; ++k) states.push_back(borrowed(in[k]));
    std::vector<Tensor> captured;
    append_captured(captured, in, own_);
    std::vector<std::vector<Tensor>> parts(scan_outputs_, std::vector<Tensor>(static_cast<size_t>(len)));
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Tensor> feeds;
      for (Tensor& s : states) feeds.push_back(std::move(s));
      for (size_t j = 0; j < scan_inputs_; ++j) {
        const int64_t at = in_dirs_[j] != 0 ? len - 1 - t : t;
        feeds.push_back(slice(in[states_ + j], axes[j], at));
      }
      feeds.insert(feeds.end(), captured.begin(), captured.end());
      std::vector<Tensor> out = body_->run(feeds);
      states.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(states_));
      for (size_t k = 0; k < scan_outputs_; ++k) {
        const int64_t at = out_dirs_[k] != 0 ? len - 1 - t : t;
        parts[k][static_cast<size_t>(at)] = std::move(out[states_ + k]);
      }
    }
    std::vector<Tensor> result;
    for (Tensor& s : states) result.push_back(owned(s));
    for (size_t k = 0; k < scan_outputs_; ++k)
      result.push_back(join(parts[k], k, states_ + k < planned.size() ? planned[states_ + k].dims : std::vector<int64_t>{}));
    return result;
  }

 private:
  // Step `at` of x along `axis`, without that axis.
  static Tensor slice(const View& x, size_t axis, int64_t at) {
    auto [outer, inner] = around(x.dims, axis);
    std::vector<int64_t> dims = x.dims;
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(axis));
    const size_t esize = elem_bytes(x.dtype);
    if (outer == 1) return Tensor::copy_of(x.dtype, dims, static_cast<const std::byte*>(x.data) + at * inner * esize,
                                           static_cast<int64_t>(inner * esize));
    Tensor out = Tensor::zeros(x.dtype, dims);
    auto* dst = static_cast<std::byte*>(out.nbytes() > 0 ? out.mutable_raw_data() : nullptr);
    const auto* src = static_cast<const std::byte*>(x.data);
    const int64_t n = x.dims[axis];
    for (int64_t o = 0; o < outer && dst != nullptr; ++o)
      std::memcpy(dst + o * inner * esize, src + (o * n + at) * inner * esize, static_cast<size_t>(inner) * esize);
    return out;
  }

  // The per-step values of scan output k joined along its axis. Of no steps, the shape the
  // plan has for it where it has one (the steps' shape comes from the body's declared outputs).
  Tensor join(const std::vector<Tensor>& parts, size_t k, const std::vector<int64_t>& planned) const {
    const DType dtype = dtypes_[states_ + k];
    if (parts.empty()) return Tensor::zeros(dtype, empty_shape(planned));
    const std::vector<int64_t>& one = parts[0].dims();
    const size_t axis = resolve_axis(out_axes_[k], one.size() + 1, name_, "scan_output_axes entry");
    std::vector<int64_t> dims = one;
    const auto len = static_cast<int64_t>(parts.size());
    dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(axis), len);
    Tensor out = Tensor::zeros(dtype, dims);
    auto* dst = static_cast<std::byte*>(out.nbytes() > 0 ? out.mutable_raw_data() : nullptr);
    auto [outer, inner] = around(dims, axis);
    const size_t esize = elem_bytes(dtype);
    for (int64_t t = 0; t < len; ++t) {
      const Tensor& p = parts[static_cast<size_t>(t)];
      if (p.dims() != one)
        throw ArgumentError(name_ + ": scan output " + std::to_string(k) + " is " + dims_str(p.dims()) + " at step " +
                            std::to_string(t) + " but " + dims_str(one) + " at step 0; every step must give one shape");
      const auto* src = static_cast<const std::byte*>(p.raw_data());
      for (int64_t o = 0; o < outer && dst != nullptr; ++o)
        std::memcpy(dst + (o * len + t) * inner * esize, src + o * inner * esize, static_cast<size_t>(inner) * esize);
    }
    return out;
  }

  std::unique_ptr<Subgraph> body_;
  size_t own_, scan_inputs_, states_ = 0, scan_outputs_ = 0;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
  std::vector<DType> dtypes_;
  std::string name_;
};

std::string scan_check(const KernelInit& init) {
  if (std::string why = needs_session(init); !why.empty()) return why;
  if (init.opset < 9) return "Scan before opset 9 (with a batch axis and sequence_lens) is not supported";
  return "";
}

}  // namespace

void register_control(KernelRegistry& r) {
  TETHER_ADD(r, "If",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<IfKernel>(i); }, needs_session);
  TETHER_ADD(r, "Loop",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<LoopKernel>(i); }, needs_session);
  TETHER_ADD(r, "Scan",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ScanKernel>(i); }, scan_check);
}

}  // namespace tether::engine::cpu
