#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ROTOR_PAUSE() _mm_pause()
#else
#define ROTOR_PAUSE() ((void)0)
#endif

namespace rotor {
namespace {
// A waiting thread first spins on the pause instruction (about 30 us on the
// Xeon of docs/BENCHMARKS.md, 15 ns a pause), then yields its core between
// looks, and only then sleeps. Decode issues thousands of small jobs a
// second: the spin catches the next one at once. The yields matter when
// there are more runnable threads than cores (two engines on one machine,
// ctest -j with threaded tests): a spinning thread would keep its core from
// the thread that has the work, and the job would wait for it
// (docs/RELIABILITY.md, "Time"). A worker yields for kYieldTime at most, by
// the clock: a yield took 250 ns on that Xeon (1,200 of them were 300 us)
// but 1.2-1.6 us on the 2-vCPU VMs of later sessions, where the same count
// kept a core busy for about 2 ms after every job, all through a
// grammar-bound token's sampling (docs/BENCHMARKS.md, "Forty-fifth session").
constexpr int kPauseIterations = 2000;
constexpr auto kYieldTime = std::chrono::microseconds(300);
constexpr uint32_t kOpen = 1u << 31;

// The spin-th look of a wait: a pause, or a yield once the pauses are spent.
inline void Pause(int spin) {
  if (spin < kPauseIterations)
    ROTOR_PAUSE();
  else
    std::this_thread::yield();
}
}  // namespace

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Work(int thread) {
  for (;;) {
    int task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    thunk_(ctx_, task, thread);
  }
}

void ThreadPool::Dispatch(int n_tasks, Thunk thunk, void* ctx) {
  thunk_ = thunk;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  job_state_.store(kOpen, std::memory_order_release);  // publishes the job fields
  {
    // The lock orders the job fields before the generation bump for sleeping
    // workers; spinning workers see them through the release on generation_.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  Work(0);
  // Every task is claimed: no worker may join any more; wait for those that did.
  job_state_.fetch_and(~kOpen, std::memory_order_acq_rel);
  for (int spin = 0; job_state_.load(std::memory_order_acquire) != 0; ++spin) Pause(spin);
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kPauseIterations; ++spin) {
      ROTOR_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      const auto until = std::chrono::steady_clock::now() + kYieldTime;
      do {
        std::this_thread::yield();
        gen = generation_.load(std::memory_order_acquire);
      } while (gen == seen && std::chrono::steady_clock::now() < until);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    // Join the job if it is still open; a late worker skips a closed one.
    uint32_t state = job_state_.load(std::memory_order_acquire);
    bool joined = false;
    while ((state & kOpen) != 0 && !joined)
      joined = job_state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel);
    if (!joined) continue;
    Work(thread);
    job_state_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace rotor
