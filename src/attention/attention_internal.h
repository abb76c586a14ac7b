// Internal entry points of the attention module.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "attention/attention.h"
#include "attention/fold.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"

namespace rotor {

// A fold state over a thread's scratch for n_head query heads sharing
// n_head_kv kv heads, the layer's heads from first_kv_head on (q and the
// running state are set by the caller).
attn::FoldState MakeFoldState(const AttentionArgs& a, const AttentionScratch::Thread& th,
                              int n_head, int n_head_kv, int first_kv_head);

// A token's output of a fold state's heads: out[h] = acc[h] / l[h] (zero
// where no key was seen). out: [st.n_head, head_dim].
inline void WriteHeads(const attn::FoldState& st, float* out) {
  const int hd = st.head_dim;
  for (int h = 0; h < st.n_head; ++h) {
    const float inv = st.l[h] > 0.f ? 1.0f / st.l[h] : 0.f;
    for (int d = 0; d < hd; ++d) out[h * hd + d] = st.acc[h * hd + d] * inv;
  }
}

// Folds a key block with the fold its cut chose (ChooseFold in attention.cc).
inline void FoldWith(const AttentionScratch::Cut& cut, attn::FoldState& s,
                     const attn::KeyBlock& b) {
  if (cut.avx512) attn::FoldAvx512(s, b);
  else if (cut.avx2) attn::FoldAvx2(s, b);
  else attn::FoldScalar(s, b);
}

// The lane weights (attn::LaneWeightsScalar's contract) of the active ISA.
using LaneWeightsFn = void (*)(const float* scores, size_t stride, int n_heads, int n_keys,
                               const float* m, const float* l, float* out);
inline LaneWeightsFn LaneWeightsOf(Isa isa) {
  if (isa == Isa::kAvx512) return attn::LaneWeightsAvx512;
  if (isa == Isa::kAvx2) return attn::LaneWeightsAvx2;
  return attn::LaneWeightsScalar;
}

// A key block's element types and head sizes, from the layer's view.
void SetBlockTypes(const KvLayerView& view, int head_dim, attn::KeyBlock& block);

// Sets key b's rotation rows for a key `distance` behind its query (deferred
// RoPE): two table levels, or a row computed into `far` (kBlock rows of
// 2 x head_dim, `*far_used` of them taken) for a key beyond the table.
// Inline: the per-lane policies' decode sets one per key and lane head
// (110M h2o: 12 calls per key where the full cache makes one).
void SetFarRotation(const RopeDistanceTable& table, int64_t distance, attn::KeyBlock& block, int b,
                    float* far, int* far_used);
inline void SetRotation(const RopeDistanceTable& table, int64_t distance, attn::KeyBlock& block,
                        int b, float* far, int* far_used) {
  if (distance >= 0 && distance < table.max_distance()) {
    block.cos[b] = table.CoarseCos(distance);
    block.sin[b] = table.CoarseSin(distance);
    block.cos2[b] = table.FineCos(distance);
    block.sin2[b] = table.FineSin(distance);
    return;
  }
  SetFarRotation(table, distance, block, b, far, far_used);
}

// Head h's softmax states of `splits` split tasks merged: split s's state at
// partials + s * part_stride (m [nh], then l [nh], then acc [nh, hd]); out
// [hd] the head's output, *m / *l the merged max and sum (the split decode
// and the per-lane policies' splits).
inline void MergeHeadSplits(const float* partials, size_t part_stride, int splits, int nh, int h,
                            int hd, float* out, float* m, float* l) {
  *m = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < splits; ++s) *m = std::max(*m, partials[s * part_stride + h]);
  std::fill(out, out + hd, 0.f);
  *l = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float* p = partials + s * part_stride;
    if (p[nh + h] == 0.f) continue;
    const float w = std::exp(p[h] - *m);
    *l += p[nh + h] * w;
    const float* acc = p + 2 * nh + static_cast<size_t>(h) * hd;
    for (int d = 0; d < hd; ++d) out[d] += acc[d] * w;
  }
  const float inv = *l > 0.f ? 1.0f / *l : 0.f;
  for (int d = 0; d < hd; ++d) out[d] *= inv;
}

