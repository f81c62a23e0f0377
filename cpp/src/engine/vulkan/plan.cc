// Plans of the Vulkan space: for one set of input shapes, which steps run on the device, where
// every value lives in device memory (arena, weight buffer), what crosses between host and
// device, and the recorded command buffers.
#include <algorithm>

#include "engine/planner.h"
#include "engine/session.h"
#include "engine/vulkan/record.h"
#include "engine/vulkan/space.h"

namespace tether::engine::vulkan {

namespace {

int64_t value_bytes(const ValueEntry& e, const Dims& dims) {
  return ir::storage_bytes(e.value->type().dtype(), ir::checked_num_elements(dims).value_or(0)).value_or(0);
}

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Value i (entry e) is read on the host in this plan: by a CPU step, as a model output, or captured.
bool needed_on_host(const Plan& plan, const ValueEntry& e, size_t i) {
  return plan.cpu_reads[i] || e.output >= 0 || plan.capture[i];
}

}  // namespace

Plan::~Plan() {
  const DeviceApi& api = device->api();
  if (pool != VK_NULL_HANDLE) api.vkDestroyCommandPool(device->handle(), pool, nullptr);
  if (descriptors != VK_NULL_HANDLE) api.vkDestroyDescriptorPool(device->handle(), descriptors, nullptr);
  if (fence != VK_NULL_HANDLE) api.vkDestroyFence(device->handle(), fence, nullptr);
  if (queries != VK_NULL_HANDLE) api.vkDestroyQueryPool(device->handle(), queries, nullptr);
}

std::unique_ptr<SpacePlan> VulkanSpace::plan(const std::vector<Dims>& dims, bool capture) const {
  auto plan = std::make_unique<Plan>(device_, *this);
  plan->dims = dims;
  place_steps(*plan);
  for (int s = 0; s < static_cast<int>(steps_.size()); ++s) {
    const bool gpu = plan->on_gpu[static_cast<size_t>(s)] != 0;
    if (plan->segments.empty() || plan->segments.back().gpu != gpu) plan->segments.push_back(Segment{gpu, s, s});
    plan->segments.back().end = s + 1;
  }
  for (const Segment& seg : plan->segments) plan->stretches_.push_back({seg.begin, seg.end, seg.gpu});
  plan->capture.assign(values_.size(), false);
  if (capture)
    for (size_t i = 0; i < values_.size(); ++i) {
      const ValueEntry& e = values_[i];
      plan->capture[i] = e.producer >= 0 && plan->on_gpu[static_cast<size_t>(e.producer)] && e.output < 0;
    }
  fold_steps(*plan);
  place_on_device(*plan);
  return plan;
}

std::string Plan::device_bytes_text() const {
  return "device arena " + std::to_string(arena_bytes) + ", device scratch " + std::to_string(device_scratch_bytes) +
         ", staging " + std::to_string(staging_bytes);
}

void Plan::stats(MemoryStats& m) const {
  m.arena_bytes = arena_bytes;
  m.intermediate_bytes = intermediate_bytes;
  m.staging_bytes = staging_bytes;
}

// The arena, staging and scratch buffers, every value's range in them, then the commands.
void Plan::realize() {
  arena = device->buffer(arena_bytes, Memory::kDevice, "the device arena of a plan");
  for (const auto& [i, offset] : arena_offsets) {
    dev[i].buffer = arena.handle();
    dev[i].offset = offset;
  }
  for (size_t i = 0; i < dev.size(); ++i)
    if (const int w = space.values_[i].weight; w >= 0) {
      const Range& r = space.weight_ranges_[static_cast<size_t>(w)];
      dev[i].buffer = r.buffer;
      dev[i].offset = r.offset;
    }
  for (size_t i = 0; i < dev.size(); ++i) {
    if (alias[i] < 0) continue;
    const Range& r = dev[static_cast<size_t>(alias[i])];
    dev[i].buffer = r.buffer;
    dev[i].offset = r.offset + root_offset[i];
    // Strided reads reach anywhere in the root's range past the offset.
    if (!strides[i].empty()) dev[i].bytes = r.bytes - root_offset[i];
  }
  if (staging_bytes > 0) staging = device->buffer(staging_bytes, Memory::kStaging, "the staging buffer of a plan");
  if (device_scratch_bytes > 0)
    device_scratch = device->buffer(device_scratch_bytes, Memory::kDevice, "the kernels' scratch of a plan");
  space.record(*this);
}

// Which steps run on Vulkan for these shapes: each Vulkan kernel is asked whether it takes
// them (a broadcast that does not merge to the dims a shader indexes, a grid past what one
// dispatch covers); a node it refuses runs on the host in this plan (strict: an error).
void VulkanSpace::place_steps(Plan& plan) const {
  plan.on_gpu.assign(steps_.size(), 0);
  plan.refusals.assign(steps_.size(), std::string());
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.gpu == nullptr) continue;
    bool empty = true;
    const auto [ins, outs] = step_tensors(plan, s, false, empty);
    int64_t scratch = 0;
    const std::string why = empty ? std::string() : step.gpu->refuses(*device_, ins, outs, &scratch);
    if (why.empty()) {
      plan.on_gpu[s] = 1;
      plan.device_scratch_bytes = std::max(plan.device_scratch_bytes, scratch);
      continue;
    }
    if (strict_)
      throw UnsupportedError("strict: the Vulkan backend cannot run " + why + " (for these input shapes; without strict "
                             "the node runs on the cpu)");
    plan.refusals[s] = why;
  }
  plan.cpu_reads.assign(values_.size(), 0);
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (plan.on_gpu[s] || steps_[s].dims_only) continue;
    for (int in : steps_[s].inputs)
      if (in >= 0) plan.cpu_reads[static_cast<size_t>(in)] = 1;
  }
}

