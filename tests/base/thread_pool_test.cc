#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
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

// Every unit once, in calls of at most `chunk` contiguous units (one call
// of all of them with one thread or one unit), on a valid thread; 1 to 4
// threads (fewer units than threads, ranges that do not divide by the
// chunk), the calls of one thread never overlapping in time.
TEST(ThreadPool, ParallelForStealingCoversRangeOnceInChunks) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 33, 145, 4099})
      for (int64_t chunk : {1, 4, 5, 64}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
        std::atomic<int> calls{0};
        pool.ParallelForStealing(n, chunk, [&](int64_t b, int64_t e, int thread) {
          ASSERT_TRUE(thread >= 0 && thread < threads);
          ASSERT_EQ(busy[thread].fetch_add(1), 0) << "two calls at once on thread " << thread;
          const bool whole = threads == 1 || n == 1;
          ASSERT_TRUE(b < e && (e - b <= chunk || (whole && b == 0 && e == n))) << b << ".." << e;
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          calls.fetch_add(1);
          busy[thread].fetch_sub(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "unit " << i << " of " << n;
        // One range per thread, each cut into ceil(len / chunk) calls at most
        // (a range shared by its owner and a thief may take one more).
        const int64_t ranges = std::min<int64_t>(n, threads);
        EXPECT_LE(calls.load(), (n + chunk - 1) / chunk + 2 * ranges) << n << " " << chunk;
      }
  }
}

// A thread held up in its range does not hold up the job: the other takes
// the rest of that range from its back.
TEST(ThreadPool, ParallelForStealingTakesTheRestOfASlowRange) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> by(64);  // the thread of each unit
  for (auto& t : by) t = -1;
  std::atomic<bool> slow_started{false};
  pool.ParallelForStealing(64, 1, [&](int64_t b, int64_t, int thread) {
    by[b] = thread;
    if (b == 0) {  // the front of range 0: wait until the other thread has taken units of it
      slow_started = true;
      for (int i = 0; i < 2000 && by[31] == -1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int64_t i = 0; i < 64; ++i) ASSERT_NE(by[i].load(), -1);
  EXPECT_TRUE(slow_started.load());
  // Units 1..31 belong to range 0; the thread that ran unit 0 was asleep, so
  // the back of range 0 (unit 31 at least) went to the other thread.
  EXPECT_NE(by[31].load(), by[0].load());
}

TEST(ThreadPool, SurvivesIdleSleep) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.Run(4, [&](int t, int) { sum += t; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers fall asleep
  pool.Run(4, [&](int t, int) { sum += t; });
  EXPECT_EQ(sum.load(), 12);
}

// More threads than cores, with gaps between jobs that end in each phase of a
// worker's wait (pausing for 2,000 looks, 30-40 us on the machines of
// docs/BENCHMARKS.md, then yielding for 300 us by the clock, then asleep:
// 0 and 5 us, 100 us, 600 and 3000 us), and in each job the
// first task a worker runs sleeping 200 us, so that the caller waits for it
// at the end of the job: every job still runs each task once.
TEST(ThreadPool, MoreThreadsThanCoresThroughEveryWaitPhase) {
  const int n = 2 * HardwareThreads() + 1;
  ThreadPool pool(n);
  const int gaps_us[] = {0, 5, 100, 600, 3000};
  for (int round = 0; round < 3; ++round) {
    for (int gap : gaps_us) {
      std::vector<std::atomic<int>> hits(4 * n);
      std::atomic<bool> held{false};
      pool.Run(4 * n, [&](int task, int thread) {
        if (thread != 0 && !held.exchange(true))
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        hits[task].fetch_add(1);
      });
      for (int t = 0; t < 4 * n; ++t)
        ASSERT_EQ(hits[t].load(), 1) << "gap " << gap << " us, task " << t;
      if (gap > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap));
    }
  }
}

}  // namespace
}  // namespace rotor
