// The executor: the one Session class, for every device. A session is a compiled model and an
// ordered list of backends; the executor does the rest once for all of them: validation,
// passes and shape inference, placement (each node to the first backend that supports it),
// steps ordered so that each backend runs long stretches, plans per input shapes in one LRU
// cache, the memory limit, interrupts between kernels, profiling and observed values; a
// backend with memory of its own adds only what that memory needs (engine/space.h).
// docs/engine.md ("One executor") describes the design.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/kernel.h"
#include "tether/engine.h"

namespace tether::util {
class ThreadPool;
}

namespace tether::engine {

/// Compiles `model` (not changed) into a session whose nodes run on the backends of `order`:
/// each node on the first one whose supports() takes it, a view op (Reshape, Flatten, Squeeze,
/// Unsqueeze, Identity) on the backend computing its input when that one takes it. The first
/// backend may compute in memory of its own (Backend::open gives its Space, engine/space.h: a
/// GPU); every other runs HostKernels on host memory. `pool`: the threads to share (a control-flow
/// body shares its parent's); null makes one of options.threads. Throws UnsupportedError listing
/// every node no backend runs, with each backend's reason, and what tether::engine::compile throws
/// for a wrong model.
///
///   std::unique_ptr<Session> s = compile_on(model, options, {&my_backend, &cpu_backend()});
std::unique_ptr<Session> compile_on(const ir::Model& model, const CompileOptions& options, std::vector<const Backend*> order,
                                    std::shared_ptr<util::ThreadPool> pool = nullptr);

/// An order of steps 0..n-1 (given in a topological order) that keeps to one backend as long as
/// that backend has a step ready, then moves to the backend whose earliest ready step comes
/// first: fewer switches between backends (for a device, fewer submissions and waits).
/// `backend[s]` numbers step s's backend from 0; `after[s]` lists the steps s must follow.
/// With one backend the order is 0..n-1. Throws InternalError when `after` has a cycle.
std::vector<size_t> order_by_backend(const std::vector<int>& backend, const std::vector<std::vector<size_t>>& after);

}  // namespace tether::engine
