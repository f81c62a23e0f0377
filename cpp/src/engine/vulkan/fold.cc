// Steps a plan folds into the kernels that read their output, so that they dispatch nothing:
// views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) always; and, where every reader takes
// strided operands (MatMul, FusedMatMul, Transpose: GpuKernel::reads_strided), a Transpose, a Mul by a
// one-element constant and a Gather of one constant index. The readers then find the value in
// its root's range, at strides, times a scale. docs/vulkan.md ("Transposes read in place").
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "engine/vulkan/instance.h"
#include "engine/vulkan/ops.h"
#include "engine/vulkan/space.h"

namespace tether::engine::vulkan {

namespace {

enum class Fold { kNone, kView, kTranspose, kScale, kPick };

// A value as its readers see it: value `root`'s range from byte `offset`, its elements at
// `strides` over its dims (empty: row-major), times `scale`.
struct Layout {
  int root = -1;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  float scale = 1.0f;
  bool plain() const { return strides.empty() && scale == 1.0f; }
};

bool is_onnx(const ir::Node& n, const char* op) {
  return n.op_type() == op && (n.domain().empty() || n.domain() == "ai.onnx");
}

// Size-1 dims take the stride a row-major tensor would give them (they are never stepped
// along), and strides equal to row-major ones become empty: so that a Transpose that moves
// only size-1 dims, or a view of one, is a plain alias every reader takes.
void normalise(const Dims& dims, std::vector<int64_t>& strides) {
  for (size_t d = dims.size(); d-- > 0;)
    if (dims[d] == 1) strides[d] = d + 1 < dims.size() ? strides[d + 1] * dims[d + 1] : 1;
  if (strides == strides_of(dims)) strides.clear();
}

// Strides over `out` that read the elements of (in, in_strides) in row-major order, as a
// reshape without copying would (numpy's rule): none where the reshape merges dims that are
// not contiguous with one another.
std::optional<std::vector<int64_t>> restride(const Dims& in, const std::vector<int64_t>& in_strides, const Dims& out) {
  Dims id;
  std::vector<int64_t> is;
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) {
      id.push_back(in[d]);
      is.push_back(in_strides[d]);
    }
  std::vector<int64_t> os(out.size(), 0);
  size_t i = 0, o = 0;
  auto skip_ones = [&](size_t k) {
    while (k < out.size() && out[k] == 1) ++k;
    return k;
  };
  for (o = skip_ones(o); o < out.size(); o = skip_ones(o)) {
    if (i >= id.size()) return std::nullopt;
    // The smallest run of input dims and output dims with equal products.
    int64_t pi = id[i], po = out[o];
    size_t i2 = i + 1, o2 = o + 1;
    while (pi != po) {
      if (pi < po) {
        if (i2 >= id.size()) return std::nullopt;
        pi *= id[i2++];
      } else {
        o2 = skip_ones(o2);
        if (o2 >= out.size()) return std::nullopt;
        po *= out[o2++];
      }
    }
    for (size_t k = i; k + 1 < i2; ++k)
      if (is[k] != is[k + 1] * id[k + 1]) return std::nullopt;
    int64_t s = is[i2 - 1];
    for (size_t k = o2; k-- > o;)
      if (out[k] != 1) {
        os[k] = s;
        s *= out[k];
      }
    i = i2;
    o = o2;
  }
  if (i != id.size()) return std::nullopt;
  return os;
}

}  // namespace

