// h2o on hand-made attention patterns: which tokens are evicted, exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace rotor {
namespace {

// One layer, one kv head, head_dim 2; q = (1, 0) for every token, so token j's
// score is k_j[0] / sqrt(2). Runs the tokens in ubatches of `step` and returns
// the text indices the cache holds at the end.
std::set<TextIndex> RunH2o(const std::vector<float>& key0, int size, int recent, int step) {
  ops::RopeConfig rope{2, 2};
  KvShape shape{1, 1, 2, 64, rope};
  KvConfig cfg;
  cfg.policy = KvPolicy::kH2o;
  cfg.size = size;
  cfg.recent = recent;
  auto cache = std::move(KvCache::Create(shape, cfg)).value();
  ThreadPool pool(1);
  AttentionScratch scratch(1, 1, 1, 2);
  RopeDistanceTable table(rope, 128);
  const int n = static_cast<int>(key0.size());
  for (int b = 0; b < n; b += step) {
    const int m = std::min(step, n - b);
    std::vector<float> q(2 * m), k(2 * m), v(2 * m), out(2 * m);
    for (int i = 0; i < m; ++i) {
      q[2 * i] = 1, q[2 * i + 1] = 0;
      k[2 * i] = key0[b + i], k[2 * i + 1] = 0;
      v[2 * i] = static_cast<float>(b + i), v[2 * i + 1] = 1;
    }
    KvPlan plan;
    EXPECT_TRUE(cache->Plan(m, &plan).ok());
    KvLayerView view = cache->View(0);
    AttentionArgs a;
    a.q = q.data(), a.k = k.data(), a.v = v.data();
    a.q_stride = a.kv_stride = a.out_stride = 2;
    a.n_head = a.n_head_kv = 1;
    a.head_dim = 2;
    a.cache = &view;
    a.plan = &plan;
    a.rope = &table;
    a.out = out.data();
    Attend(pool, a, scratch);
    for (int i = 0; i < m; ++i) EXPECT_NEAR(out[2 * i + 1], 1.0f, 1e-6);  // probabilities sum to 1
    cache->Write(0, plan, k.data(), v.data(), 2);
    cache->Commit(plan);
  }
  std::set<TextIndex> held;
  for (int32_t c = 0; c < size; ++c)
    if (cache->CellIndex(c) >= 0) held.insert(cache->CellIndex(c));
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
