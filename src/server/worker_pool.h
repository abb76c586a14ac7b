// Threads for the server's work that may take long (parsing a body,
// tokenizing a prompt, slot files): at most `max_threads`, created only when a
// task finds none idle, so a large --max-queue costs no thread until
// requests use one.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rotor::serve {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}
  // Runs the tasks still queued, then joins.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when the task cannot run: no thread exists and none can be
  // started (out of memory or threads); it was not queued.
  bool Run(std::function<void()> task);
  int threads() const;

 private:
  void Loop();

  const int max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stopping_ = false;
};

}  // namespace rotor::serve