void VulkanSpace::fold_steps(Plan& plan) const {
  const size_t n = values_.size();
  const int64_t align = std::max<int64_t>(1, static_cast<int64_t>(device_->limits().minStorageBufferOffsetAlignment));
  std::vector<std::vector<std::pair<size_t, size_t>>> readers(n);  // (step, input slot)
  std::vector<Fold> kind(steps_.size(), Fold::kNone);
  std::vector<int> data_in(steps_.size(), 0);  // the input slot a folded step's output is made of
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    for (size_t k = 0; k < step.inputs.size(); ++k)
      if (step.inputs[k] >= 0) readers[static_cast<size_t>(step.inputs[k])].push_back({s, k});
    if (!plan.on_gpu[s] || step.outputs.empty() || step.outputs[0] < 0) continue;
    const ir::Node& node = *step.node;
    const auto numel = [&](int v) { return v >= 0 ? ir::checked_num_elements(plan.dims[static_cast<size_t>(v)]).value_or(0) : 0; };
    const ir::DType out_type = values_[static_cast<size_t>(step.outputs[0])].value->type().dtype();
    if (step.gpu->is_view()) {
      kind[s] = Fold::kView;
    } else if (numel(step.outputs[0]) == 0 || (out_type != ir::DType::kFloat32 && out_type != ir::DType::kInt32)) {
      continue;  // strided reads take 32-bit elements
    } else if (is_onnx(node, "Transpose")) {
      kind[s] = Fold::kTranspose;
    } else if (is_onnx(node, "Gather") && step.inputs.size() == 2 && step.inputs[1] >= 0 &&
               values_[static_cast<size_t>(step.inputs[1])].is_constant &&
               values_[static_cast<size_t>(step.inputs[1])].constant->num_elements() == 1) {
      kind[s] = Fold::kPick;
    } else if (is_onnx(node, "Mul") && step.inputs.size() == 2 && values_[static_cast<size_t>(step.outputs[0])].value->type().dtype() == ir::DType::kFloat32) {
      // x * c for a finite one-element float32 constant c, x of the output's dims.
      for (int k = 0; k < 2; ++k) {
        const int c = step.inputs[static_cast<size_t>(1 - k)], x = step.inputs[static_cast<size_t>(k)];
        if (c < 0 || x < 0 || !values_[static_cast<size_t>(c)].is_constant) continue;
        const ir::Tensor& t = *values_[static_cast<size_t>(c)].constant;
        float v = 0;
        if (t.dtype() != ir::DType::kFloat32 || t.num_elements() != 1) continue;
        std::memcpy(&v, t.raw_data(), sizeof v);
        if (!std::isfinite(v) || plan.dims[static_cast<size_t>(x)] != plan.dims[static_cast<size_t>(step.outputs[0])]) continue;
        kind[s] = Fold::kScale;
        data_in[s] = k;
      }
    }
  }
  // TETHER_VULKAN_NO_FOLD=1 keeps every Transpose, Mul and Gather a dispatch of its own, to
  // compare the two on one device.
  const bool views_only = env_is_one("TETHER_VULKAN_NO_FOLD");
  std::vector<char> fold(steps_.size());
  for (size_t s = 0; s < steps_.size(); ++s) fold[s] = kind[s] == Fold::kView || (kind[s] != Fold::kNone && !views_only);

  std::vector<Layout> layout(n);
  auto data_of = [&](size_t s) { return static_cast<size_t>(steps_[s].inputs[static_cast<size_t>(data_in[s])]); };
  // Unfolds the nearest step above value v that a view cannot undo (the Transpose, Mul or
  // Gather that made it strided); false when there is none.
  auto unfold_above = [&](size_t v) {
    for (int p = values_[v].producer; p >= 0 && fold[static_cast<size_t>(p)]; p = values_[data_of(static_cast<size_t>(p))].producer) {
      if (kind[static_cast<size_t>(p)] == Fold::kView) continue;
      fold[static_cast<size_t>(p)] = 0;
      return true;
    }
    return false;
  };
  // The readers' inputs with the layouts of the values they read strided.
  auto inputs_of = [&](size_t c) {
    bool empty = true;
    auto [ins, outs] = step_tensors(plan, c, false, empty);
    for (size_t k = 0; k < ins.size(); ++k) {
      const int v = steps_[c].inputs[k];
      if (v < 0 || layout[static_cast<size_t>(v)].plain()) continue;
      ins[k].strides = layout[static_cast<size_t>(v)].strides;
      ins[k].scale = layout[static_cast<size_t>(v)].scale;
    }
    return std::make_pair(std::move(ins), std::move(outs));
  };

  for (bool changed = true; changed;) {
    changed = false;
    // Layouts, given which steps fold.
    for (size_t v = 0; v < n; ++v) layout[v] = Layout{static_cast<int>(v)};
    for (size_t s = 0; s < steps_.size() && !changed; ++s) {
      if (!fold[s]) continue;
      const Step& step = steps_[s];
      const size_t x = data_of(s), y = static_cast<size_t>(step.outputs[0]);
      const Layout& in = layout[x];
      Layout out{in.root, in.offset, {}, in.scale};
      std::vector<int64_t> is = in.strides.empty() ? strides_of(plan.dims[x]) : in.strides;
      if (kind[s] == Fold::kView) {
        if (!in.strides.empty()) {
          std::optional<std::vector<int64_t>> os = restride(plan.dims[x], is, plan.dims[y]);
          if (!os) {
            changed = unfold_above(x);
            TETHER_CHECK(changed);
            break;
          }
          out.strides = std::move(*os);
        }
      } else if (kind[s] == Fold::kTranspose) {
        std::vector<int64_t> perm = step.node->attr_ints("perm");
        if (perm.empty())
          for (size_t d = is.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
        if (perm.size() != is.size()) {
          fold[s] = 0;
          continue;
        }
        for (int64_t p : perm) out.strides.push_back(is[static_cast<size_t>(p)]);
      } else if (kind[s] == Fold::kScale) {
        out.strides = is;
        float c = 0;
        std::memcpy(&c, values_[static_cast<size_t>(step.inputs[static_cast<size_t>(1 - data_in[s])])].constant->raw_data(), sizeof c);
        out.scale *= c;
      } else {  // kPick: one index along `axis`; its dims (none, or 1s) replace the axis
        const Dims& xd = plan.dims[x];
        const int64_t axis = step.node->attr_int("axis", 0), a = axis < 0 ? axis + static_cast<int64_t>(xd.size()) : axis;
        const ir::Tensor& idx = *values_[static_cast<size_t>(step.inputs[1])].constant;
        const std::vector<int64_t> iv = idx.dtype() == ir::DType::kInt64 || idx.dtype() == ir::DType::kInt32 ? int_values(idx)
                                                                                                              : std::vector<int64_t>{};
        const int64_t at = iv.empty() || a < 0 || a >= static_cast<int64_t>(xd.size()) ? -1
                           : iv[0] < 0 ? iv[0] + xd[static_cast<size_t>(a)] : iv[0];
        const int64_t bytes = half(x) ? 2 : 4;  // float32 and int32 words; float16 under fp16
        const int64_t offset = at >= 0 ? out.offset + at * is[static_cast<size_t>(a)] * bytes : -1;
        if (at < 0 || at >= xd[static_cast<size_t>(a)] || offset % align != 0) {
          fold[s] = 0;  // the kernel reports an index out of range; an unaligned range cannot be bound
          continue;
        }
        out.offset = offset;
        out.strides.assign(is.begin(), is.begin() + a);
        out.strides.insert(out.strides.end(), static_cast<size_t>(idx.dims().size()), 0);
        out.strides.insert(out.strides.end(), is.begin() + a + 1, is.end());
        if (out.strides.size() != plan.dims[y].size()) {
          fold[s] = 0;
          continue;
        }
      }
      if (!out.strides.empty()) normalise(plan.dims[y], out.strides);
      layout[y] = std::move(out);
    }
    if (changed) continue;
    // Every strided value is read only by kernels that take it so, or by folded steps.
    for (size_t v = 0; v < n && !changed; ++v) {
      if (layout[v].plain()) continue;
      bool ok = !plan.cpu_reads[v] && values_[v].output < 0 && !plan.capture[v];
      for (const auto& [c, k] : readers[v]) {
        if (!ok) break;
        if ((fold[c] && static_cast<int>(k) == data_in[c]) || steps_[c].dims_only) continue;  // Shape reads dims alone
        if (!plan.on_gpu[c]) {
          ok = false;
          break;
        }
        const auto [ins, outs] = inputs_of(c);
        ok = steps_[c].gpu->reads_strided(k, ins) && steps_[c].gpu->refuses(*device_, ins, outs).empty();
      }
      if (!ok) changed = unfold_above(v);
      TETHER_CHECK(ok || changed);
    }
  }

  plan.folded = std::move(fold);
  plan.root.assign(n, -1);
  plan.root_offset.assign(n, 0);
  plan.strides.assign(n, {});
  plan.scale.assign(n, 1.0f);
  for (size_t v = 0; v < n; ++v) {
    if (layout[v].root == static_cast<int>(v)) continue;
    plan.root[v] = layout[v].root;
    plan.root_offset[v] = layout[v].offset;
    plan.strides[v] = layout[v].strides;
    plan.scale[v] = layout[v].scale;
  }
  // The readers' device scratch for the strided reads.
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (!plan.on_gpu[s] || plan.folded[s]) continue;
    bool strided = false;
    for (int v : steps_[s].inputs) strided = strided || (v >= 0 && !layout[static_cast<size_t>(v)].plain());
    if (!strided) continue;
    const auto [ins, outs] = inputs_of(s);
    int64_t scratch = 0;
    steps_[s].gpu->refuses(*device_, ins, outs, &scratch);
    plan.device_scratch_bytes = std::max(plan.device_scratch_bytes, scratch);
  }
}

}  // namespace tether::engine::vulkan
