// The thread pool's loops: every index runs exactly once, on a thread index in range, whatever
// the split; errors come back to the caller; several callers share the workers.
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using tether::util::ThreadPool;

TEST(ThreadPool, EveryIndexRunsOnceOnAThreadInRange) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099}) {
      for (int64_t grain : {1, 3, 100}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<bool> bad_thread{false};
        pool.parallel_for_indexed(n, grain, [&](int thread, int64_t b, int64_t e) {
          if (thread < 0 || thread >= threads) bad_thread = true;
          for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
        });
        EXPECT_FALSE(bad_thread) << threads << " threads, n " << n;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << threads << " threads, n " << n << ", grain " << grain << ", index " << i;
      }
    }
  }
}

TEST(ThreadPool, RepeatedLoopsAreCompleteWhenOneThreadIsSlow) {
  // A chunk that takes long leaves its owner's other chunks to the other threads.
  ThreadPool pool(3);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::atomic<int>> seen(96);
    pool.parallel_for_indexed(96, 1, [&](int thread, int64_t b, int64_t e) {
      if (thread == 1 && rep % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

TEST(ThreadPool, AnErrorReachesTheCallerAfterTheLoop) {
  ThreadPool pool(2);
  std::atomic<int64_t> ran{0};
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [&](int64_t b, int64_t e) {
                                   ran += e - b;
                                   if (b == 0) throw std::runtime_error("chunk 0 failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 100);  // the other chunks still ran
}

TEST(ThreadPool, SeveralCallersShareTheWorkers) {
  ThreadPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep)
        pool.parallel_for(300, 7, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 300);
}

}  // namespace
