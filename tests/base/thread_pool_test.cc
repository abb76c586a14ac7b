#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace rotor {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      int n = 1 + round % 37;
      std::vector<std::atomic<int>> hits(n);
      pool.Run(n, [&](int task, int thread) {
        ASSERT_LT(thread, threads);
        hits[task].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeInGrains) {
  ThreadPool pool(2);
  for (int64_t n : {1, 7, 33, 4099}) {
    std::vector<int> seen(n, 0);
    pool.ParallelFor(n, 8, [&](int64_t b, int64_t e, int) {
      EXPECT_EQ(b % 8, 0);
      for (int64_t i = b; i < e; ++i) seen[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1);
  }
}

TEST(ThreadPool, SurvivesIdleSleep) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.Run(4, [&](int t, int) { sum += t; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers fall asleep
  pool.Run(4, [&](int t, int) { sum += t; });
  EXPECT_EQ(sum.load(), 12);
}

}  // namespace
}  // namespace rotor
