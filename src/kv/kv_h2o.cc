// h2o (heavy hitters + recent window), per lane = (layer, kv head): the cache
// keeps at most `size` tokens per lane: the `recent` most recent ones and the
// ones with the largest attention mass accumulated so far (summed over the
// query heads that share the kv head). Before each token attends, a full lane
// evicts its lowest-mass token outside the recent window (ties: the oldest).
// Attention (attention_h2o.cc) makes these decisions token by token inside a
// ubatch, in the plan's copy of the lane state; Write stores the admitted
// tokens' K/V and Commit swaps the lane state in.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "kv/kv_cache.h"
#include "ops/rope.h"

namespace rotor {

Status KvCache::PlanH2o(int32_t n_tokens, KvPlan* plan) const {
  const bool compact = config_.positions == KvPositions::kCompact;
  const int64_t used = std::min<int64_t>(n_seen_, config_.size);
  for (int32_t i = 0; i < n_tokens; ++i) {
    plan->pos[i] = static_cast<int32_t>(compact ? used + i : n_seen_ + i);
    plan->slot[i] = Slot{};
  }
  plan->per_lane = true;
  plan->n_lanes = n_lanes_;
  plan->lane_cells = config_.size;
  plan->recent = config_.recent;
  plan->lane_slot.assign(static_cast<size_t>(n_lanes_) * n_tokens, -1);
  plan->lane_index = index_;
  plan->lane_pos = pos_;
  plan->lane_mass = mass_;
  return Status::Ok();
}

void KvCache::WriteLanes(int layer, const KvPlan& plan, const float* k, const float* v,
                         int64_t row_stride) {
  const int hd = shape_.head_dim;
  for (int g = 0; g < shape_.n_head_kv; ++g) {
    const int32_t* slots = plan.lane_slot.data() +
                           static_cast<size_t>(layer * shape_.n_head_kv + g) * plan.n_tokens;
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      if (slots[i] < 0) continue;
      const size_t dst = Offset(layer, slots[i]) + static_cast<size_t>(g) * hd * elem_bytes_;
      Store(k_, dst, k + i * row_stride + g * hd, hd);
      Store(v_, dst, v + i * row_stride + g * hd, hd);
    }
  }
}

void KvCache::CommitLanes(KvPlan& plan) {
  index_.swap(plan.lane_index);
  pos_.swap(plan.lane_pos);
  mass_.swap(plan.lane_mass);
  n_seen_ += plan.n_tokens;
  n_used_ = 0;
  for (int32_t c = 0; c < config_.size; ++c) n_used_ += index_[c] >= 0 ? 1 : 0;
  hi_ = config_.size;
  for (; hi_ > 0; --hi_) {
    bool any = false;
    for (int lane = 0; lane < n_lanes_ && !any; ++lane) any = index_[Lane(lane) + hi_ - 1] >= 0;
    if (any) break;
  }
  if (config_.positions == KvPositions::kCompact) RenumberLanesByRank();
}

// Compact positions: each lane's tokens are renumbered 0..n-1 in text order;
// keys stored after RoPE are re-rotated by their own delta.
void KvCache::RenumberLanesByRank() {
  std::vector<int32_t> order(config_.size);
  const int hd = shape_.head_dim;
  for (int lane = 0; lane < n_lanes_; ++lane) {
    const TextIndex* index = index_.data() + Lane(lane);
    int32_t* pos = pos_.data() + Lane(lane);
    std::iota(order.begin(), order.end(), 0);
    auto end = std::remove_if(order.begin(), order.end(), [&](int32_t c) { return index[c] < 0; });
    std::sort(order.begin(), end, [&](int32_t a, int32_t b) { return index[a] < index[b]; });
    const int layer = lane / shape_.n_head_kv, g = lane % shape_.n_head_kv;
    for (auto it = order.begin(); it != end; ++it) {
      const int32_t c = *it, rank = static_cast<int32_t>(it - order.begin());
      if (pos[c] == rank) continue;
      if (config_.rope_k == RopeK::kCached)
        ShiftKey(Offset(layer, c) + static_cast<size_t>(g) * hd * elem_bytes_, 1, rank - pos[c]);
      pos[c] = rank;
    }
  }
}

}  // namespace rotor
