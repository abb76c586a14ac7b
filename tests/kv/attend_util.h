// One ubatch of one attention layer over a single-layer cache, as the forward
// runs it: the attention tests compare caches of different types this way.
#pragma once

#include <gtest/gtest.h>

#include "attention/attention.h"
#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"

namespace rotor::testing {

// Attends the planned ubatch p of m tokens on `isa`: q [m, n_head, hd] over
// the cache's keys and the ubatch's own k, v [m, n_head_kv, hd]; out
// [m, n_head, hd]. Then writes k, v into the cache and commits the plan.
inline void AttendOneLayer(ThreadPool& pool, AttentionScratch& scratch, const RopeDistanceTable& table,
                           KvCache& c, KvPlan& p, int n_head, int n_head_kv, int hd, const float* q,
                           const float* k, const float* v, float* out, Isa isa) {
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
  c.Commit(p);
}

}  // namespace rotor::testing
