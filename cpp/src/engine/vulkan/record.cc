#include "engine/vulkan/record.h"

#include <algorithm>
#include <cstring>

namespace tether::engine::vulkan {

void PlanRecorder::dispatch(const Pipeline& p, const std::vector<Range>& bindings, const void* push, size_t push_bytes,
                            uint32_t gx, uint32_t gy, uint32_t gz) {
  TETHER_CHECK(!segments_.empty(), "a dispatch recorded outside a segment");
  TETHER_CHECK(bindings.size() == p.bindings, "shader '" + p.shader + "' takes " + std::to_string(p.bindings) +
                                                  " buffers, the kernel bound " + std::to_string(bindings.size()));
  TETHER_CHECK(push_bytes == p.push_bytes, "shader '" + p.shader + "': push constants of the wrong size");
  const VkPhysicalDeviceLimits& limits = device_.limits();
  TETHER_CHECK(gx <= limits.maxComputeWorkGroupCount[0] && gy <= limits.maxComputeWorkGroupCount[1] &&
                   gz <= limits.maxComputeWorkGroupCount[2],
               "shader '" + p.shader + "': more workgroups than the device dispatches");
  if (gx == 0 || gy == 0 || gz == 0) return;
  Command c;
  c.pipeline = &p;
  c.bindings = bindings;
  for (const Range& r : c.bindings) TETHER_CHECK(r.buffer != VK_NULL_HANDLE, "shader '" + p.shader + "': a binding has no buffer");
  std::memcpy(c.push.data(), push, push_bytes);
  c.push_bytes = static_cast<uint32_t>(push_bytes);
  c.groups[0] = gx;
  c.groups[1] = gy;
  c.groups[2] = gz;
  segments_.back().push_back(std::move(c));
}

void PlanRecorder::copy(const Range& src, const Range& dst) {
  TETHER_CHECK(!segments_.empty(), "a copy recorded outside a segment");
  TETHER_CHECK(src.bytes == dst.bytes, "a copy between ranges of different sizes");
  if (src.bytes == 0) return;
  Command c;
  c.src = src;
  c.dst = dst;
  segments_.back().push_back(std::move(c));
}

void PlanRecorder::stamp(int step) {
  TETHER_CHECK(!segments_.empty(), "a timestamp recorded outside a segment");
  Command c;
  c.stamp = true;
  c.step = step;
  segments_.back().push_back(std::move(c));
}

Range PlanRecorder::table(const void* data, int64_t bytes) {
  Buffer b = device_.buffer(bytes, Memory::kStaging, "a kernel's table");
  std::memcpy(b.mapped(), data, static_cast<size_t>(bytes));
  b.flush();
  tables_.push_back(std::move(b));
  return Range{tables_.back().handle(), 0, bytes};
}

void clear_faults(const Plan& plan) {
  for (const Fault& f : plan.faults) {
    std::memset(f.words.mapped(), 0, 16);
    f.words.flush();
  }
}

void raise_faults(const Plan& plan) {
  for (const Fault& f : plan.faults) {
    f.words.invalidate();
    uint32_t w[3];
    std::memcpy(w, f.words.mapped(), sizeof w);
    if (w[0] == 0) continue;
    const auto value = static_cast<int64_t>((static_cast<uint64_t>(w[2]) << 32) | w[1]);
    throw ArgumentError(f.what + ": " + std::to_string(value));
  }
}

Range PlanRecorder::fault(const std::string& what) {
  Fault f{device_.buffer(16, Memory::kStaging, "a kernel's fault words"), what};
  std::memset(f.words.mapped(), 0, 16);
  f.words.flush();
  faults_.push_back(std::move(f));
  return Range{faults_.back().words.handle(), 0, 16};
}

Range PlanRecorder::scratch(int64_t bytes) {
  TETHER_CHECK(bytes <= scratch_.bytes, "a kernel asked for more scratch when recorded than when its plan was sized");
  return Range{scratch_.buffer, scratch_.offset, bytes};
}

void PlanRecorder::finish(Plan& plan) {
  const DeviceApi& api = device_.api();
  const VkDevice dev = device_.handle();
  for (Buffer& b : tables_) plan.tables.push_back(std::move(b));
  tables_.clear();
  for (Fault& f : faults_) plan.faults.push_back(std::move(f));
  faults_.clear();
  uint32_t sets = 0, buffers = 0;
  for (const auto& seg : segments_)
    for (const Command& c : seg)
      if (c.pipeline != nullptr) {
        ++sets;
        buffers += static_cast<uint32_t>(c.bindings.size());
      }
  plan.dispatches = sets;
  if (sets > 0) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, std::max<uint32_t>(buffers, 1)};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.maxSets = sets;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    device_.check(api.vkCreateDescriptorPool(dev, &info, nullptr, &plan.descriptors), "creating the plan's descriptor pool");
    std::vector<VkDescriptorSetLayout> layouts;
    for (const auto& seg : segments_)
      for (const Command& c : seg)
        if (c.pipeline != nullptr) layouts.push_back(c.pipeline->set_layout);
    std::vector<VkDescriptorSet> allocated(layouts.size());
    VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    alloc.descriptorPool = plan.descriptors;
    alloc.descriptorSetCount = static_cast<uint32_t>(layouts.size());
    alloc.pSetLayouts = layouts.data();
    device_.check(api.vkAllocateDescriptorSets(dev, &alloc, allocated.data()), "allocating the plan's descriptor sets");
    std::vector<VkDescriptorBufferInfo> infos;
    infos.reserve(buffers);
    std::vector<VkWriteDescriptorSet> writes;
    size_t k = 0;
    for (auto& seg : segments_)
      for (Command& c : seg) {
        if (c.pipeline == nullptr) continue;
        c.set = allocated[k++];
        const size_t first = infos.size();
        // A range is at least 4 bytes: slots of empty values are never smaller than 16.
        for (const Range& r : c.bindings)
          infos.push_back({r.buffer, static_cast<VkDeviceSize>(r.offset), static_cast<VkDeviceSize>(std::max<int64_t>(r.bytes, 4))});
        VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        w.dstSet = c.set;
        w.dstBinding = 0;
        w.descriptorCount = static_cast<uint32_t>(c.bindings.size());
        w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w.pBufferInfo = infos.data() + first;
        writes.push_back(w);
      }
    api.vkUpdateDescriptorSets(dev, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  }

