// Per-lane policies' tokens that may evict, folded in tiles and replayed.
//
// Token by token, each token's BeforeToken may evict a key (h2o) and its
// AfterToken another (tova), so the next token's keys depend on this one's
// weights: such tokens were folded one at a time (AttendLanesSplit), 0.37-0.68x
// the speed of the full cache's tiles in a prompt (BENCHMARKS.md, sixty-third
// session). Here a tile of tokens is folded first over the lane's keys at its
// start plus its own tokens causally (RunLaneTile with LaneTileLog::replay),
// keeping each token's probabilities. Then the tokens are replayed in order
// through the hooks: after token i's BeforeToken, the keys it may not see
// (evicted since the tile began) are taken out of its softmax:
//
//   out' = (out - sum_e p_e v_e) / (1 - E),   w'_k = p_k / (1 - E),
//   E = sum_e p_e over the excluded keys e,
//
// p the tile's probabilities over all of its keys. Evicted keys carry little
// weight (that is why they were chosen); where a head's excluded mass passes
// LaneReplay's limit, the token is folded again alone over its own keys, as
// token by token.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/attention.h"
#include "attention/attention_internal.h"
#include "base/check.h"
#include "kv/kv_quant.h"

namespace rotor {

LaneReplay::LaneReplay(const AttentionArgs& a, const AttentionScratch::Cut& cut, KvPlan& plan,
                       int lane, float limit)
    : a_(a), cut_(cut), plan_(plan), cells_(*a.cache->cells), lane_(lane), limit_(limit) {}

size_t LaneReplay::Begin(int t0, int nt) {
  t0_ = t0, nt_ = nt;
  const int32_t hi = cells_.hi(lane_);
  const TextIndex* index = cells_.lane_index(lane_);
  const int32_t* pos = cells_.lane_pos(lane_);
  cell_slot_.assign(hi, -1);
  slot_cell_.clear();
  vis_slot_.clear(), vis_cell_.clear(), excluded_.clear();
  for (int32_t c = 0; c < hi; ++c)  // RunLaneTile's order: occupied cells, then the tile's own
    if (index[c] >= 0) {
      const int32_t slot = static_cast<int32_t>(slot_cell_.size());
      cell_slot_[c] = slot;
      slot_cell_.push_back(c);
      vis_slot_.push_back(slot), vis_cell_.push_back(c);
    }
  n_base_ = static_cast<int32_t>(slot_cell_.size());
  slot_index_.resize(n_base_ + nt), slot_pos_.resize(n_base_ + nt);
  for (int32_t s = 0; s < n_base_; ++s)
    slot_index_[s] = index[slot_cell_[s]], slot_pos_[s] = pos[slot_cell_[s]];
  for (int u = 0; u < nt; ++u)
    slot_index_[n_base_ + u] = plan_.first + t0 + u, slot_pos_[n_base_ + u] = plan_.pos[t0 + u];
  used_ = cells_.used(lane_);
  return static_cast<size_t>(n_base_) + nt;
}

void LaneReplay::Fold(AttentionScratch& scratch, int thread, const Piece& piece) const {
  const LaneHeads lh(a_, cut_, cells_, lane_, piece.k0, piece.k1);
  CHECK(piece.log.replay && piece.log.want == nullptr);
  CHECK(piece.log.stride >= static_cast<size_t>(n_base_) + nt_);
  RunLaneTile(lh.args, lh.cut, scratch, thread, t0_, nt_, piece.log);
}

// The V head of the layer's kv head g for the tile's key `slot`.
const uint8_t* LaneReplay::ValueOf(int32_t slot, int g) const {
  const KvLayerView& view = *a_.cache;
  const size_t col = static_cast<size_t>(g) * KvHeadBytes(view.types.v, a_.head_dim);
  const TextIndex j = slot_index_[slot] - plan_.first;  // a token of the ubatch: its own row
  if (j >= 0) return cut_.chunk_v + j * cut_.chunk_v_row_bytes + col;
  return static_cast<const uint8_t*>(view.VRow(slot_cell_[slot])) + col;
}

// The key in cell c (slot) left the lane: out of the visible keys, into the
// excluded ones.
void LaneReplay::Drop(int32_t c) {
  const int32_t slot = cell_slot_[c];
  CHECK(slot >= 0);
  const auto at = std::lower_bound(vis_slot_.begin(), vis_slot_.end(), slot);
  CHECK(at != vis_slot_.end() && *at == slot);
  vis_cell_.erase(vis_cell_.begin() + (at - vis_slot_.begin()));
  vis_slot_.erase(at);
  excluded_.push_back(slot);
  cell_slot_[c] = -1;
}

// After token u's BeforeToken: the lane's changes since the last token's
// keys (the hooks' evictions, and token u's admission), applied to the
// visible keys. By the hooks' contract (KvLaneHooks) those are all: cells
// are freed, and token u takes the cell plan.LaneSlots gives it. The usual
// case (an evicted cell taken again by the token) needs no look at the
// other cells; otherwise every cell is compared with what was known.
void LaneReplay::Track(int u) {
  const int i = t0_ + u;
  const int32_t now = cells_.used(lane_);
  const int32_t cell = plan_.LaneSlots(lane_)[i];  // token u's, or -1
  const TextIndex t = plan_.first + i;
  const int32_t hi = std::max(cells_.hi(lane_), cell + 1);
  if (hi > static_cast<int32_t>(cell_slot_.size())) cell_slot_.resize(hi, -1);
  const bool reused = cell >= 0 && cell_slot_[cell] >= 0;
  if (now == used_ - (reused ? 1 : 0) + (cell >= 0 ? 1 : 0)) {
    if (reused) Drop(cell);
  } else {  // compare every cell
    const TextIndex* index = cells_.lane_index(lane_);
    const int32_t* pos = cells_.lane_pos(lane_);
    for (int32_t c = 0; c < static_cast<int32_t>(cell_slot_.size()); ++c) {
      const TextIndex idx = c < cells_.hi(lane_) ? index[c] : -1;
      const int32_t known = cell_slot_[c];  // as last tracked
      if (known < 0 ? idx < 0 : idx == slot_index_[known] && pos[c] == slot_pos_[known]) continue;
      CHECK_MSG(idx < 0 || (c == cell && idx == t),
                "per-lane hooks changed a cell other than by freeing it or admitting the token");
      if (known >= 0) Drop(c);
    }
  }
  if (cell >= 0) {
    const int32_t slot = n_base_ + u;
    cell_slot_[cell] = slot;
    vis_slot_.push_back(slot), vis_cell_.push_back(cell);
  }
  used_ = now;
}

void LaneReplay::Replay(AttentionScratch& scratch, int thread, std::span<const Piece> pieces) {
  KvLaneHooks& hooks = *plan_.hooks;
  const int group = a_.n_head / a_.n_head_kv;
  AttentionScratch::LaneBuffers& counts = scratch.lanes(thread, 0, 1, 0);
  for (int u = 0; u < nt_; ++u) {
    const int i = t0_ + u;
    hooks.BeforeToken(cells_, lane_, i, plan_);
    const bool want = hooks.WantsWeights(cells_, lane_, i, plan_);
    Track(u);
    bool alone = false;
    const int32_t n_slots = n_base_ + u + 1;  // the keys the tile folded for this token
    const int blocks = (n_slots + attn::kBlock - 1) / attn::kBlock;
    // Each head's factor exp(m_block - m) / l per block, and its excluded mass.
    for (const Piece& pc : pieces) {
      const int qh = (pc.k1 - pc.k0) * group;
      const LaneTileLog& log = pc.log;
      for (int h = 0; h < qh && !alone; ++h) {
        const size_t row = static_cast<size_t>(u) * qh + h;
        const float inv = log.l[row] > 0.f ? 1.0f / log.l[row] : 0.f;
        float* f = BlockFactors(pc, h);
        for (int b = 0; b < blocks; ++b)
          f[b] = std::exp(log.mb[row * log.blocks + b] - log.m[row]) * inv;
        float e = 0.f;
        for (const int32_t s : excluded_) e += log.p[row * log.stride + s] * f[s / attn::kBlock];
        alone |= !(e <= limit_);
        ExcludedMass(pc, h) = e;
      }
    }
    ++counts.replayed;
    const int n_keys = static_cast<int>(vis_cell_.size());
    if (alone) {
      ++counts.alone;
      const int k0 = pieces.front().k0, k1 = pieces.back().k1;
      AttentionScratch::LaneBuffers& buf =
          scratch.lanes(thread, static_cast<size_t>(cells_.hi(lane_)), 1, (k1 - k0) * group);
      weights_.resize(vis_cell_.size());
      FoldLaneToken(a_, cut_, plan_, lane_, scratch.thread(thread), buf, i, vis_cell_.data(),
                    static_cast<int>(vis_cell_.size()), k0, k1, want ? weights_.data() : nullptr);
    } else {
      if (!excluded_.empty()) ++counts.corrected;
      Correct(pieces, u);
      if (want) Weights(pieces, u, n_slots);
    }
    hooks.AfterToken(cells_, lane_, i, std::span<const int32_t>(vis_cell_.data(), n_keys),
                     std::span<const float>(weights_.data(), want ? n_keys : 0), plan_);
  }
}

float* LaneReplay::BlockFactors(const Piece& pc, int h) {
  const size_t blocks = pc.log.blocks;
  const size_t at = (static_cast<size_t>(pc.k0) * (a_.n_head / a_.n_head_kv) + h) * blocks;
  if (factors_.size() < at + blocks) factors_.resize(at + blocks);
  return factors_.data() + at;
}

float& LaneReplay::ExcludedMass(const Piece& pc, int h) {
  const size_t at = static_cast<size_t>(pc.k0) * (a_.n_head / a_.n_head_kv) + h;
  if (mass_.size() <= at) mass_.resize(at + 1);
  return mass_[at];
}

// Token u's output rows without its excluded keys: out' = (out - sum_e p_e
// v_e) / (1 - E) per head.
void LaneReplay::Correct(std::span<const Piece> pieces, int u) {
  if (excluded_.empty()) return;
  const KvLayerView& view = *a_.cache;
  const int hd = a_.head_dim, group = a_.n_head / a_.n_head_kv;
  const int i = t0_ + u;
  value_.resize(hd);
  sums_.resize(static_cast<size_t>(group) * hd);
  for (const Piece& pc : pieces) {
    const int qh = (pc.k1 - pc.k0) * group;
    const LaneTileLog& log = pc.log;
    for (int g = pc.k0; g < pc.k1; ++g) {
      std::fill(sums_.begin(), sums_.end(), 0.f);  // [group, head_dim] sum_e p_e v_e
      for (int32_t s : excluded_) {
        KvDequantizeHeads(view.types.v, hd, 1, ValueOf(s, g), value_.data());
        for (int r = 0; r < group; ++r) {
          const int h = (g - pc.k0) * group + r;
          const size_t row = static_cast<size_t>(u) * qh + h;
          const float pe = log.p[row * log.stride + s] * BlockFactors(pc, h)[s / attn::kBlock];
          float* sum = sums_.data() + static_cast<size_t>(r) * hd;
          for (int d = 0; d < hd; ++d) sum[d] += pe * value_[d];
        }
      }
      for (int r = 0; r < group; ++r) {
        const int h = (g - pc.k0) * group + r;
        const float e = ExcludedMass(pc, h);
        const float keep = 1.f - e > 0.f ? 1.0f / (1.f - e) : 0.f;
        float* out = a_.out + i * a_.out_stride + (static_cast<int64_t>(g) * group + r) * hd;
        const float* sum = sums_.data() + static_cast<size_t>(r) * hd;
        for (int d = 0; d < hd; ++d) out[d] = (out[d] - sum[d]) * keep;
      }
    }
  }
}

// Token u's probabilities of its keys (its first n_slots keys of the fold,
// those it sees), summed over the lane's heads.
void LaneReplay::Weights(std::span<const Piece> pieces, int u, int32_t n_slots) {
  const int group = a_.n_head / a_.n_head_kv;
  dense_.assign(n_slots, 0.f);  // [n_slots] by key of the fold
  for (const Piece& pc : pieces) {
    const int qh = (pc.k1 - pc.k0) * group;
    const LaneTileLog& log = pc.log;
    for (int h = 0; h < qh; ++h) {
      const size_t row = static_cast<size_t>(u) * qh + h;
      const float e = ExcludedMass(pc, h);
      const float keep = 1.f - e > 0.f ? 1.0f / (1.f - e) : 0.f;
      const float* p = log.p + row * log.stride;
      const float* f = BlockFactors(pc, h);
      for (int32_t s0 = 0; s0 < n_slots; s0 += attn::kBlock) {
        const float x = f[s0 / attn::kBlock] * keep;
        const int32_t s1 = std::min(n_slots, s0 + attn::kBlock);
        for (int32_t s = s0; s < s1; ++s) dense_[s] += p[s] * x;
      }
    }
  }
  weights_.resize(vis_slot_.size());
  for (size_t k = 0; k < vis_slot_.size(); ++k) weights_[k] = dense_[vis_slot_[k]];
}

}  // namespace rotor
