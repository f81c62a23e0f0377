// The Recorder a plan's kernels record into: commands collected per segment, then turned into
// one command buffer per segment, with a descriptor set per dispatch from one pool and a
// barrier between each command and the next.
#pragma once

#include <array>
#include <vector>

#include "engine/vulkan/kernel.h"
#include "engine/vulkan/space.h"

namespace tether::engine::vulkan {

/// Clears the plan's fault words (Recorder::fault) before a run.
void clear_faults(const Plan& plan);
/// After a Vulkan stretch: throws ArgumentError for the first fault a kernel's shader set.
void raise_faults(const Plan& plan);

class PlanRecorder final : public Recorder {
 public:
  /// `scratch`: the plan's scratch range (Recorder::scratch), as large as any kernel asks.
  PlanRecorder(const Device& device, const std::vector<Range>& weights, Range unused, Range scratch)
      : device_(device), weights_(weights), unused_(unused), scratch_(scratch) {}

  const Device& device() const override { return device_; }
  void dispatch(const Pipeline& p, const std::vector<Range>& bindings, const void* push, size_t push_bytes, uint32_t gx,
                uint32_t gy, uint32_t gz) override;
  void copy(const Range& src, const Range& dst) override;
  Range weight(int handle) const override { return weights_.at(static_cast<size_t>(handle)); }
  Range unused() const override { return unused_; }
  Range table(const void* data, int64_t bytes) override;
  Range scratch(int64_t bytes) override;
  Range fault(const std::string& what) override;

  /// Commands recorded from now on go to the next segment's command buffer.
  void begin_segment() { segments_.emplace_back(); }
  /// A timestamp once every command recorded so far has finished, closing `step` (-1: the
  /// segment's start); finish() makes the plan's query pool and the segments' stamp lists.
  void stamp(int step);
  /// Creates the plan's descriptor pool and sets and records one command buffer per segment
  /// begun, into the plan's Vulkan segments in order.
  void finish(Plan& plan);

 private:
  struct Command {
    const Pipeline* pipeline = nullptr;  // nullptr: a copy
    std::vector<Range> bindings;
    std::array<std::byte, 128> push{};
    uint32_t push_bytes = 0;
    uint32_t groups[3] = {1, 1, 1};
    Range src, dst;  // a copy
    bool stamp = false;  // a timestamp closing step `step`
    int step = -1;
    VkDescriptorSet set = VK_NULL_HANDLE;
  };
  const Device& device_;
  const std::vector<Range>& weights_;
  Range unused_, scratch_;
  std::vector<std::vector<Command>> segments_;
  std::vector<Buffer> tables_;  // moved into the plan by finish()
  std::vector<Fault> faults_;   // likewise
};

}  // namespace tether::engine::vulkan
