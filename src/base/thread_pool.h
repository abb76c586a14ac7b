// One persistent pool of worker threads, sized by -t. The calling thread takes
// part in every job, so a pool of n threads starts n - 1 workers. Workers spin
// briefly between jobs (decode issues thousands of small jobs a second), then
// yield their core between looks, then sleep; no allocation or locking on the
// hot path. A worker joins a job only while it is open; the caller closes it
// once every task is claimed and waits just for the workers that joined, so a
// worker the OS has descheduled never stalls a job it took no part in.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace rotor {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, thread) for task in [0, n_tasks) across the pool; returns when all are done.
  // Tasks are handed out dynamically. Not reentrant: fn must not call Run.
  template <typename F>
  void Run(int n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
      for (int i = 0; i < n_tasks; ++i) fn(i, 0);
      return;
    }
    auto thunk = [](void* ctx, int task, int thread) { (*static_cast<F*>(ctx))(task, thread); };
    Dispatch(n_tasks, thunk, &fn);
  }

  // Splits [0, n) into contiguous ranges, one or more per thread, each a multiple
  // of `grain` (except the last): fn(begin, end, thread).
  template <typename F>
  void ParallelFor(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t blocks = (n + grain - 1) / grain;
    int n_tasks = static_cast<int>(std::min<int64_t>(blocks, n_threads_));
    if (n_tasks <= 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    int64_t per = (blocks + n_tasks - 1) / n_tasks;
    Run(n_tasks, [&](int task, int thread) {
      int64_t b = task * per * grain, e = std::min(n, (task + 1) * per * grain);
      if (b < e) fn(b, e, thread);
    });
  }

  // As ParallelFor with grain 1, one range per thread, but each range is
  // handed out from its front `chunk` units at a time, and a thread whose
  // range is done takes chunks from the back of the others' ranges. Each
  // thread still reads its own range front to back (a memory stream), and no
  // thread waits at the end for more than one chunk of another's work.
  // Which thread runs which unit varies between calls: fn's results must
  // not depend on how [0, n) is cut. One thread (or one unit): a single
  // call fn(0, n, 0); more than kMaxStealRanges threads: ParallelFor's cut.
  template <typename F>
  void ParallelForStealing(int64_t n, int64_t chunk, F&& fn) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    const int n_tasks = static_cast<int>(std::min<int64_t>(n, n_threads_));
    if (n_tasks <= 1 || n_tasks > kMaxStealRanges || n > INT32_MAX) return ParallelFor(n, 1, fn);
    // Range r: [front, back) packed as front << 32 | back.
    std::atomic<uint64_t> ranges[kMaxStealRanges];
    const int64_t per = (n + n_tasks - 1) / n_tasks;
    for (int r = 0; r < n_tasks; ++r) {
      const uint64_t b = static_cast<uint64_t>(std::min(n, r * per)),
                     e = static_cast<uint64_t>(std::min(n, (r + 1) * per));
      ranges[r].store(b << 32 | e, std::memory_order_relaxed);
    }
    // Claims up to chunk units of range r, from its front or its back.
    auto claim = [&](int r, bool from_front, int64_t& b, int64_t& e) {
      uint64_t cur = ranges[r].load(std::memory_order_relaxed);
      for (;;) {
        const int64_t f = static_cast<int64_t>(cur >> 32),
                      k = static_cast<int64_t>(cur & 0xFFFFFFFFu);
        if (f >= k) return false;
        if (from_front)
          b = f, e = std::min(k, f + chunk);
        else
          b = std::max(f, k - chunk), e = k;
        const uint64_t next = from_front
                                  ? static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(k)
                                  : static_cast<uint64_t>(f) << 32 | static_cast<uint64_t>(b);
        if (ranges[r].compare_exchange_weak(cur, next, std::memory_order_relaxed)) return true;
      }
    };
    Run(n_tasks, [&](int task, int thread) {
      int64_t b = 0, e = 0;
      while (claim(task, true, b, e)) fn(b, e, thread);
      for (int o = 1; o < n_tasks; ++o) {
        const int r = (task + o) % n_tasks;
        while (claim(r, false, b, e)) fn(b, e, thread);
      }
    });
  }

 private:
  static constexpr int kMaxStealRanges = 64;
  using Thunk = void (*)(void*, int, int);
  void Dispatch(int n_tasks, Thunk thunk, void* ctx);
  void WorkerLoop(int thread);
  void Work(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job.
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  int n_tasks_ = 0;
  alignas(64) std::atomic<int> next_task_{0};
  // kOpen while workers may join the current job, plus the count of joined
  // workers still working on it.
  alignas(64) std::atomic<uint32_t> job_state_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// The number of hardware threads (at least 1).
int HardwareThreads();

}  // namespace rotor
