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
  std::unique_ptr<KvPolicy> policy = FindKvPolicy(resolved.policy)->create(shape, resolved);
  return std::unique_ptr<KvCache>(new KvCache(shape, resolved, std::move(policy)));
}

namespace {

int LaneCount(KvLanes lanes, const KvShape& shape) {
  switch (lanes) {
    case KvLanes::kShared:
      return 1;
    case KvLanes::kPerLayer:
      return shape.n_layer;
    case KvLanes::kPerHead:
      return shape.n_layer * shape.n_head_kv;
  }
  return 1;
}

}  // namespace

KvCache::KvCache(const KvShape& shape, const KvConfig& config, std::unique_ptr<KvPolicy> policy)
    : shape_(shape),
      config_(config),
      policy_(std::move(policy)),
      n_cells_(policy_->n_cells()),
      elem_bytes_(KvTypeBytes(config.type)),
      cells_(
          LaneCount(policy_->lanes(), shape), n_cells_,
          config.rope_k == RopeK::kCached
              ? KvCells::Rotate([this](int lane, int32_t c, int32_t d) { RotateLane(lane, c, d); })
              : KvCells::Rotate()) {
  const size_t n = static_cast<size_t>(shape.n_layer) * n_cells_ * RowFloats() * elem_bytes_;
  k_.Resize(n);
  v_.Resize(n);
  // Touch the storage now: the cache is preallocated, its memory is paid up front.
  std::memset(k_.data(), 0, k_.bytes());
  std::memset(v_.data(), 0, v_.bytes());
  if (config.type != KvType::kF32) shift_row_.resize(RowFloats());
}

KvCache::~KvCache() = default;

