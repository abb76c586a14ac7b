// Internal: what the per-lane policies (h2o, snapkv, tova) share: one cell
// map per lane, tokens admitted to the lowest free cell token by token during
// attention, positions planned by text index (original) or by count (compact,
// renumbered by rank at Commit, re-rotating cached keys).
#pragma once

#include <algorithm>

#include "base/check.h"
#include "kv/kv_policy.h"
#include "kv/kv_quant.h"

namespace rotor {

// Compact positions renumber a lane's tokens at its evictions, one token at
// a time in decode: keys stored after RoPE are then re-rotated (and a block
// type's requantized) at every step, about half of each lane's keys for h2o
// and tova. That made their decode 1.25-2.6x slower than keys kept before
// RoPE, and the repeated rounding wrecked 4- and 5-bit keys for all three
// (stories260K, token by token: h2o q4_0 perplexity 397 against 3.95, snapkv
// 11.2 against 4.34; docs/EVALUATION.md, "Token by token"). So with compact
// positions, unless --rope-k is given, h2o and tova (all_types) keep keys
// before RoPE, and snapkv, which re-rotates only the few keys above its
// window's oldest, does for block-type keys. Their prefill where it evicts
// is slower that way (0.85-0.94x: BENCHMARKS.md, sixty-fourth session).
inline void DeferKeysWhenCompact(KvConfig& c, bool all_types) {
  if (c.Given(KvOpt::kRopeK) || c.positions != KvPositions::kCompact) return;
  if (all_types || KvTypeQuantized(c.types.k)) c.rope_k = RopeK::kDeferred;
}

class LanePolicy : public KvPolicy {
 public:
  LanePolicy(const KvShape& shape, const KvConfig& c, KvLanes lanes, int32_t n_cells)
      : lanes_(lanes),
        n_lanes_(lanes == KvLanes::kPerHead ? shape.n_layer * shape.n_head_kv : shape.n_layer),
        n_cells_(n_cells),
        size_(c.size),
        compact_(c.positions == KvPositions::kCompact) {}

  KvLanes lanes() const override { return lanes_; }
  int32_t n_cells() const override { return n_cells_; }

  // Positions of the new tokens: the text index, or with compact positions the
  // count of tokens held plus i (every lane holds the same count).
  void PlanPositions(const KvCells& cells, TextIndex n_seen, KvPlan* plan) const {
    const int64_t base = compact_ ? cells.max_used() : n_seen;
    for (int32_t i = 0; i < plan->n_tokens; ++i) plan->pos[i] = static_cast<int32_t>(base + i);
  }

  void Commit(KvCells& cells, KvPlan&) override {
    if (compact_)
      for (int lane = 0; lane < n_lanes_; ++lane) cells.RenumberByRank(lane);
  }

  // Scores include the dropped tokens' queries, or tokens are already
  // evicted: a policy that can honour a drop says so itself.
  Status CanDrop(const KvCells&, TextIndex, TextIndex from, TextIndex) const override {
    return Errorf(
        "kv: this policy cannot drop tokens from token {} on: its choices of what to "
        "keep depend on them",
        from);
  }
  Status CanShift(TextIndex, TextIndex, TextIndex) const override {
    return Status::Error(
        "kv: positions cannot be shifted under a policy that chooses tokens by "
        "attention (use full, sink or window)");
  }

 protected:
  // Token i of the ubatch takes the lane's lowest free cell.
  int32_t Admit(KvCells& cells, int lane, int i, KvPlan& plan) {
    const int32_t c = cells.FirstFree(lane);
    CHECK(c >= 0);
    cells.Set(lane, c, plan.first + i, plan.pos[i]);
    plan.LaneSlots(lane)[i] = c;
    return c;
  }
  void Evict(KvCells& cells, int lane, int32_t c, KvPlan& plan) {
    const TextIndex idx = cells.index(lane, c);
    if (idx >= plan.first) plan.LaneSlots(lane)[idx - plan.first] = -1;  // never written
    cells.Free(lane, c);
  }

  KvLanes lanes_;
  int n_lanes_;
  int32_t n_cells_;
  int32_t size_;
  bool compact_;
};

}  // namespace rotor
