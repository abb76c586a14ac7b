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
#include "base/cpu.h"
#include "kv/kv_quant.h"

namespace rotor {

namespace {

// A layer's only lane (tova) on several threads: token by token, the hook
// before it on this thread, then the lane's kv heads split among the threads
// (each folds its heads over the lane's cells and sums its heads' weights),
// then the partial weights added and the hook after it.
void AttendLayerLane(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan,
                     AttentionScratch& scratch, const AttentionScratch::Cut& cut) {
  const KvLayerView& view = *a.cache;
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  const int lane = view.first_lane;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int32_t n_cells = view.n_cells, n = plan.n_tokens;
  const size_t k_head_bytes = KvHeadBytes(view.types.k, hd);
  const size_t v_head_bytes = KvHeadBytes(view.types.v, hd);
  const bool deferred = view.rope_k == RopeK::kDeferred;
  const LaneWeightsFn lane_weights = LaneWeightsOf(ActiveIsa());
  const int n_pieces = std::min(pool.size(), view.lane_heads);
  // Piece p's buffers: its scores and weights; piece 0's key_cells hold the keys.
  std::vector<AttentionScratch::LaneBuffers*> bufs(n_pieces);
  for (int p = 0; p < n_pieces; ++p) bufs[p] = &scratch.lanes(p, n_cells, 1, a.n_head);
  int32_t* keys = bufs[0]->key_cells.data();
  for (int i = 0; i < n; ++i) {
    hooks.BeforeToken(cells, lane, i, plan);
    const TextIndex* index = cells.lane_index(lane);
    int n_keys = 0;
    for (int32_t c = 0; c < cells.hi(lane); ++c)
      if (index[c] >= 0) keys[n_keys++] = c;
    pool.Run(n_pieces, [&](int p, int thread) {
      const int k0 = view.lane_heads * p / n_pieces, k1 = view.lane_heads * (p + 1) / n_pieces;
      const int q_heads = (k1 - k0) * group;
      const size_t k_col = static_cast<size_t>(k0) * k_head_bytes;
      const size_t v_col = static_cast<size_t>(k0) * v_head_bytes;
      AttentionScratch::Thread th = scratch.thread(thread);
      AttentionScratch::LaneBuffers& buf = *bufs[p];
      attn::FoldState st = MakeFoldState(a, th, q_heads, k1 - k0, k0);
      st.q = a.q + i * a.q_stride + static_cast<int64_t>(k0) * group * hd;
      st.q8_of = st.qp_of = nullptr;
      std::fill(st.m, st.m + q_heads, -std::numeric_limits<float>::infinity());
      std::fill(st.l, st.l + q_heads, 0.f);
      std::fill(st.acc, st.acc + static_cast<size_t>(q_heads) * hd, 0.f);
      const int32_t* pos = cells.lane_pos(lane);
      attn::KeyBlock block;
      SetBlockTypes(view, hd, block);
      for (int k = 0; k < n_keys;) {
        int far_used = 0;
        block.n = 0;
        const int first = k;
        for (; k < n_keys && block.n < attn::kBlock; ++k) {
          const int32_t c = keys[k];
          const TextIndex idx = index[c];
          const int b = block.n++;
          if (idx >= plan.first) {  // a token of this ubatch: its own K/V
            block.k[b] = cut.chunk_k + (idx - plan.first) * cut.chunk_k_row_bytes + k_col;
            block.v[b] = cut.chunk_v + (idx - plan.first) * cut.chunk_v_row_bytes + v_col;
          } else {
            block.k[b] = static_cast<const uint8_t*>(view.KRow(c)) + k_col;
            block.v[b] = static_cast<const uint8_t*>(view.VRow(c)) + v_col;
          }
          block.cos[b] = block.sin[b] = block.cos2[b] = block.sin2[b] = nullptr;
          if (deferred)
            SetRotation(*a.rope, static_cast<int64_t>(plan.pos[i]) - pos[c], block, b, th.far,
                        &far_used);
        }
        FoldWith(cut, st, block);
        for (int h = 0; h < q_heads; ++h)
          std::copy(st.scores + h * attn::kBlock, st.scores + h * attn::kBlock + block.n,
                    buf.scores.data() + h * buf.stride + first);
      }
      for (int h = 0; h < q_heads; ++h) {
        float* out = a.out + i * a.out_stride + (static_cast<int64_t>(k0) * group + h) * hd;
        const float inv = st.l[h] > 0.f ? 1.0f / st.l[h] : 0.f;
        for (int d = 0; d < hd; ++d) out[d] = st.acc[h * hd + d] * inv;
      }
      lane_weights(buf.scores.data(), buf.stride, q_heads, n_keys, st.m, st.l, buf.weights.data());
    });
    float* weights = bufs[0]->weights.data();
    for (int p = 1; p < n_pieces; ++p)
      for (int k = 0; k < n_keys; ++k) weights[k] += bufs[p]->weights[k];
    hooks.AfterToken(cells, lane, i, std::span<const int32_t>(keys, n_keys),
                     std::span<const float>(weights, n_keys), plan);
  }
}

}  // namespace

// A thread runs a contiguous range of the layer's lanes in lockstep: for each
// token, every lane's BeforeToken, then the cells block by block with every
// lane of the range folding its slice of the block's rows (so the rows are
// read once, contiguously, rather than one head's slice a row apart per
// lane), then every lane's weights and AfterToken. Lanes stay independent:
// each has its own fold state, keys and hooks' calls in token order.
void AttendLanes(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
                 const AttentionScratch::Cut& cut) {
  const KvLayerView& view = *a.cache;
  if (view.n_lanes == 1 && view.lane_heads > 1 && pool.size() > 1)
    return AttendLayerLane(pool, a, plan, scratch, cut);
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int lane_heads = view.lane_heads, q_heads = lane_heads * group;
  const int32_t n_cells = view.n_cells, n = plan.n_tokens;
  const size_t k_head_bytes = KvHeadBytes(view.types.k, hd);
  const size_t v_head_bytes = KvHeadBytes(view.types.v, hd);
  const bool deferred = view.rope_k == RopeK::kDeferred;
  const LaneWeightsFn lane_weights = LaneWeightsOf(ActiveIsa());
  const int n_ranges = std::min(pool.size(), view.n_lanes);

  pool.Run(n_ranges, [&](int r, int thread) {
    // Lanes [g0, g1) of the layer.
    const int g0 = view.n_lanes * r / n_ranges, g1 = view.n_lanes * (r + 1) / n_ranges;
    const int nl = g1 - g0;
    AttentionScratch::Thread th = scratch.thread(thread);
    AttentionScratch::LaneBuffers& buf = scratch.lanes(thread, n_cells, nl, q_heads);
    // Lane g's fold state: its query heads' rows of the thread's state.
    std::vector<attn::FoldState> st(nl);
    for (int l = 0; l < nl; ++l) {
      attn::FoldState& s = st[l];
      s = MakeFoldState(a, th, q_heads, lane_heads, (g0 + l) * lane_heads);
      s.scores = th.scores + static_cast<size_t>(l) * q_heads * attn::kBlock;
      s.m = th.m + l * q_heads;
      s.l = th.l + l * q_heads;
      s.acc = th.acc + static_cast<size_t>(l) * q_heads * hd;
      // The query's quantized forms too: each lane's own (the lanes fold
      // block by block in turn, each checking its q8_of / qp_of).
      s.q8 = th.q8 + static_cast<size_t>(l) * q_heads * hd;
      s.q8d = th.q8d + static_cast<size_t>(l) * q_heads * hd;
      s.q8s = th.q8s + static_cast<size_t>(l) * q_heads * hd / 8;
      s.qp = th.qp + static_cast<size_t>(l) * q_heads * attn::PairStride(hd);
    }
    std::vector<int> n_keys(nl);
    attn::KeyBlock block;
    SetBlockTypes(view, hd, block);
    for (int i = 0; i < n; ++i) {
      int32_t hi = 0;
      for (int l = 0; l < nl; ++l) {
        const int lane = view.first_lane + g0 + l;
        hooks.BeforeToken(cells, lane, i, plan);
        hi = std::max(hi, cells.hi(lane));
        attn::FoldState& s = st[l];
        s.q = a.q + i * a.q_stride + static_cast<int64_t>(g0 + l) * q_heads * hd;
        s.q8_of = s.qp_of = nullptr;
        std::fill(s.m, s.m + q_heads, -std::numeric_limits<float>::infinity());
        std::fill(s.l, s.l + q_heads, 0.f);
        std::fill(s.acc, s.acc + static_cast<size_t>(q_heads) * hd, 0.f);
        n_keys[l] = 0;
      }
      for (int32_t c0 = 0; c0 < hi; c0 += attn::kBlock) {
        const int32_t c1 = std::min(hi, c0 + attn::kBlock);
        for (int l = 0; l < nl; ++l) {
          const int lane = view.first_lane + g0 + l;
          const TextIndex* index = cells.lane_index(lane);
          const int32_t* pos = cells.lane_pos(lane);
          const size_t k_col = static_cast<size_t>(g0 + l) * lane_heads * k_head_bytes;
          const size_t v_col = static_cast<size_t>(g0 + l) * lane_heads * v_head_bytes;
          int32_t* keys = buf.key_cells.data() + static_cast<size_t>(l) * buf.stride;
          int far_used = 0;
          block.n = 0;
          for (int32_t c = c0; c < std::min(c1, cells.hi(lane)); ++c) {
            const TextIndex idx = index[c];
            if (idx < 0) continue;
            const uint8_t* k;
            const uint8_t* v;
            if (idx >= plan.first) {  // a token of this ubatch: its own K/V
              CHECK(idx - plan.first <= i);
              k = cut.chunk_k + (idx - plan.first) * cut.chunk_k_row_bytes + k_col;
              v = cut.chunk_v + (idx - plan.first) * cut.chunk_v_row_bytes + v_col;
            } else {
              k = static_cast<const uint8_t*>(view.KRow(c)) + k_col;
              v = static_cast<const uint8_t*>(view.VRow(c)) + v_col;
            }
            const int b = block.n++;
            block.k[b] = k;
            block.v[b] = v;
            block.cos[b] = block.sin[b] = block.cos2[b] = block.sin2[b] = nullptr;
            if (deferred)
              SetRotation(*a.rope, static_cast<int64_t>(plan.pos[i]) - pos[c], block, b, th.far,
                          &far_used);
            keys[n_keys[l]++] = c;
          }
          if (block.n == 0) continue;
          attn::FoldState& s = st[l];
          FoldWith(cut, s, block);
          // The block's scores, kept for the weights: [q_heads, stride] of lane l.
          float* scores = buf.scores.data() + static_cast<size_t>(l) * q_heads * buf.stride;
          for (int h = 0; h < q_heads; ++h)
            std::copy(s.scores + h * attn::kBlock, s.scores + h * attn::kBlock + block.n,
                      scores + h * buf.stride + n_keys[l] - block.n);
        }
      }
      for (int l = 0; l < nl; ++l) {
        const int lane = view.first_lane + g0 + l;
        const attn::FoldState& s = st[l];
        for (int h = 0; h < q_heads; ++h) {
          float* out = a.out + i * a.out_stride + (static_cast<int64_t>(g0 + l) * q_heads + h) * hd;
          const float inv = s.l[h] > 0.f ? 1.0f / s.l[h] : 0.f;
          for (int d = 0; d < hd; ++d) out[d] = s.acc[h * hd + d] * inv;
        }
        const float* scores = buf.scores.data() + static_cast<size_t>(l) * q_heads * buf.stride;
        lane_weights(scores, buf.stride, q_heads, n_keys[l], s.m, s.l, buf.weights.data());
        hooks.AfterToken(cells, lane, i,
                         std::span<const int32_t>(buf.key_cells.data() + l * buf.stride, n_keys[l]),
                         std::span<const float>(buf.weights.data(), n_keys[l]), plan);
      }
    }
  });
}

}  // namespace rotor