// Per-lane policies, token i of the ubatch: key b of a block is cell c,
// holding text index idx at position pos; the columns from k_col (v_col) of
// its K (V) row: the cache's, or for a token of this ubatch its own row in
// the cut's chunks. Deferred: its rotation to the query (SetRotation).
inline void SetLaneKey(const AttentionArgs& a, const AttentionScratch::Cut& cut,
                       const KvPlan& plan, int i, int32_t c, TextIndex idx, int32_t pos,
                       size_t k_col, size_t v_col, float* far, int* far_used,
                       attn::KeyBlock& block, int b) {
  const KvLayerView& view = *a.cache;
  if (idx >= plan.first) {
    block.k[b] = cut.chunk_k + (idx - plan.first) * cut.chunk_k_row_bytes + k_col;
    block.v[b] = cut.chunk_v + (idx - plan.first) * cut.chunk_v_row_bytes + v_col;
  } else {
    block.k[b] = static_cast<const uint8_t*>(view.KRow(c)) + k_col;
    block.v[b] = static_cast<const uint8_t*>(view.VRow(c)) + v_col;
  }
  block.cos[b] = block.sin[b] = block.cos2[b] = block.sin2[b] = nullptr;
  if (view.rope_k == RopeK::kDeferred)
    SetRotation(*a.rope, static_cast<int64_t>(plan.pos[i]) - pos, block, b, far, far_used);
}

// Per-lane policies' tiles: what RunLaneTile keeps of each token's keys for
// its weights. A token's keys come in blocks of kBlock (the last one short);
// the tile fold leaves exp(score - m) of a block's keys, m the head's
// running max after that block.
struct LaneTileLog {
  float* p = nullptr;   // [n tokens, n_head, stride] exp(score - m) of each key
  float* mb = nullptr;  // [n tokens, n_head, blocks] m after each block
  float* m = nullptr;   // [n tokens, n_head] the final max
  float* l = nullptr;   // [n tokens, n_head] the final sum
  size_t stride = 0;    // keys a token may have
  int blocks = 0;       // (stride + kBlock - 1) / kBlock
  // [n tokens] whether a token's probabilities are kept (its policy's
  // WantsWeights); null: every token's.
  const uint8_t* want = nullptr;
  // A replayed tile (LaneReplay): folded before any of its tokens is
  // admitted, so every occupied cell is a key of every token, those holding
  // this ubatch's earlier tokens read from its own rows; then the tile's
  // own tokens causally.
  bool replay = false;
};

// Tokens [i0, i0 + n) of one lane (n <= AttentionScratch::kTileTokens),
// already admitted by BeforeToken with nothing evicted, folded by the tile
// folds (cut.tiled). `a` covers the lane's heads only: its cache view's
// index and pos are the lane's, its K/V offsets its heads' columns, and
// cut's chunk_k / chunk_v point at those columns of the ubatch's rows. A
// token's keys: the view's cells holding earlier tokens (text index below
// the plan's first), in cell order, then the ubatch's own tokens up to
// itself. Writes the tokens' outputs (a.out) and fills log.
void RunLaneTile(const AttentionArgs& a, const AttentionScratch::Cut& cut,
                 AttentionScratch& scratch, int thread, int i0, int n, const LaneTileLog& log);

// Kv heads [h0, h1) of a lane as attention of their own (RunLaneTile's
// arguments): the lane's cells, those heads' columns of K/V, queries and
// outputs.
struct LaneHeads {
  KvLayerView view;
  AttentionArgs args;
  AttentionScratch::Cut cut;
  LaneHeads(const AttentionArgs& a, const AttentionScratch::Cut& c, const KvCells& cells, int lane, int h0, int h1)
      : view(*a.cache), args(a), cut(c) {
    const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
    const size_t kb = KvHeadBytes(view.types.k, hd), vb = KvHeadBytes(view.types.v, hd);
    view.index = cells.lane_index(lane);
    view.pos = cells.lane_pos(lane);
    view.n_cells = cells.hi(lane);
    view.k_off += h0 * kb, view.v_off += h0 * vb;
    if (view.k_offset != nullptr) view.k_offset += static_cast<size_t>(h0) * hd;
    if (view.k_center != nullptr) {
      view.k_center += static_cast<size_t>(h0) * hd;
      view.k_scale += static_cast<size_t>(h0) * hd;
    }
    args.cache = &view;
    args.n_head = (h1 - h0) * group, args.n_head_kv = h1 - h0;
    args.q = a.q + static_cast<size_t>(h0) * group * hd;
    args.out = a.out + static_cast<size_t>(h0) * group * hd;
    args.k = args.v = nullptr;  // the ubatch's own K/V: cut's chunks
    cut.tiled = true;
    cut.chunk_k += h0 * kb, cut.chunk_v += h0 * vb;
  }
  LaneHeads(const LaneHeads&) = delete;  // args.cache points at view
};

