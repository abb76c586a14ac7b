// h2o on hand-made attention patterns: which tokens are evicted, exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kv/kv_cache.h"
#include "kv_test_util.h"
#include "toy_cache.h"

namespace rotor {
namespace {

// One layer, one kv head, head_dim 2; q = (1, 0) for every token, so token j's
// score is k_j[0] / sqrt(2) (toy_cache.h). Runs the tokens in ubatches of
// `step` and returns the text indices the cache holds at the end.
std::set<TextIndex> RunH2o(const std::vector<float>& key0, int size, int recent, int step) {
  const KvConfig cfg = testing::Kv("h2o", size, 0, RopeK::kCached, KvPositions::kOriginal, recent);
  std::unique_ptr<KvCache> cache = testing::RunToy(cfg, key0, step);
  std::set<TextIndex> held = testing::Held(*cache);
  EXPECT_LE(held.size(), static_cast<size_t>(size));
  return held;
}

// Token 2 takes nearly all attention from the moment it exists; token 0 got
// all of it at first. Every later non-recent token is light and is evicted.
TEST(H2o, KeepsHeavyHittersEvictsLightest) {
  std::vector<float> key0 = {0, 0, 20, 0, 0, 0, 0, 0};
  for (int step : {1, 3, 8}) {
    EXPECT_EQ(RunH2o(key0, 4, 2, step), (std::set<TextIndex>{0, 2, 6, 7})) << "step " << step;
  }
}

// Tokens 1 and 2 get exactly zero probability (their scores underflow), so
// their masses tie at 0: the older one goes first.
TEST(H2o, TiesEvictTheOldest) {
  std::vector<float> key0 = {0, -400, -400, 0};
  EXPECT_EQ(RunH2o(key0, 3, 1, 1), (std::set<TextIndex>{0, 2, 3}));
  EXPECT_EQ(RunH2o(key0, 3, 1, 4), (std::set<TextIndex>{0, 2, 3}));
}

// The recent window is never evicted, whatever its mass.
TEST(H2o, RecentWindowIsProtected) {
  std::vector<float> key0 = {30, 30, -400, -400, -400, -400};
  // size 4, recent 3: tokens 0 and 1 are heavy; at t = 4 the candidates are
  // indices <= 1 only (2, 3, 4 are recent), so a heavy token must go.
  std::set<TextIndex> held = RunH2o(key0, 4, 3, 1);
  EXPECT_TRUE(held.count(3) && held.count(4) && held.count(5));
  EXPECT_EQ(held.size(), 4u);
}

}  // namespace
}  // namespace rotor
