// Attention for per-lane policies (h2o, snapkv, tova): each lane of the layer
// (one kv head, or every kv head of the layer) runs token by token through the
// ubatch. Around each token the policy's hooks decide: BeforeToken evicts and
// admits the token to a cell, so the lane's occupied cells are exactly the
// keys the token sees; AfterToken receives the token's attention
// probabilities over those cells, summed over the lane's query heads. Cells
// holding tokens of this ubatch are read from its own K/V (the cache stores
// them only after attention). The fold kernel leaves each block's scores in
// its scratch, so the weights need no second pass over the cache. Processing
// tokens in order makes the result independent of the prefill step.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/attention.h"
#include "attention/attention_internal.h"
#include "base/check.h"

namespace rotor {

void AttendLanes(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
                 const AttentionScratch::Cut& cut) {
  const KvLayerView& view = *a.cache;
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int lane_heads = view.lane_heads, q_heads = lane_heads * group;
  const int32_t n_cells = view.n_cells, n = plan.n_tokens;
  const size_t head_bytes = static_cast<size_t>(hd) * KvTypeBytes(view.type);
  const bool deferred = view.rope_k == RopeK::kDeferred;

  pool.Run(view.n_lanes, [&](int g, int thread) {
    const int lane = view.first_lane + g;
    const size_t col = static_cast<size_t>(g) * lane_heads * head_bytes;  // the lane's heads in a row
    AttentionScratch::Thread th = scratch.thread(thread);
    AttentionScratch::LaneBuffers& buf = scratch.lanes(thread, n_cells, q_heads);
    attn::FoldState st = MakeFoldState(a, th, q_heads, lane_heads);
    attn::KeyBlock block;
    block.f16 = view.type == KvType::kF16;
    for (int i = 0; i < n; ++i) {
      hooks.BeforeToken(cells, lane, i, plan);
      const TextIndex* index = cells.lane_index(lane);
      const int32_t* pos = cells.lane_pos(lane);
      st.q = a.q + i * a.q_stride + static_cast<int64_t>(g) * q_heads * hd;
      std::fill(st.m, st.m + q_heads, -std::numeric_limits<float>::infinity());
      std::fill(st.l, st.l + q_heads, 0.f);
      std::fill(st.acc, st.acc + static_cast<size_t>(q_heads) * hd, 0.f);
      int n_keys = 0, far_used = 0;
      block.n = 0;
      auto flush = [&] {
        if (block.n == 0) return;
        if (cut.avx512) attn::FoldAvx512(st, block);
        else attn::FoldScalar(st, block);
        for (int h = 0; h < q_heads; ++h)
          std::copy(st.scores + h * attn::kBlock, st.scores + h * attn::kBlock + block.n,
                    buf.scores.data() + static_cast<size_t>(h) * buf.stride + n_keys - block.n);
        block.n = 0;
        far_used = 0;
      };
      const int32_t hi = cells.hi(lane);
      for (int32_t c = 0; c < hi; ++c) {
        const TextIndex idx = index[c];
        if (idx < 0) continue;
        const uint8_t* k;
        const uint8_t* v;
        if (idx >= plan.first) {  // a token of this ubatch: its own K/V
          CHECK(idx - plan.first <= i);
          k = cut.chunk_k + (idx - plan.first) * cut.chunk_row_bytes + col;
          v = cut.chunk_v + (idx - plan.first) * cut.chunk_row_bytes + col;
        } else {
          k = static_cast<const uint8_t*>(view.KRow(c)) + col;
          v = static_cast<const uint8_t*>(view.VRow(c)) + col;
        }
        const int b = block.n;
        block.k[b] = k;
        block.v[b] = v;
        block.cos[b] = block.sin[b] = block.cos2[b] = block.sin2[b] = nullptr;
        if (deferred)
          SetRotation(*a.rope, static_cast<int64_t>(plan.pos[i]) - pos[c], block, b, th.far,
                      &far_used);
        buf.key_cells[n_keys++] = c;
        if (++block.n == attn::kBlock) flush();
      }
      flush();
      for (int h = 0; h < q_heads; ++h) {
        float* out = a.out + i * a.out_stride + (static_cast<int64_t>(g) * q_heads + h) * hd;
        const float inv = st.l[h] > 0.f ? 1.0f / st.l[h] : 0.f;
        for (int d = 0; d < hd; ++d) out[d] = st.acc[h * hd + d] * inv;
      }
      for (int kk = 0; kk < n_keys; ++kk) {
        float p = 0.f;
        for (int h = 0; h < q_heads; ++h)
          p += std::exp(buf.scores[static_cast<size_t>(h) * buf.stride + kk] - st.m[h]) / st.l[h];
        buf.weights[kk] = p;
      }
      hooks.AfterToken(cells, lane, i, std::span<const int32_t>(buf.key_cells.data(), n_keys),
                       std::span<const float>(buf.weights.data(), n_keys), plan);
    }
  });
}

}  // namespace rotor
