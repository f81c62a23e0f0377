// The CPU backend: which ops it runs and how their kernels are made.
#include "engine/cpu/cpu.h"
#include "engine/cpu/matmul_nbits.h"

namespace tether::engine {

namespace cpu {

namespace {

class CpuBackend final : public RegistryBackend {
 public:
  CpuBackend() : RegistryBackend("no cpu kernel for this op") {
    register_elementwise(registry_);
    register_matmul(registry_);
    register_conv(registry_);
    register_pool(registry_);
    register_norm(registry_);
    register_reduce(registry_);
    register_shape(registry_);
    register_misc(registry_);
    register_scatter(registry_);
    register_resize(registry_);
    register_rnn(registry_);
    register_einsum(registry_);
    register_quantize(registry_);
    register_qlinear(registry_);
    register_dynamic(registry_);
    register_control(registry_);
    register_attention(registry_);
    register_pool_nhwc(registry_);
    register_matmul_nbits(registry_);
    register_ms_norm(registry_);
    register_ms_attention(registry_);
  }

  std::string_view name() const override { return "cpu"; }
};

}  // namespace

std::string float_only(const KernelInit& init) {
  for (size_t i = 0; i < init.input_types.size(); ++i)
    if (init.node.input(i) != nullptr && init.input_dtype(i) != DType::kFloat32)
      return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.input_dtype(i))) + "; supported: float32";
  return "";
}

std::string fixed_size(const KernelInit& init) {
  const DType t = init.input_dtype(0);
  if (t == DType::kString || ir::dtype_bits(t) % 8 != 0 || t == DType::kUndefined)
    return "input 0 is " + std::string(ir::dtype_name(t)) + "; supported: types of whole bytes";
  return "";
}

bool is_numeric(DType t) {
  return dispatch_numeric(t, [](auto) {});
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

std::vector<int64_t> broadcast_dims(const std::vector<const std::vector<int64_t>*>& shapes) {
  size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->size());
  std::vector<int64_t> out(rank, 1);
  for (const auto* s : shapes)
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t& o = out[rank - s->size() + i];
      const int64_t d = (*s)[i];
      if (d == 1) continue;
      TETHER_CHECK(o == 1 || o == d, "broadcast of incompatible shapes");
      o = d;
    }
  return out;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> s(out_dims.size(), 0);
  const std::vector<int64_t> own = strides_of(dims);
  const size_t lead = out_dims.size() - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) s[lead + i] = dims[i] == 1 ? 0 : own[i];
  return s;
}

BroadcastRows::BroadcastRows(const std::vector<int64_t>& out_dims, const std::vector<const std::vector<int64_t>*>& inputs) {
  if (!out_dims.empty()) {
    row_ = out_dims.back();
    outer_dims_.assign(out_dims.begin(), out_dims.end() - 1);
  }
  for (const auto* in : inputs) {
    std::vector<int64_t> s = broadcast_strides(*in, out_dims);
    inner_.push_back(s.empty() ? 0 : s.back());
    if (!s.empty()) s.pop_back();
    outer_strides_.push_back(std::move(s));
  }
  // Longer rows: the dim before the row joins it while every input either runs on through it
  // contiguously (stride 1 along the row, and the dim's stride the row's length) or is
  // broadcast over both (stride 0). [N, C, H, W] * [N, C, 1, 1] then has rows of H * W.
  while (!outer_dims_.empty()) {
    bool joins = true;
    for (size_t k = 0; k < inner_.size() && joins; ++k) {
      const int64_t stride = outer_strides_[k].back();
      joins = (inner_[k] == 1 && stride == row_) || (inner_[k] == 0 && stride == 0);
    }
    if (!joins) break;
    row_ *= outer_dims_.back();
    outer_dims_.pop_back();
    for (auto& st : outer_strides_) st.pop_back();
  }
  for (int64_t d : outer_dims_) rows_ *= d;
}

int64_t broadcast_offset(int64_t index, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    off += (index % dims[d]) * strides[d];
    index /= dims[d];
  }
  return off;
}

int64_t BroadcastRows::offset(size_t k, int64_t r) const { return broadcast_offset(r, outer_dims_, outer_strides_[k]); }

int64_t scalar_int(const View& v) {
  TETHER_CHECK(v.numel() >= 1, "scalar_int of an empty tensor");
  if (v.dtype == DType::kInt32) return v.as<int32_t>()[0];
  TETHER_CHECK(v.dtype == DType::kInt64, "scalar_int of a non-integer tensor");
  return v.as<int64_t>()[0];
}

std::vector<int64_t> int_values(const View& v) {
  const int64_t n = v.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (v.dtype == DType::kInt32) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = v.as<int32_t>()[i];
  } else {
    TETHER_CHECK(v.dtype == DType::kInt64, "int_values of a non-integer tensor");
    if (n > 0) std::memcpy(out.data(), v.data, static_cast<size_t>(n) * sizeof(int64_t));
  }
  return out;
}

}  // namespace cpu

const Backend& cpu_backend() {
  static const cpu::CpuBackend backend;
  return backend;
}

std::unique_ptr<HostKernel> create_host_kernel(const KernelInit& init) {
  // Every CPU kernel derives from HostKernel (the registry's factories make nothing else).
  return std::unique_ptr<HostKernel>(static_cast<HostKernel*>(cpu_backend().create(init).release()));
}

}  // namespace tether::engine
