#include "server/worker_pool.h"

#include <cstdio>
#include <exception>

namespace rotor::serve {

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::Run(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    // Tasks already queued each wait for an idle thread too.
    if (idle_ < static_cast<int>(tasks_.size()) &&
        static_cast<int>(threads_.size()) < max_threads_) {
      try {
        threads_.emplace_back([this] { Loop(); });
      } catch (const std::exception&) {  // std::system_error, std::bad_alloc
        // The threads there are will take it, in turn.
        if (threads_.empty()) {
          tasks_.pop_back();
          return false;
        }
      }
    }
  }
  cv_.notify_one();
  return true;
}

int WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

void WorkerPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      // A task answers its own request's errors; one that escapes must not
      // end the process (and every other request with it).
      std::fprintf(stderr, "rotor serve: a worker task failed: %s\n", e.what());
    }
    lock.lock();
  }
}

}  // namespace rotor::serve
