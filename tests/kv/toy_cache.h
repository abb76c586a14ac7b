// A toy attention layer for policy tests on hand-made attention patterns: one
// layer, one kv head, head_dim 2; q = (1, 0) for every token and key
// k_j = (x_j, 0), so token j's score is x_j / sqrt(2) for every query. Keys
// are cached (the caller rotates nothing) and positions original, so no key
// is ever re-rotated: the scores are exactly the pattern's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace rotor::testing {

// The text indices a lane of the cache holds.
inline std::set<TextIndex> Held(const KvCache& cache, int lane = 0) {
  std::set<TextIndex> held;
  for (int32_t c = 0; c < cache.cells().hi(lane); ++c)
    if (cache.CellIndex(c, lane) >= 0) held.insert(cache.CellIndex(c, lane));
  EXPECT_EQ(held.size(), static_cast<size_t>(cache.cells().used(lane)));
  return held;
}

// Runs tokens with keys (x_j, 0) through the cache in ubatches of `step`
// (Plan, View, Attend, Write, Commit, as the forward pass does), announcing a
// prompt of `prompt` tokens first if > 0. Calls on_step after each ubatch
// (which may announce a later prompt).
// Token j's value is (j, 1): each output's second element is the sum of its
// probabilities.
inline std::unique_ptr<KvCache> RunToy(const KvConfig& cfg, const std::vector<float>& key0,
                                       int step, int64_t prompt = 0,
                                       const std::function<void(KvCache&)>& on_step = {}) {
  ops::RopeConfig rope{2, 2};
  KvShape shape{1, 1, 2, 64, rope};
  auto created = KvCache::Create(shape, cfg);
  EXPECT_TRUE(created.ok()) << created.message();
  if (!created.ok()) return nullptr;
  std::unique_ptr<KvCache> cache = std::move(*created);
  if (prompt > 0) {
    Status s = cache->ExpectPrompt(prompt);
    EXPECT_TRUE(s.ok()) << s.message();
  }
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
    Status s = cache->Plan(m, &plan);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return cache;
    s = cache->Prepare(plan);
    EXPECT_TRUE(s.ok()) << s.message();
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
    if (on_step) on_step(*cache);
  }
  return cache;
}

}  // namespace rotor::testing
