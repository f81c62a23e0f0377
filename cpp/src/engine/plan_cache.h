// The plans of a session by input shapes, under one bound for every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace tether::engine {

/// Plans a session keeps, per cache: the one used longest ago goes when a new one would pass
/// it. A plan holds its arena (host memory; device memory on a GPU), so a model run at more
/// distinct input shapes than this plans again when an evicted shape comes back.
inline constexpr size_t kMaxPlans = 16;

/// Plans by key (input dims, shape tensors' bytes, ...), least recently used out first.
/// Not thread-safe: the owner holds its lock around every call.
///
///   PlanCache<std::vector<Dims>, std::shared_ptr<Plan>> plans;
///   std::shared_ptr<Plan>& p = plans.get(key, [&] { return make_plan(bound); });
template <typename Key, typename Ptr>
class PlanCache {
 public:
  explicit PlanCache(size_t limit = kMaxPlans) : limit_(limit < 1 ? 1 : limit) {}

  /// The plan for `key`, made by `make()` when missing; an exception from `make` leaves the
  /// cache as it was. `made` (optional) says whether it was made now. The reference stays
  /// valid until the entry is evicted.
  template <typename Make>
  Ptr& get(Key key, Make&& make, bool* made = nullptr) {
    ++clock_;
    auto it = entries_.find(key);
    if (made != nullptr) *made = it == entries_.end();
    if (it == entries_.end()) {
      Ptr plan = make();
      if (entries_.size() >= limit_) {
        auto oldest = entries_.begin();
        for (auto e = entries_.begin(); e != entries_.end(); ++e)
          if (e->second.last_use < oldest->second.last_use) oldest = e;
        entries_.erase(oldest);
      }
      it = entries_.emplace(std::move(key), Entry{std::move(plan), 0}).first;
    }
    it->second.last_use = clock_;
    return it->second.plan;
  }

  size_t size() const { return entries_.size(); }
  /// Drops every plan (a Vulkan session does before its device goes).
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    Ptr plan;
    uint64_t last_use = 0;
  };
  std::map<Key, Entry> entries_;
  uint64_t clock_ = 0;
  size_t limit_;
};

}  // namespace tether::engine
