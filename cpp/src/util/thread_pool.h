// A thread pool for data-parallel loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tether::util {

/// Runs parallel_for loops on `threads` threads: the calling thread plus threads - 1 workers.
/// Idle workers spin briefly, then sleep. Several threads may call parallel_for at once: their
/// loops take the workers one after another.
///
/// A loop is handed to the workers through one slot without locks or allocation (a loop costs
/// about a microsecond more than its work on two threads), and its chunks keep their threads
/// from one call to the next (see parallel_for), so data a kernel wrote on a core is read there
/// again.
class ThreadPool {
 public:
  /// `threads` >= 1; 0 means the number of physical cores.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) over [0, n) split into about `threads() * 4` chunks of at least
  /// `grain` iterations, and returns when all have run. Chunk c belongs to thread
  /// c % threads(): each thread runs its own chunks first, then takes those left of the
  /// others'. The first exception thrown by fn is rethrown here after the loop finishes.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// Like parallel_for, but fn also gets the index of the thread running the chunk, in
  /// [0, threads()): work that needs a private buffer per thread indexes it with that.
  void parallel_for_indexed(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn);

  /// Physical cores of this machine (logical CPUs when that cannot be told).
  static int physical_cores();

 private:
  struct Job;
  struct alignas(64) Counter {
    std::atomic<int64_t> taken{0};
  };
  void worker(int index);
  void run_chunks(Job& job, int thread);

  std::vector<std::thread> workers_;
  std::unique_ptr<Counter[]> owned_;  // per thread: how many of its chunks were handed out
  std::mutex submit_;                 // one loop in the slot at a time
  alignas(64) std::atomic<Job*> current_{nullptr};
  std::atomic<uint64_t> posted_{0};   // bumped for every loop posted and at shutdown
  alignas(64) std::atomic<int> inside_{0};  // workers that may be reading current_'s job
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tether::util