std::pair<std::vector<GpuTensor>, std::vector<GpuTensor>> VulkanSpace::step_tensors(const Plan& plan, size_t s,
                                                                                      bool ranges, bool& empty) const {
  const Step& step = steps_[s];
  auto tensor = [&](int v, bool range) {
    GpuTensor t;
    if (v < 0) return t;
    t.dtype = values_[static_cast<size_t>(v)].value->type().dtype();
    t.dims = plan.dims[static_cast<size_t>(v)];
    if (range) t.range = plan.dev[static_cast<size_t>(v)];
    return t;
  };
  std::vector<GpuTensor> ins, outs;
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    ins.push_back(tensor(step.inputs[k], ranges && step.gpu->reads_on_device(k)));
    if (step.inputs[k] < 0 || plan.strides.empty()) continue;
    ins.back().strides = plan.strides[static_cast<size_t>(step.inputs[k])];
    ins.back().scale = plan.scale[static_cast<size_t>(step.inputs[k])];
  }
  empty = true;
  for (int o : step.outputs) {
    outs.push_back(tensor(o, ranges));
    if (o >= 0) empty = empty && outs.back().numel() == 0;
  }
  return {std::move(ins), std::move(outs)};
}

// Device ranges: constants read on the device are in the weight buffer; values Vulkan steps
// write, and host values they read (uploaded once, at the start of the first segment reading
// them), get offsets in one arena by their lifetimes; a view's output shares its input's range.
void VulkanSpace::place_on_device(Plan& plan) const {
  const size_t n = values_.size();
  std::vector<int> seg_of(steps_.size());
  for (size_t g = 0; g < plan.segments.size(); ++g)
    for (int s = plan.segments[g].begin; s < plan.segments[g].end; ++s) seg_of[static_cast<size_t>(s)] = static_cast<int>(g);
  auto gpu_written = [&](size_t i) { return values_[i].producer >= 0 && plan.on_gpu[static_cast<size_t>(values_[i].producer)]; };
  auto host_needed = [&](size_t i) { return needed_on_host(plan, values_[i], i); };

  std::vector<int> first(n, -1), last(n, -1), upload_seg(n, -1), alias(n, -1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (!plan.on_gpu[s]) continue;
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int in = step.inputs[k];
      if (in < 0 || !step.gpu->reads_on_device(k)) continue;
      const auto i = static_cast<size_t>(in);
      if (values_[i].weight >= 0) continue;
      if (!gpu_written(i) && upload_seg[i] < 0) {
        upload_seg[i] = seg_of[s];
        first[i] = plan.segments[static_cast<size_t>(seg_of[s])].begin;
      }
      last[i] = std::max(last[i], static_cast<int>(s));
    }
    for (int o : step.outputs)
      if (o >= 0) first[static_cast<size_t>(o)] = last[static_cast<size_t>(o)] = static_cast<int>(s);
  }
  // Values downloaded at the end of their segment live until then.
  for (size_t i = 0; i < n; ++i)
    if (gpu_written(i) && host_needed(i))
      last[i] = std::max(last[i], plan.segments[static_cast<size_t>(seg_of[static_cast<size_t>(values_[i].producer)])].end - 1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (!plan.on_gpu[s] || !plan.folded[s]) continue;
    const auto out = static_cast<size_t>(steps_[s].outputs[0]);
    const int root = plan.root[out];
    alias[out] = root;
    last[static_cast<size_t>(root)] = std::max(last[static_cast<size_t>(root)], last[out]);
  }

  const VkPhysicalDeviceLimits& limits = device_->limits();
  const int64_t align = std::max<int64_t>(64, static_cast<int64_t>(limits.minStorageBufferOffsetAlignment));
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> placed;
  plan.dev.assign(n, Range{});
  for (size_t i = 0; i < n; ++i) {
    if (first[i] < 0 && alias[i] < 0 && values_[i].weight < 0) continue;
    const int64_t bytes = half(i) ? ir::checked_num_elements(plan.dims[i]).value_or(0) * 2 : value_bytes(values_[i], plan.dims[i]);
    if (bytes > static_cast<int64_t>(limits.maxStorageBufferRange))
      throw DeviceError("value '" + values_[i].value->name() + "' takes " + bytes_text(bytes) + ", more than the " +
                        bytes_text(limits.maxStorageBufferRange) + " Vulkan device '" + device_->name() +
                        "' binds at once; use smaller inputs or compile with device='cpu'");
    plan.dev[i].bytes = bytes;
    if (values_[i].weight >= 0 || alias[i] >= 0 || first[i] < 0) continue;
    lifetimes.push_back({std::max<int64_t>(bytes, 16), first[i], std::max(first[i], last[i])});
    placed.push_back(i);
  }
  const ArenaPlan arena = plan_arena(lifetimes, align);
  plan.arena_bytes = arena.arena_bytes;
  plan.intermediate_bytes = arena.sum_bytes;
  for (size_t k = 0; k < placed.size(); ++k) plan.arena_offsets.emplace_back(placed[k], arena.offsets[k]);
  plan.alias = std::move(alias);
  plan_transfers(plan, upload_seg);
}

