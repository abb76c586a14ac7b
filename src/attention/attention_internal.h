// Internal entry points of the attention module.
#pragma once

#include "attention/attention.h"
#include "attention/fold.h"

namespace rotor {

// A fold state over a thread's scratch for n_head query heads sharing
// n_head_kv kv heads (q and the running state are set by the caller).
attn::FoldState MakeFoldState(const AttentionArgs& a, const AttentionScratch::Thread& th,
                              int n_head, int n_head_kv);

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
