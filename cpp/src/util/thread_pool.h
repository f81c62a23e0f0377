// A thread pool for data-parallel loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tether::util {

/// Runs parallel_for loops on `threads` threads: the calling thread plus threads - 1 workers.
/// Idle workers spin briefly, then sleep. Several threads may call parallel_for at once; their
/// loops share the workers.
class ThreadPool {
 public:
  /// `threads` >= 1; 0 means the number of physical cores.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) over [0, n) split into about `threads() * 4` chunks of at least
  /// `grain` iterations, and returns when all have run. The first exception thrown by fn is
  /// rethrown here after the loop finishes.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// Like parallel_for, but fn also gets the index of the thread running the chunk, in
  /// [0, threads()): work that needs a private buffer per thread indexes it with that.
  void parallel_for_indexed(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn);

  /// Physical cores of this machine (logical CPUs when that cannot be told).
  static int physical_cores();

 private:
  struct Job;
  void worker(int index);
  static void run_chunks(Job& job, int thread);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  // Bumped (after the queue changes) for every job posted and at shutdown: idle workers spin
  // on it for a while before sleeping on wake_.
  std::atomic<uint64_t> posted_{0};
};

}  // namespace tether::util
