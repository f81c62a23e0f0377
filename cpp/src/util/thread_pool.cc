#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace tether::util {

namespace {

// How long an idle thread spins before sleeping on a condition variable. Waking a sleeping
// thread takes tens of microseconds (more in a VM), longer than many kernels; a run posts a
// job per parallel kernel, so workers that spin between them keep up with the caller.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpin has passed; true when done() held.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

struct ThreadPool::Job {
  const std::function<void(int, int64_t, int64_t)>* fn;
  int64_t n;
  int64_t chunk;
  int64_t chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mutex;
  std::condition_variable finished;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = physical_cores();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  posted_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::physical_cores() {
  // Distinct (package, core) pairs from /proc/cpuinfo; hyperthreads share a core id.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, package;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") package = value;
    if (key == "core id") cores.emplace(package, value);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::run_chunks(Job& job, int thread) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1);
    if (c >= job.chunks) return;
    const int64_t begin = c * job.chunk;
    const int64_t end = std::min(job.n, begin + job.chunk);
    try {
      (*job.fn)(thread, begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.done.fetch_add(1) + 1 == job.chunks) {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.finished.notify_all();
    }
  }
}

void ThreadPool::worker(int index) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (jobs_.empty() && !stopping_) {
        const uint64_t seen = posted_.load(std::memory_order_acquire);
        lock.unlock();
        spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_ && jobs_.empty()) return;
      job = jobs_.front();
      // A job leaves the queue once all its chunks are handed out.
      if (job->next.load() >= job->chunks) {
        jobs_.pop_front();
        continue;
      }
    }
    run_chunks(*job, index);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for_indexed(n, grain, [&fn](int, int64_t b, int64_t e) { fn(b, e); });
}

void ThreadPool::parallel_for_indexed(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = static_cast<int64_t>(threads()) * 4;
  const int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks == 1 || workers_.empty()) {
    fn(0, 0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->chunk = chunk;
  job->chunks = chunks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(job);
  }
  posted_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  run_chunks(*job, 0);
  if (!spin_until([&] { return job->done.load(std::memory_order_acquire) == job->chunks; })) {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->finished.wait(lock, [&] { return job->done.load() == job->chunks; });
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find(jobs_.begin(), jobs_.end(), job);
    if (it != jobs_.end()) jobs_.erase(it);
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace tether::util
