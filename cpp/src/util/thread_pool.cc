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
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
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
  int64_t n, chunk, chunks;
  int threads;
  Counter* owned;
  alignas(64) std::atomic<int64_t> done{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

namespace {

// The pool and thread index of the loop the calling thread is running a chunk of, if any: a
// loop started from inside a chunk runs on that thread alone.
thread_local const ThreadPool* tls_pool = nullptr;
thread_local int tls_index = 0;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = physical_cores();
  owned_ = std::make_unique<Counter[]>(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  posted_.fetch_add(1);
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
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
  const ThreadPool* outer_pool = tls_pool;
  const int outer_index = tls_index;
  tls_pool = this;
  tls_index = thread;
  const int t = job.threads;
  for (int k = 0; k < t; ++k) {
    Counter& owner = job.owned[(thread + k) % t];
    const int64_t first = (thread + k) % t;
    for (;;) {
      const int64_t c = first + t * owner.taken.fetch_add(1, std::memory_order_relaxed);
      if (c >= job.chunks) break;
      const int64_t begin = c * job.chunk;
      try {
        (*job.fn)(thread, begin, std::min(job.n, begin + job.chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
      }
      job.done.fetch_add(1, std::memory_order_release);
    }
  }
  tls_pool = outer_pool;
  tls_index = outer_index;
}

void ThreadPool::worker(int index) {
  uint64_t seen = posted_.load();
  for (;;) {
    // (stopping_ is checked too: a worker that starts after the pool began to close has seen
    // the last post already.)
    auto posted = [&] { return posted_.load(std::memory_order_acquire) != seen || stopping_.load(); };
    if (!spin_until(posted)) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, posted);
      sleepers_.fetch_sub(1);
    }
    seen = posted_.load();
    if (stopping_.load()) return;
    // Counted inside before reading the slot: the caller empties the slot, then waits until no
    // worker is inside, so a job is never read after its caller returned.
    inside_.fetch_add(1);
    if (Job* job = current_.load()) run_chunks(*job, index);
    inside_.fetch_sub(1);
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
  if (chunks == 1 || workers_.empty() || tls_pool == this) {
    fn(tls_pool == this ? tls_index : 0, 0, n);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_);
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.chunks = chunks;
  job.threads = threads();
  job.owned = owned_.get();
  for (int t = 0; t < job.threads; ++t) owned_[static_cast<size_t>(t)].taken.store(0, std::memory_order_relaxed);
  current_.store(&job);
  posted_.fetch_add(1);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_.notify_all();
  }
  run_chunks(job, 0);
  if (!spin_until([&] { return job.done.load(std::memory_order_acquire) == job.chunks; }))
    while (job.done.load(std::memory_order_acquire) != job.chunks) std::this_thread::sleep_for(std::chrono::microseconds(20));
  current_.store(nullptr);
  // A worker between counting itself in and finding the slot empty is a few instructions from
  // leaving, unless the OS took its core: then let it run.
  for (int spins = 0; inside_.load() != 0; ++spins) {
    if (spins < 4096) cpu_relax();
    else std::this_thread::yield();
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace tether::util
