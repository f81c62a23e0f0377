// Memory planning: every intermediate gets an offset in one arena, by liveness.
#pragma once

#include <cstdint>
#include <vector>

namespace tether::engine {

/// One tensor to place: its size and the steps from its definition to its last use.
struct Lifetime {
  int64_t bytes = 0;
  int first = 0;  ///< step that writes it
  int last = 0;   ///< last step that reads it (>= first)
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  ///< per lifetime, multiples of `alignment`
  int64_t arena_bytes = 0;
  int64_t sum_bytes = 0;  ///< the sizes added up (what no reuse would take)
};

/// Places tensors so that two whose lifetimes overlap never share bytes. Greedy by size:
/// largest first, each at the lowest aligned offset free over its lifetime.
ArenaPlan plan_arena(const std::vector<Lifetime>& tensors, int64_t alignment = 64);

}  // namespace tether::engine
