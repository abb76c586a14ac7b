// One persistent pool of worker threads, sized by -t. The calling thread takes
// part in every job, so a pool of n threads starts n - 1 workers. Workers spin
// briefly between jobs (decode issues thousands of small jobs a second) and
// then sleep; no allocation or locking on the hot path. A worker joins a job
// only while it is open; the caller closes it once every task is claimed and
// waits just for the workers that joined, so a worker the OS has descheduled
// never stalls a job it took no part in.
#pragma once

#include <atomic>
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

 private:
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
