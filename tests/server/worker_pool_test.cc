#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>

namespace rotor::serve {
namespace {

TEST(WorkerPoolTest, ThreadsAreCreatedOnlyAsNeededAndBounded) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.threads(), 0);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i)
    pool.Run([&, gate] {
      gate.wait();
      ran.fetch_add(1);
    });
  EXPECT_LE(pool.threads(), 3);
  release.set_value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran.load() < 50 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ran.load(), 50);
  EXPECT_EQ(pool.threads(), 3);
}

}  // namespace
}  // namespace rotor::serve