  uint32_t stamps = 0;
  for (const auto& seg : segments_)
    for (const Command& c : seg) stamps += c.stamp;
  if (stamps > 0) {
    VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = stamps;
    device_.check(api.vkCreateQueryPool(dev, &info, nullptr, &plan.queries), "creating the plan's timestamp queries");
  }

  // Every command sees the writes of those before it (a global memory barrier between two
  // commands); the last barrier makes the results visible to the host and to the next run.
  // Timestamps go between them: one is written once every command before it has finished.
  const VkPipelineStageFlags work = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  const VkAccessFlags writes_done = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkAccessFlags any = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                            VK_ACCESS_TRANSFER_WRITE_BIT;
  size_t s = 0;
  uint32_t query = 0;
  for (Segment& segment : plan.segments) {
    if (!segment.gpu) continue;
    TETHER_CHECK(s < segments_.size(), "fewer recorded segments than planned");
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = plan.pool;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    device_.check(api.vkAllocateCommandBuffers(dev, &alloc, &segment.cmd), "allocating a command buffer");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    device_.check(api.vkBeginCommandBuffer(segment.cmd, &begin), "recording a command buffer");
    segment.first_query = query;
    segment.stamp_steps.clear();
    uint32_t seg_stamps = 0;
    for (const Command& c : segments_[s]) seg_stamps += c.stamp;
    if (seg_stamps > 0) api.vkCmdResetQueryPool(segment.cmd, plan.queries, query, seg_stamps);
    bool first = true;
    for (const Command& c : segments_[s]) {
      if (c.stamp) {
        api.vkCmdWriteTimestamp(segment.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, plan.queries, query++);
        if (c.step >= 0) segment.stamp_steps.push_back(c.step);
        continue;
      }
      if (!first) {
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, writes_done, any};
        api.vkCmdPipelineBarrier(segment.cmd, work, work, 0, 1, &barrier, 0, nullptr, 0, nullptr);
      }
      first = false;
      if (c.pipeline != nullptr) {
        api.vkCmdBindPipeline(segment.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->pipeline);
        api.vkCmdBindDescriptorSets(segment.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->layout, 0, 1, &c.set, 0, nullptr);
        if (c.push_bytes > 0)
          api.vkCmdPushConstants(segment.cmd, c.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, c.push_bytes, c.push.data());
        api.vkCmdDispatch(segment.cmd, c.groups[0], c.groups[1], c.groups[2]);
      } else {
        VkBufferCopy region{static_cast<VkDeviceSize>(c.src.offset), static_cast<VkDeviceSize>(c.dst.offset),
                            static_cast<VkDeviceSize>(c.src.bytes)};
        api.vkCmdCopyBuffer(segment.cmd, c.src.buffer, c.dst.buffer, 1, &region);
      }
    }
    VkMemoryBarrier last{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, writes_done, any | VK_ACCESS_HOST_READ_BIT};
    api.vkCmdPipelineBarrier(segment.cmd, work, work | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &last, 0, nullptr, 0, nullptr);
    device_.check(api.vkEndCommandBuffer(segment.cmd), "recording a command buffer");
    ++s;
  }
}

}  // namespace tether::engine::vulkan
