// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1,
// ReduceL2, ReduceLogSum, ReduceLogSumExp over constant axes that form one run of dims
// (shaders/reduce.comp).
#include <algorithm>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

enum ReduceOp : uint32_t { kSum = 0, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSum, kLogSumExp };

struct ReducePush {
  uint32_t rows, len, inner;
};

// The reduced axes, sorted, from the attribute (older opsets) or the constant input 1; all of
// them when none are given (unless noop_with_empty_axes).
std::vector<int64_t> reduce_axes(const KernelInit& init, size_t rank, bool* noop) {
  std::vector<int64_t> axes = init.node.attr_ints("axes");
  if (init.node.attr("axes") == nullptr && init.constant(1) != nullptr) axes = int_values(*init.constant(1));
  *noop = axes.empty() && init.node.attr_int("noop_with_empty_axes", 0) == 1;
  if (axes.empty())
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  for (int64_t& a : axes) a = a < 0 ? a + static_cast<int64_t>(rank) : a;
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

class ReduceKernel final : public GpuKernel {
 public:
  ReduceKernel(const KernelInit& init, ReduceOp op) : node_(init.node), op_(op) {
    bool noop = false;
    axes_ = reduce_axes(init, init.input_types[0].shape().rank(), &noop);
    if (noop) op_ = kSum, axes_.clear();
  }

  void prepare(Gpu& gpu) override { pipeline_ = &gpu.pipeline("reduce", 2, sizeof(ReducePush), {kLocal, op_}); }
  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& d = in[0].dims;
    check_u32(node_, in[0].numel(), "the input");
    const size_t a0 = axes_.empty() ? 0 : static_cast<size_t>(axes_.front());
    const size_t a1 = axes_.empty() ? 0 : static_cast<size_t>(axes_.back()) + 1;
    ReducePush p{static_cast<uint32_t>(product(d, 0, a0) * product(d, a1, d.size())), static_cast<uint32_t>(product(d, a0, a1)),
                 static_cast<uint32_t>(product(d, a1, d.size()))};
    if (p.inner == 0) return;
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &p, sizeof p, p.rows);
  }

 private:
  const ir::Node& node_;
  ReduceOp op_;
  std::vector<int64_t> axes_;
  const Pipeline* pipeline_ = nullptr;
};

std::string reduce_check(const KernelInit& init) {
  if (std::string why = require_dtype(init, 0, {ir::DType::kFloat32}); !why.empty()) return why;
  const ir::Shape& s = init.input_types[0].shape();
  if (!s.has_rank()) return "input 0 has an unknown rank";
  if (init.node.attr("axes") == nullptr && init.node.inputs().size() > 1 && init.node.input(1) != nullptr &&
      init.constant(1) == nullptr)
    return "its axes are computed at run time; the Vulkan kernel takes constant axes";
  bool noop = false;
  const std::vector<int64_t> axes = reduce_axes(init, s.rank(), &noop);
  const std::string& op = init.node.op_type();
  if (noop && op != "ReduceSum" && op != "ReduceMean" && op != "ReduceMax" && op != "ReduceMin" && op != "ReduceProd")
    return "with no axes and noop_with_empty_axes it maps each element; the Vulkan kernel copies";
  for (int64_t a : axes)
    if (a < 0 || a >= static_cast<int64_t>(s.rank())) return "an axis is out of range";
  for (size_t k = 1; k < axes.size(); ++k)
    if (axes[k] != axes[k - 1] + 1) return "its axes are not one run of dims; the Vulkan kernel reduces one run";
  return "";
}

template <ReduceOp kOp>
std::unique_ptr<Kernel> reduce(const KernelInit& init) {
  return std::make_unique<ReduceKernel>(init, kOp);
}

}  // namespace

void register_reduce(KernelRegistry& r) {
  r.add("ReduceSum", reduce<kSum>, reduce_check);
  r.add("ReduceMean", reduce<kMean>, reduce_check);
  r.add("ReduceMax", reduce<kMax>, reduce_check);
  r.add("ReduceMin", reduce<kMin>, reduce_check);
  r.add("ReduceProd", reduce<kProd>, reduce_check);
  r.add("ReduceSumSquare", reduce<kSumSquare>, reduce_check);
  r.add("ReduceL1", reduce<kL1>, reduce_check);
  r.add("ReduceL2", reduce<kL2>, reduce_check);
  r.add("ReduceLogSum", reduce<kLogSum>, reduce_check);
  r.add("ReduceLogSumExp", reduce<kLogSumExp>, reduce_check);
}

}  // namespace tether::engine::vulkan