// Token i of a lane alone over its keys (cells, in that order), the layer's
// kv heads [k0, k1) by the one-token folds on one thread: writes their output
// rows and, when `weights` is not null, the keys' probabilities summed over
// those heads (buf's scores as scratch) (attention_lanes.cc).
void FoldLaneToken(const AttentionArgs& a, const AttentionScratch::Cut& cut, const KvPlan& plan,
                   int lane, const AttentionScratch::Thread& th,
                   AttentionScratch::LaneBuffers& buf, int i, const int32_t* keys, int n_keys,
                   int k0, int k1, float* weights);

// A lane's tokens that may evict, in tiles folded first and replayed through
// the hooks after (attention_lane_replay.cc). Per tile: Begin, then Fold of
// each piece (the layer's kv heads [k0, k1) of the lane, on any thread),
// then Replay on one thread.
class LaneReplay {
 public:
  // `limit`: a token whose keys evicted within the tile hold more than this
  // share of a head's probability is folded again alone.
  LaneReplay(const AttentionArgs& a, const AttentionScratch::Cut& cut, KvPlan& plan, int lane,
             float limit);
  struct Piece {
    int k0 = 0, k1 = 0;
    LaneTileLog log;  // want null, replay set, stride at least Begin's
  };
  // Tile [t0, t0 + nt): the lane's keys before its tokens are admitted.
  // Returns the keys a token of the tile may have (the logs' stride).
  size_t Begin(int t0, int nt);
  void Fold(AttentionScratch& scratch, int thread, const Piece& piece) const;
  // Each token's hooks in order, its output and weights corrected.
  void Replay(AttentionScratch& scratch, int thread, std::span<const Piece> pieces);

 private:
  const uint8_t* ValueOf(int32_t slot, int g) const;
  void Drop(int32_t c);
  void Track(int u);
  float* BlockFactors(const Piece& pc, int h);
  float& ExcludedMass(const Piece& pc, int h);
  void Correct(std::span<const Piece> pieces, int u);
  void Weights(std::span<const Piece> pieces, int u, int32_t n_slots);

  const AttentionArgs& a_;
  const AttentionScratch::Cut& cut_;
  KvPlan& plan_;
  KvCells& cells_;
  int lane_;
  float limit_;
  int t0_ = 0, nt_ = 0;
  int32_t n_base_ = 0;  // the occupied cells at the tile's start: its first keys
  int32_t used_ = 0;    // the lane's occupied cells when last tracked
  // Keys of the fold ("slots"): the n_base_ cells occupied at the tile's
  // start in cell order, then the tile's tokens.
  std::vector<int32_t> slot_cell_;     // [n_base_] the cell of each at the start
  std::vector<TextIndex> slot_index_;  // [n_base_ + nt_] each slot's text index
  std::vector<int32_t> slot_pos_;      // [n_base_ + nt_] and position
  std::vector<int32_t> cell_slot_;     // [cells] the slot a cell holds as last tracked, -1 none
  // The keys the current token sees, by slot (ascending), and their cells.
  std::vector<int32_t> vis_slot_, vis_cell_;
  std::vector<int32_t> excluded_;  // slots evicted since the tile began
  std::vector<float> factors_;     // [n_head, blocks] exp(m_block - m) / l
  std::vector<float> mass_;        // [n_head] excluded probability
  std::vector<float> dense_;       // [slots] the token's summed probabilities
  std::vector<float> weights_;     // [the token's keys]
  std::vector<float> value_, sums_;  // [head_dim], [group, head_dim]
};

// Per-lane policies: each lane of the layer token by token, through the
// policy's hooks (attention_lanes.cc).
void AttendLanes(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
               const AttentionScratch::Cut& cut);

}  // namespace rotor
