#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "ops/quant.h"
#include "ops/rope.h"

namespace rotor {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvShape& shape, const KvConfig& config) {
  if (shape.n_layer <= 0 || shape.n_head_kv <= 0 || shape.head_dim <= 0)
    return Errorf("kv: bad cache shape: {} layers, {} kv heads, head dim {}", shape.n_layer,
                  shape.n_head_kv, shape.head_dim);
  ASSIGN_OR_RETURN(KvConfig resolved, ResolveKvConfig(config, shape));
  return std::unique_ptr<KvCache>(new KvCache(shape, resolved));
}

KvCache::KvCache(const KvShape& shape, const KvConfig& config) : shape_(shape), config_(config) {
  elem_bytes_ = KvTypeBytes(config.type);
  const size_t n = static_cast<size_t>(shape.n_layer) * config.size * RowFloats() * elem_bytes_;
  k_.Resize(n);
  v_.Resize(n);
  // Touch the storage now: the cache is preallocated, its memory is paid up front.
  std::memset(k_.data(), 0, k_.bytes());
  std::memset(v_.data(), 0, v_.bytes());
  if (config.policy == KvPolicy::kH2o) {
    n_lanes_ = shape.n_layer * shape.n_head_kv;
    mass_.assign(static_cast<size_t>(n_lanes_) * config.size, 0.f);
  }
  index_.assign(static_cast<size_t>(n_lanes_) * config.size, -1);
  pos_.assign(static_cast<size_t>(n_lanes_) * config.size, 0);
  if (config.type != KvType::kF32) shift_row_.resize(RowFloats());
}

void KvCache::Store(AlignedBuffer<uint8_t>& dst, size_t at, const float* src, size_t n) {
  if (config_.type == KvType::kF32) std::memcpy(dst.data() + at, src, n * sizeof(float));
  else ops::F32ToF16Row(src, reinterpret_cast<uint16_t*>(dst.data() + at), static_cast<int64_t>(n));
}

void KvCache::ShiftKey(size_t at, int n_heads, int32_t delta) {
  const ops::RopeConfig& rope = shape_.rope;
  if (config_.type == KvType::kF32) {
    ops::RopeShift(rope, reinterpret_cast<float*>(k_.data() + at), n_heads, delta);
    return;
  }
  // f16: rotate in f32 and round once more (as llama.cpp's K-shift does).
  const int64_t n = static_cast<int64_t>(n_heads) * shape_.head_dim;
  ops::DequantizeRow(DType::kF16, k_.data() + at, shift_row_.data(), n);
  ops::RopeShift(rope, shift_row_.data(), n_heads, delta);
  ops::F32ToF16Row(shift_row_.data(), reinterpret_cast<uint16_t*>(k_.data() + at), n);
}

std::vector<float> KvCache::CellK(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  if (config_.type == KvType::kF32) std::memcpy(out.data(), k_.data() + Offset(layer, cell), out.size() * 4);
  else ops::DequantizeRow(DType::kF16, k_.data() + Offset(layer, cell), out.data(), out.size());
  return out;
}

std::vector<float> KvCache::CellV(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  if (config_.type == KvType::kF32) std::memcpy(out.data(), v_.data() + Offset(layer, cell), out.size() * 4);
  else ops::DequantizeRow(DType::kF16, v_.data() + Offset(layer, cell), out.data(), out.size());
  return out;
}

size_t KvCache::memory_bytes() const {
  return k_.bytes() + v_.bytes() + index_.size() * sizeof(TextIndex) +
         pos_.size() * sizeof(int32_t) + mass_.size() * sizeof(float);
}

int64_t KvCache::Remaining() const {
  if (config_.policy == KvPolicy::kFull) return config_.size - n_seen_;
  return -1;
}

Status KvCache::Plan(int32_t n_tokens, KvPlan* plan) const {
  CHECK(n_tokens >= 0);
  plan->first = n_seen_;
  plan->n_tokens = n_tokens;
  plan->pos.resize(n_tokens);
  plan->sink_delta.assign(n_tokens, 0);
  plan->slot.resize(n_tokens);
  plan->visibility = Visibility{};
  plan->pos_shift = 0;
  plan->per_lane = false;
  switch (config_.policy) {
    case KvPolicy::kFull: return PlanFull(n_tokens, plan);
    case KvPolicy::kSink:
    case KvPolicy::kWindow: return PlanRing(n_tokens, plan);
    case KvPolicy::kH2o: return PlanH2o(n_tokens, plan);
  }
  return Errorf("kv: policy '{}' cannot plan", KvPolicyName(config_.policy));
}

KvLayerView KvCache::View(int layer) const {
  KvLayerView view;
  view.k = k_.data() + Offset(layer, 0);
  view.v = v_.data() + Offset(layer, 0);
  view.type = config_.type;
  view.row_bytes = RowFloats() * elem_bytes_;
  const size_t lane = n_lanes_ > 1 ? Lane(layer * shape_.n_head_kv) : 0;
  view.index = index_.data() + lane;
  view.pos = pos_.data() + lane;
  view.layer = layer;
  view.n_cells = hi_;
  view.keep = config_.keep;
  view.rope_k = config_.rope_k;
  return view;
}

void KvCache::Write(int layer, const KvPlan& plan, const float* k, const float* v,
                    int64_t row_stride) {
  if (plan.per_lane) return WriteLanes(layer, plan, k, v, row_stride);
  const size_t row = RowFloats();
  for (int32_t i = 0; i < plan.n_tokens; ++i) {
    const Slot s = plan.slot[i];
    if (!s.valid()) continue;
    Store(k_, Offset(layer, s.v), k + i * row_stride, row);
    Store(v_, Offset(layer, s.v), v + i * row_stride, row);
  }
}

void KvCache::Commit(KvPlan& plan) {
  CHECK_EQ(plan.first, n_seen_);
  if (plan.per_lane) return CommitLanes(plan);
  for (int32_t i = 0; i < plan.n_tokens; ++i) {
    const Slot s = plan.slot[i];
    if (!s.valid()) continue;
    if (index_[s.v] < 0) ++n_used_;
    index_[s.v] = plan.first + i;
    pos_[s.v] = plan.pos[i];
    hi_ = std::max(hi_, s.v + 1);
  }
  n_seen_ += plan.n_tokens;
  if (plan.pos_shift != 0) RenumberWindow(plan.pos_shift);
}

// Compact positions: every non-sink cell moves `shift` positions down. Keys
// stored after RoPE are re-rotated in place by the same delta, once.
void KvCache::RenumberWindow(int32_t shift) {
  const bool rotate = config_.rope_k == RopeK::kCached;
  for (int32_t c = 0; c < hi_; ++c) {
    if (index_[c] < config_.keep) continue;  // sinks (and empty cells, index -1)
    pos_[c] -= shift;
    if (!rotate) continue;
    for (int l = 0; l < shape_.n_layer; ++l)
      ShiftKey(Offset(l, c), shape_.n_head_kv, -shift);
  }
}

void KvCache::Clear() {
  std::fill(index_.begin(), index_.end(), -1);
  std::fill(mass_.begin(), mass_.end(), 0.f);
  n_used_ = 0;
  hi_ = 0;
  n_seen_ = 0;
}

}  // namespace rotor
