// h2o attention: per kv head (a lane of the plan), token by token through the
// ubatch. Before token t attends, a full lane evicts its lowest-mass token
// outside the recent window; t then attends to the lane's tokens and to
// itself, and the normalised attention probabilities (summed over the query
// heads sharing the kv head) are added to each key's mass. The fold kernel
// leaves each block's scores in its scratch, so the masses need no second
// pass over the cache. Processing tokens in order makes the result independent
// of the prefill step.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/attention.h"
#include "attention/attention_internal.h"
#include "base/check.h"

namespace rotor {

void AttendH2o(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
               const AttentionScratch::Cut& cut) {
  const bool avx512 = cut.avx512;
  const KvLayerView& cache = *a.cache;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int32_t n_cells = plan.lane_cells, n = plan.n_tokens;
  const size_t head_bytes = static_cast<size_t>(hd) * KvTypeBytes(cache.type);
  const bool deferred = cache.rope_k == RopeK::kDeferred;

  pool.Run(a.n_head_kv, [&](int g, int thread) {
    const int lane = cache.layer * a.n_head_kv + g;
    TextIndex* index = plan.lane_index.data() + static_cast<size_t>(lane) * n_cells;
    int32_t* pos = plan.lane_pos.data() + static_cast<size_t>(lane) * n_cells;
    float* mass = plan.lane_mass.data() + static_cast<size_t>(lane) * n_cells;
    int32_t* slots = plan.lane_slot.data() + static_cast<size_t>(lane) * n;
    AttentionScratch::Thread th = scratch.thread(thread);
    AttentionScratch::H2oBuffers& buf = scratch.h2o(thread, n_cells + n, group, n);
    int count = 0;
    for (int32_t c = 0; c < n_cells; ++c) count += index[c] >= 0 ? 1 : 0;
    attn::FoldState st = MakeFoldState(a, th, group, 1);
    attn::KeyBlock block;
    block.f16 = cache.type == KvType::kF16;
    for (int i = 0; i < n; ++i) {
      const TextIndex t = plan.first + i;
      if (count >= n_cells) {  // evict the lightest token outside the recent window
        int victim = -1;
        float best = std::numeric_limits<float>::infinity();
        TextIndex best_index = 0;
        auto consider = [&](int id, TextIndex idx, float m) {
          if (idx > t - plan.recent) return;
          if (m < best || (m == best && idx < best_index)) victim = id, best = m, best_index = idx;
        };
        for (int32_t c = 0; c < n_cells; ++c)
          if (index[c] >= 0) consider(c, index[c], mass[c]);
        for (int j = 0; j < i; ++j)
          if (buf.kept[j]) consider(n_cells + j, plan.first + j, buf.chunk_mass[j]);
        CHECK(victim >= 0);
        if (victim < n_cells) index[victim] = -1;
        else buf.kept[victim - n_cells] = 0;
        --count;
      }
      buf.kept[i] = 1;
      buf.chunk_mass[i] = 0.f;
      ++count;

      st.q = a.q + i * a.q_stride + static_cast<int64_t>(g) * group * hd;
      std::fill(st.m, st.m + group, -std::numeric_limits<float>::infinity());
      std::fill(st.l, st.l + group, 0.f);
      std::fill(st.acc, st.acc + static_cast<size_t>(group) * hd, 0.f);
      int n_keys = 0, far_used = 0;
      block.n = 0;
      auto flush = [&] {
        if (block.n == 0) return;
        if (avx512) attn::FoldAvx512(st, block);
        else attn::FoldScalar(st, block);
        for (int h = 0; h < group; ++h)
          std::copy(st.scores + h * attn::kBlock, st.scores + h * attn::kBlock + block.n,
                    buf.scores.data() + static_cast<size_t>(h) * buf.stride + n_keys - block.n);
        block.n = 0;
        far_used = 0;
      };
      auto push = [&](int id, const void* k, const void* v, int32_t pos_k) {
        const int b = block.n;
        block.k[b] = k;
        block.v[b] = v;
        block.cos[b] = block.sin[b] = block.cos2[b] = block.sin2[b] = nullptr;
        if (deferred)
          SetRotation(*a.rope, static_cast<int64_t>(plan.pos[i]) - pos_k, block, b, th.far, &far_used);
        buf.key_ids[n_keys++] = id;
        if (++block.n == attn::kBlock) flush();
      };
      for (int32_t c = 0; c < n_cells; ++c)
        if (index[c] >= 0)
          push(c, static_cast<const uint8_t*>(cache.KRow(c)) + g * head_bytes,
               static_cast<const uint8_t*>(cache.VRow(c)) + g * head_bytes, pos[c]);
      for (int j = 0; j <= i; ++j)
        if (buf.kept[j])
          push(n_cells + j, cut.chunk_k + j * cut.chunk_row_bytes + g * head_bytes,
               cut.chunk_v + j * cut.chunk_row_bytes + g * head_bytes, plan.pos[j]);
      flush();
      for (int h = 0; h < group; ++h) {
        float* out = a.out + i * a.out_stride + (static_cast<int64_t>(g) * group + h) * hd;
        const float inv = 1.0f / st.l[h];
        for (int d = 0; d < hd; ++d) out[d] = st.acc[h * hd + d] * inv;
      }
      for (int kk = 0; kk < n_keys; ++kk) {
        float p = 0.f;
        for (int h = 0; h < group; ++h)
          p += std::exp(buf.scores[static_cast<size_t>(h) * buf.stride + kk] - st.m[h]) / st.l[h];
        const int id = buf.key_ids[kk];
        if (id < n_cells) mass[id] += p;
        else buf.chunk_mass[id - n_cells] += p;
      }
    }
    // Admitted tokens take the free cells, in order.
    int32_t c = 0;
    for (int j = 0; j < n; ++j) {
      if (!buf.kept[j]) continue;
      while (index[c] >= 0) ++c;
      CHECK_LT(c, n_cells);
      slots[j] = c;
      index[c] = plan.first + j;
      pos[c] = plan.pos[j];
      mass[c] = buf.chunk_mass[j];
    }
  });
}

}  // namespace rotor