void KvCache::Store(AlignedBuffer<uint8_t>& dst, size_t at, const float* src, size_t n) {
  if (config_.type == KvType::kF32)
    std::memcpy(dst.data() + at, src, n * sizeof(float));
  else
    ops::F32ToF16Row(src, reinterpret_cast<uint16_t*>(dst.data() + at), static_cast<int64_t>(n));
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

void KvCache::LaneHeads(int lane, int* layer_begin, int* layer_end, int* head, int* n_heads) const {
  switch (policy_->lanes()) {
    case KvLanes::kShared:
      *layer_begin = 0, *layer_end = shape_.n_layer, *head = 0, *n_heads = shape_.n_head_kv;
      return;
    case KvLanes::kPerLayer:
      *layer_begin = lane, *layer_end = lane + 1, *head = 0, *n_heads = shape_.n_head_kv;
      return;
    case KvLanes::kPerHead:
      *layer_begin = lane / shape_.n_head_kv, *layer_end = *layer_begin + 1;
      *head = lane % shape_.n_head_kv, *n_heads = 1;
      return;
  }
}

void KvCache::RotateLane(int lane, int32_t cell, int32_t delta) {
  int l0 = 0, l1 = 0, head = 0, n_heads = 0;
  LaneHeads(lane, &l0, &l1, &head, &n_heads);
  for (int l = l0; l < l1; ++l)
    ShiftKey(Offset(l, cell) + static_cast<size_t>(head) * shape_.head_dim * elem_bytes_, n_heads,
             delta);
}

std::vector<float> KvCache::CellK(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  if (config_.type == KvType::kF32)
    std::memcpy(out.data(), k_.data() + Offset(layer, cell), out.size() * 4);
  else
    ops::DequantizeRow(DType::kF16, k_.data() + Offset(layer, cell), out.data(), out.size());
  return out;
}

std::vector<float> KvCache::CellV(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  if (config_.type == KvType::kF32)
    std::memcpy(out.data(), v_.data() + Offset(layer, cell), out.size() * 4);
  else
    ops::DequantizeRow(DType::kF16, v_.data() + Offset(layer, cell), out.data(), out.size());
  return out;
}

size_t KvCache::memory_bytes() const {
  return k_.bytes() + v_.bytes() + cells_.bytes() + policy_->state_bytes();
}

int64_t KvCache::Remaining() const { return policy_->Remaining(cells_, n_seen_); }

Status KvCache::ExpectPrompt(int64_t n_tokens) {
  const int64_t remaining = Remaining();
  if (remaining >= 0 && n_tokens > remaining)
    return Errorf("kv: a prompt of {} tokens does not fit: the context has room for {} more",
                  n_tokens, remaining);
  return policy_->ExpectPrompt(cells_, n_seen_, n_tokens);
}

Status KvCache::Plan(int32_t n_tokens, KvPlan* plan) const {
  CHECK(n_tokens >= 0);
  plan->first = n_seen_;
  plan->n_tokens = n_tokens;
  plan->pos.resize(n_tokens);
  plan->sink_delta.assign(n_tokens, 0);
  plan->slot.assign(n_tokens, Slot{});
  plan->visibility = Visibility{};
  plan->pos_shift = 0;
  plan->hooks = nullptr;
  plan->lane_slot.clear();
  if (policy_->lanes() != KvLanes::kShared) {
    plan->hooks = policy_.get();
    plan->lane_slot.assign(static_cast<size_t>(cells_.n_lanes()) * n_tokens, -1);
  }
  return policy_->Plan(cells_, n_seen_, plan);
}

KvLayerView KvCache::View(int layer) {
  KvLayerView view;
  view.k = k_.data() + Offset(layer, 0);
  view.v = v_.data() + Offset(layer, 0);
  view.type = config_.type;
  view.row_bytes = RowFloats() * elem_bytes_;
  view.layer = layer;
  view.keep = KvPolicyUses(config_.policy, KvOpt::kKeep) ? config_.keep : 0;
  view.rope_k = config_.rope_k;
  switch (policy_->lanes()) {
    case KvLanes::kShared:
      view.index = cells_.lane_index(0);
      view.pos = cells_.lane_pos(0);
      view.n_cells = cells_.hi(0);
      return view;
    case KvLanes::kPerLayer:
      view.first_lane = layer, view.n_lanes = 1, view.lane_heads = shape_.n_head_kv;
      break;
    case KvLanes::kPerHead:
      view.first_lane = layer * shape_.n_head_kv, view.n_lanes = shape_.n_head_kv;
      view.lane_heads = 1;
      break;
  }
  view.cells = &cells_;
  view.n_cells = n_cells_;
  return view;
}

void KvCache::Write(int layer, const KvPlan& plan, const float* k, const float* v,
                    int64_t row_stride) {
  if (plan.hooks == nullptr) {
    const size_t row = RowFloats();
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      const Slot s = plan.slot[i];
      if (!s.valid()) continue;
      Store(k_, Offset(layer, s.v), k + i * row_stride, row);
      Store(v_, Offset(layer, s.v), v + i * row_stride, row);
    }
    return;
  }
  const KvLayerView view = View(layer);
  const int hd = shape_.head_dim;
  const size_t n = static_cast<size_t>(view.lane_heads) * hd;
  for (int g = 0; g < view.n_lanes; ++g) {
    const int32_t* slots =
        plan.lane_slot.data() + static_cast<size_t>(view.first_lane + g) * plan.n_tokens;
    const int64_t col = static_cast<int64_t>(g) * view.lane_heads * hd;
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      if (slots[i] < 0) continue;
      const size_t dst = Offset(layer, slots[i]) + col * elem_bytes_;
      Store(k_, dst, k + i * row_stride + col, n);
      Store(v_, dst, v + i * row_stride + col, n);
    }
  }
}

void KvCache::Commit(KvPlan& plan) {
  CHECK_EQ(plan.first, n_seen_);
  if (plan.hooks == nullptr) {
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      const Slot s = plan.slot[i];
      if (!s.valid()) continue;
      if (cells_.index(0, s.v) >= 0) cells_.Free(0, s.v);
      cells_.Set(0, s.v, plan.first + i, plan.pos[i]);
    }
  }
  n_seen_ += plan.n_tokens;
  policy_->Commit(cells_, plan);
}