// Transfers through one staging buffer, each in a region of its own: uploads of host values
// at the start of the segment `upload_seg` names, downloads of what the host needs at the end
// of the segment writing it. Returns the staging buffer's bytes (also in plan.staging_bytes).
int64_t VulkanSpace::plan_transfers(Plan& plan, const std::vector<int>& upload_seg) const {
  const size_t n = values_.size();
  auto host_needed = [&](size_t i) { return needed_on_host(plan, values_[i], i); };
  int64_t staging = 0;
  for (size_t g = 0; g < plan.segments.size(); ++g) {
    Segment& seg = plan.segments[g];
    if (!seg.gpu) continue;
    for (size_t i = 0; i < n; ++i)
      if (upload_seg[i] == static_cast<int>(g) && plan.dev[i].bytes > 0) {
        seg.uploads.push_back({static_cast<int>(i), staging, plan.dev[i].bytes, half(i)});
        staging += align_up(plan.dev[i].bytes, 16);
      }
    for (int s = seg.begin; s < seg.end; ++s)
      for (int o : steps_[static_cast<size_t>(s)].outputs)
        if (o >= 0 && host_needed(static_cast<size_t>(o)) && plan.dev[static_cast<size_t>(o)].bytes > 0) {
          seg.downloads.push_back({o, staging, plan.dev[static_cast<size_t>(o)].bytes, half(static_cast<size_t>(o))});
          staging += align_up(plan.dev[static_cast<size_t>(o)].bytes, 16);
        }
  }
  plan.staging_bytes = staging;
  return staging;
}

void VulkanSpace::record(Plan& plan) const {
  const DeviceApi& api = device_->api();
  VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool.queueFamilyIndex = device_->queue_family();
  device_->check(api.vkCreateCommandPool(device_->handle(), &pool, nullptr, &plan.pool), "creating a command pool");
  plan.fence = device_->fence();
  PlanRecorder rec(*device_, weight_ranges_, Range{unused_.handle(), 0, unused_.bytes()},
                   Range{plan.device_scratch.handle(), 0, plan.device_scratch_bytes});
  for (const Segment& seg : plan.segments) {
    if (!seg.gpu) continue;
    rec.begin_segment();
    for (const Transfer& t : seg.uploads)
      rec.copy(Range{plan.staging.handle(), t.staging, t.bytes}, plan.dev[static_cast<size_t>(t.value)]);
    if (gpu_timestamps_) rec.stamp(-1);
    for (int s = seg.begin; s < seg.end; ++s) {
      const Step& step = steps_[static_cast<size_t>(s)];
      if (plan.folded[static_cast<size_t>(s)]) continue;
      bool empty = true;
      const auto [ins, outs] = step_tensors(plan, static_cast<size_t>(s), true, empty);
      if (!empty) step.gpu->record(rec, ins, outs);
      if (gpu_timestamps_) rec.stamp(s);
    }
    for (const Transfer& t : seg.downloads)
      rec.copy(plan.dev[static_cast<size_t>(t.value)], Range{plan.staging.handle(), t.staging, t.bytes});
  }
  rec.finish(plan);
}

}  // namespace tether::engine::vulkan
