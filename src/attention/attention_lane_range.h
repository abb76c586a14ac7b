// Internal (attention_lanes.cc): per-lane policies' lanes token by token.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attention.h"
#include "attention/fold.h"

namespace rotor {

// Lanes [g0, g0 + nl) of a layer on one thread, token by token: their fold
// states, and the blocks of cells they fold. Neighbouring lanes that see the
// same keys in a block (every block while none has evicted; after, under
// cached RoPE, all but the blocks of each lane's new cell) fold it as one
// state of all their heads, as the full cache folds a block for every head,
// and a head's result is the same, bit for bit, as when its lane folds
// alone.
class LaneRange {
 public:
  LaneRange(const AttentionArgs& a, const AttentionScratch::Cut& cut, AttentionScratch& scratch,
            int thread, int g0, int nl);
  const attn::FoldState& state(int l) const { return st_[l]; }

  // Starts token i in lane l: no key seen.
  void Begin(int i, int l);

  // Folds the occupied cells of [c0, c1) (c0 a multiple of kBlock) into
  // token i's state in the lanes with active[l]. Lane l's cells are
  // appended to keys + l * stride from n_keys[l] on and, where want[l], its
  // scaled scores to scores + (l * q_heads + h) * stride alike.
  void Fold(const KvPlan& plan, int i, int32_t c0, int32_t c1, const uint8_t* active,
            const uint8_t* want, int32_t* keys, float* scores, size_t stride, int* n_keys);

 private:
  int lane(int l) const { return view_.first_lane + g0_ + l; }
  int Gather(const KvPlan& plan, int i, int l, int32_t b0, int32_t b1, int32_t* keys);
  void FoldLanes(int l, int e);

  const AttentionArgs& a_;
  const AttentionScratch::Cut& cut_;
  const KvLayerView& view_;
  const KvCells& cells_;
  const int g0_, nl_;
  const bool group_lanes_;
  AttentionScratch::Thread th_;
  int lane_heads_ = 0, q_heads_ = 0;
  size_t k_head_bytes_ = 0, v_head_bytes_ = 0;
  bool deferred_ = false;
  attn::KeyBlock block_;
  std::vector<attn::FoldState> st_;
  std::vector<uint8_t> q8_made_, qp_made_;  // lane l's q8 / qp made for this token
};

// Splits of a token's cells (AttendLanesSplit) when its lanes reach `hi`
// cells: one per split_cells, at most 16; 1 below two (split_cells 0: 1).
int LaneSplits(int32_t hi, int32_t split_cells);

// Every lane of the layer token by token, each token's cells cut into
// splits (LaneSplits) that fold every lane over their cells, as the full
// cache's splits do, so a thread reads whole rows (where lane ranges on
// several threads each read a slice of every row, and the cores' prefetchers
// fetch the other slices too: 110M h2o decode at depth 2048 ran at 0.6x of
// the full cache). Per token: every lane's BeforeToken, the splits, then per
// lane its splits' softmax states merged, its weights and AfterToken (and
// the next token's BeforeToken). One split gives the bits of a lane range.
// For ubatches none of whose lanes folds tokens in tiles.
void AttendLanesSplit(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan,
                      AttentionScratch& scratch, const AttentionScratch::Cut& cut);

}  // namespace rotor