void KvCache::Clear() {
  cells_.Clear();
  policy_->Clear();
  n_seen_ = 0;
}

// ---- Sequence operations.

Status KvCache::CheckRange(const char* op, TextIndex from, TextIndex to) const {
  if (from < 0 || to < from || to > n_seen_)
    return Errorf("kv: {}: range [{}, {}) is not within the {} tokens of the sequence", op, from,
                  to, n_seen_);
  return Status::Ok();
}

void KvCache::DropCells(TextIndex from, TextIndex to) {
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = cells_.hi(lane) - 1; c >= 0; --c) {
      const TextIndex idx = cells_.index(lane, c);
      if (idx >= from && idx < to) cells_.Free(lane, c);
    }
}

Status KvCache::KeepPrefix(TextIndex n) {
  RETURN_IF_ERROR(CheckRange("keep prefix", n, n_seen_));
  if (n == n_seen_) return Status::Ok();
  RETURN_IF_ERROR(policy_->CanDrop(cells_, n_seen_, n, n_seen_));
  DropCells(n, n_seen_);
  policy_->OnDrop(cells_, n_seen_, n, n_seen_);
  n_seen_ = n;
  return Status::Ok();
}

Status KvCache::RemoveRange(TextIndex from, TextIndex to) {
  RETURN_IF_ERROR(CheckRange("remove", from, to));
  if (to == n_seen_) return KeepPrefix(from);
  if (from == to) return Status::Ok();
  RETURN_IF_ERROR(policy_->CanDrop(cells_, n_seen_, from, to));
  DropCells(from, to);
  policy_->OnDrop(cells_, n_seen_, from, to);
  return Status::Ok();
}

Status KvCache::ShiftPositions(TextIndex from, TextIndex to, int32_t delta) {
  RETURN_IF_ERROR(CheckRange("shift", from, to));
  if (from == to || delta == 0) return Status::Ok();
  RETURN_IF_ERROR(policy_->CanShift(n_seen_, from, to));
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = 0; c < cells_.hi(lane); ++c) {
      const TextIndex idx = cells_.index(lane, c);
      if (idx < from || idx >= to) continue;
      if (static_cast<int64_t>(cells_.pos(lane, c)) + delta < 0)
        return Errorf("kv: shift: token {} at position {} would move below 0", idx,
                      cells_.pos(lane, c));
    }
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = 0; c < cells_.hi(lane); ++c) {
      const TextIndex idx = cells_.index(lane, c);
      if (idx >= from && idx < to) cells_.Move(lane, c, cells_.pos(lane, c) + delta);
    }
  policy_->OnShift(n_seen_, from, to, delta);
  return Status::Ok();
}

Result<std::unique_ptr<KvCache>> KvCache::Fork() const {
  std::unique_ptr<KvCache> copy(new KvCache(shape_, config_, policy_->Clone()));
  // Rows up to the highest occupied cell of any lane, layer by layer.
  const int32_t hi = cells_.max_hi();
  const size_t bytes = static_cast<size_t>(hi) * RowFloats() * elem_bytes_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(copy->k_.data() + Offset(l, 0), k_.data() + Offset(l, 0), bytes);
    std::memcpy(copy->v_.data() + Offset(l, 0), v_.data() + Offset(l, 0), bytes);
  }
  copy->n_seen_ = n_seen_;
  // The cell table, without re-rotating (the rows are copied as they are).
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = 0; c < cells_.hi(lane); ++c)
      if (cells_.index(lane, c) >= 0)
        copy->cells_.Set(lane, c, cells_.index(lane, c), cells_.pos(lane, c));
  return copy;
}

}  // namespace rotor
