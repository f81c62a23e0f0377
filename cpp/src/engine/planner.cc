#include "engine/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tether::engine {

namespace {

// The tensors placed so far, indexed by step, so that finding those live during a span costs
// time in their number rather than in every tensor placed (a scan of all of them made
// planning n^2 in the graph's size). A tensor overlapping [first, last] either is live at
// `first` (found in a segment tree over steps holding each placed lifetime in O(log) nodes)
// or starts within (first, last] (a range of the tensors sorted by start).
class LiveIndex {
 public:
  explicit LiveIndex(const std::vector<Lifetime>& tensors) : tensors_(tensors), placed_(tensors.size(), false) {
    for (const Lifetime& t : tensors) {
      steps_.push_back(t.first);
      steps_.push_back(end_of(t));
    }
    std::sort(steps_.begin(), steps_.end());
    steps_.erase(std::unique(steps_.begin(), steps_.end()), steps_.end());
    while (leaves_ < steps_.size()) leaves_ *= 2;
    head_.assign(2 * leaves_, -1);
    by_start_.resize(tensors.size());
    std::iota(by_start_.begin(), by_start_.end(), 0);
    std::sort(by_start_.begin(), by_start_.end(), [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });
  }

  void place(size_t i) {
    placed_[i] = true;
    size_t lo = leaf(tensors_[i].first) + leaves_, hi = leaf(end_of(tensors_[i])) + leaves_ + 1;
    for (; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) link(lo++, i);
      if (hi & 1) link(--hi, i);
    }
  }

  // Calls f(j) once for each placed tensor j whose lifetime overlaps t's.
  template <typename F>
  void for_each_overlapping(const Lifetime& t, F&& f) const {
    for (size_t node = leaf(t.first) + leaves_; node >= 1; node /= 2)
      for (int e = head_[node]; e >= 0; e = entries_[static_cast<size_t>(e)].next) f(entries_[static_cast<size_t>(e)].tensor);
    auto it = std::partition_point(by_start_.begin(), by_start_.end(), [&](size_t j) { return tensors_[j].first <= t.first; });
    for (; it != by_start_.end() && tensors_[*it].first <= end_of(t); ++it)
      if (placed_[*it]) f(*it);
  }

 private:
  struct Entry {
    size_t tensor;
    int next;
  };
  // Lifetimes promise last >= first; one that breaks it counts as live at its first step.
  static int end_of(const Lifetime& t) { return std::max(t.first, t.last); }
  size_t leaf(int step) const {
    return static_cast<size_t>(std::lower_bound(steps_.begin(), steps_.end(), step) - steps_.begin());
  }
  void link(size_t node, size_t tensor) {
    entries_.push_back({tensor, head_[node]});
    head_[node] = static_cast<int>(entries_.size() - 1);
  }

  const std::vector<Lifetime>& tensors_;
  std::vector<bool> placed_;
  std::vector<int> steps_;  // every first and end step, sorted, unique: the tree's leaves
  size_t leaves_ = 1;
  std::vector<int> head_;  // per tree node, its first entry
  std::vector<Entry> entries_;
  std::vector<size_t> by_start_;
};

}  // namespace

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

  std::vector<int64_t> end(tensors.size(), 0);
  LiveIndex live(tensors);
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (size_t i : order) {
    const Lifetime& t = tensors[i];
    plan.sum_bytes = add(plan.sum_bytes, t.bytes);
    // Blocks live at the same time as t, by offset; t goes in the first gap that fits.
    busy.clear();
    live.for_each_overlapping(t, [&](size_t j) { busy.emplace_back(plan.offsets[j], end[j]); });
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (add(offset, t.bytes) <= b) break;
      offset = std::max(offset, align(e));
    }
    plan.offsets[i] = offset;
    end[i] = add(offset, t.bytes);
    live.place(i);
    plan.arena_bytes = std::max(plan.arena_bytes, align(add(offset, t.bytes)));
  }
  return plan;
}

}  // namespace tether::engine
