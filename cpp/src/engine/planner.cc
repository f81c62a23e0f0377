#include "engine/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tether::engine {

ArenaPlan plan_arena(const std::vector<Lifetime>& tensors, int64_t alignment) {
  ArenaPlan plan;
  plan.offsets.assign(tensors.size(), 0);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].bytes > tensors[b].bytes; });
  // Sums saturate at int64's largest: a plan of absurd sizes comes out too large for any
  // memory limit (the caller's error names it) instead of wrapping around to a small arena.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto add = [](int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; };
  auto align = [&](int64_t x) { return x > kMax - alignment ? kMax : (x + alignment - 1) / alignment * alignment; };

  struct Placed {
    int64_t begin, end;
    int first, last;
  };
  std::vector<Placed> placed;
  placed.reserve(tensors.size());
  for (size_t i : order) {
    const Lifetime& t = tensors[i];
    plan.sum_bytes = add(plan.sum_bytes, t.bytes);
    // Blocks live at the same time as t, by offset; t goes in the first gap that fits.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Placed& p : placed)
      if (p.first <= t.last && t.first <= p.last) busy.emplace_back(p.begin, p.end);
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (add(offset, t.bytes) <= b) break;
      offset = std::max(offset, align(e));
    }
    plan.offsets[i] = offset;
    placed.push_back({offset, add(offset, t.bytes), t.first, t.last});
    plan.arena_bytes = std::max(plan.arena_bytes, align(add(offset, t.bytes)));
  }
  return plan;
}

}  // namespace tether::engine
