#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ROTOR_PAUSE() _mm_pause()
#else
#define ROTOR_PAUSE() ((void)0)
#endif

namespace rotor {
namespace {
// Spin iterations before a worker sleeps: about 50-100 microseconds.
constexpr int kSpinIterations = 20000;
constexpr uint32_t kOpen = 1u << 31;
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
  while (job_state_.load(std::memory_order_acquire) != 0) ROTOR_PAUSE();
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      ROTOR_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
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
