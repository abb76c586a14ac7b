// One ubatch of one attention layer over a single-layer cache, as the forward
// runs it: the attention tests compare caches of different types this way.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"

namespace rotor::testing {

// Attends the planned ubatch p of m tokens on `isa`: q [m, n_head, hd] over
// the cache's keys and the ubatch's own k, v [m, n_head_kv, hd]; out
// [m, n_head, hd]. Then writes k, v into the cache and commits the plan
// (commit_pool: KvCache::Commit's pool).
inline void AttendOneLayer(ThreadPool& pool, AttentionScratch& scratch,
                           const RopeDistanceTable& table, KvCache& c, KvPlan& p, int n_head,
                           int n_head_kv, int hd, const float* q, const float* k, const float* v,
                           float* out, Isa isa, ThreadPool* commit_pool = nullptr) {
  const KvLayerView view = c.View(0);
  AttentionArgs a;
  a.q = q, a.k = k, a.v = v, a.out = out;
  a.q_stride = a.out_stride = n_head * hd;
  a.kv_stride = n_head_kv * hd;
  a.n_head = n_head, a.n_head_kv = n_head_kv, a.head_dim = hd;
  a.cache = &view, a.plan = &p, a.rope = &table;
  SetIsa(isa);
  Attend(pool, a, scratch);
  c.Write(0, p, k, v, n_head_kv * hd);
  c.Commit(p, commit_pool);
}

// Random key offsets (cached RoPE), centers and scales (deferred) of one
// layer's row of kv_dim values, as a model's calibration gives them
// (KvKeyOffsets' values: [3, 1 layer, kv_dim]); block-type keys use them by
// default.
inline std::vector<float> RandomKeyOffsetValues(int kv_dim) {
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> v(3 * static_cast<size_t>(kv_dim));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i < 2 * static_cast<size_t>(kv_dim) ? n(g) : 1.f + 0.5f * std::fabs(n(g));
  return v;
}

// The largest difference of two outputs, relative to b's largest value.
inline double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[e]) - b[e]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[e])));
  }
  return diff / scale;
}

// K/V types the attention tests sweep: float, half, and block types (K and
// V of different 4/5-bit types).
inline const KvTypes kAttendTypes[] = {{KvType::kF32, KvType::kF32},
                                       {KvType::kF16, KvType::kF16},
                                       {KvType::kQ8_0, KvType::kQ8_0},
                                       {KvType::kQ4_0, KvType::kQ5_0}};

}  // namespace rotor::testing
