// Internal entry points of the attention module.
#pragma once

#include "attention/attention.h"
#include "attention/fold.h"
#include "base/cpu.h"

namespace rotor {

// A fold state over a thread's scratch for n_head query heads sharing
// n_head_kv kv heads, the layer's heads from first_kv_head on (q and the
// running state are set by the caller).
attn::FoldState MakeFoldState(const AttentionArgs& a, const AttentionScratch::Thread& th,
                              int n_head, int n_head_kv, int first_kv_head);

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
void SetRotation(const RopeDistanceTable& table, int64_t distance, attn::KeyBlock& block, int b,
                 float* far, int* far_used);

// Per-lane policies: each lane of the layer token by token, through the
// policy's hooks (attention_lanes.cc).
void AttendLanes(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
               const AttentionScratch::Cut& cut);

}  // namespace rotor
