#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace rotor {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvShape& shape, const KvConfig& config) {
  if (shape.n_layer <= 0 || shape.n_head_kv <= 0 || shape.head_dim <= 0)
    return Errorf("kv: bad cache shape: {} layers, {} kv heads, head dim {}", shape.n_layer,
                  shape.n_head_kv, shape.head_dim);
  ASSIGN_OR_RETURN(KvConfig resolved, ResolveKvConfig(config, shape));
  if (resolved.policy != KvPolicy::kFull)
    return Errorf("kv: policy '{}' is not available in this build", KvPolicyName(resolved.policy));
  return std::unique_ptr<KvCache>(new KvCache(shape, resolved));
}

KvCache::KvCache(const KvShape& shape, const KvConfig& config) : shape_(shape), config_(config) {
  size_t n = static_cast<size_t>(shape.n_layer) * shape.n_head_kv * config.size * shape.head_dim;
  k_.Resize(n);
  v_.Resize(n);
  // Touch the storage now: the cache is preallocated, its memory is paid up front.
  std::memset(k_.data(), 0, k_.bytes());
  std::memset(v_.data(), 0, v_.bytes());
  index_.assign(config.size, -1);
  pos_.assign(config.size, 0);
}

int64_t KvCache::Remaining() const {
  if (config_.policy == KvPolicy::kFull) return config_.size - n_seen_;
  return -1;
}

Status KvCache::Plan(int32_t n_tokens, KvPlan* plan) const {
  CHECK(n_tokens >= 0);
  if (config_.policy == KvPolicy::kFull && n_seen_ + n_tokens > config_.size)
    return Errorf("kv: context full: {} tokens in the cache + {} new > context size {}", n_seen_,
                  n_tokens, config_.size);
  plan->first = n_seen_;
  plan->n_tokens = n_tokens;
  plan->pos.resize(n_tokens);
  plan->slot.resize(n_tokens);
  plan->visibility = Visibility{};
  for (int32_t i = 0; i < n_tokens; ++i) {
    plan->pos[i] = static_cast<int32_t>(n_seen_ + i);
    plan->slot[i] = Slot{static_cast<int32_t>(n_seen_ + i)};
  }
  return Status::Ok();
}

KvLayerView KvCache::View(int layer) const {
  KvLayerView view;
  view.k = k_.data() + LayerHeadOffset(layer, 0);
  view.v = v_.data() + LayerHeadOffset(layer, 0);
  view.index = index_.data();
  view.pos = pos_.data();
  view.n_cells = hi_;
  view.cell_stride = config_.size;
  view.head_dim = shape_.head_dim;
  return view;
}

void KvCache::Write(int layer, const KvPlan& plan, const float* k, const float* v,
                    int64_t row_stride) {
  const int hd = shape_.head_dim;
  for (int32_t i = 0; i < plan.n_tokens; ++i) {
    Slot s = plan.slot[i];
    if (!s.valid()) continue;
    for (int h = 0; h < shape_.n_head_kv; ++h) {
      std::memcpy(KData(layer, h) + static_cast<size_t>(s.v) * hd, k + i * row_stride + h * hd,
                  hd * sizeof(float));
      std::memcpy(VData(layer, h) + static_cast<size_t>(s.v) * hd, v + i * row_stride + h * hd,
                  hd * sizeof(float));
    }
  }
}

void KvCache::Commit(const KvPlan& plan) {
  CHECK_EQ(plan.first, n_seen_);
  for (int32_t i = 0; i < plan.n_tokens; ++i) {
    Slot s = plan.slot[i];
    if (!s.valid()) continue;
    if (index_[s.v] < 0) ++n_used_;
    index_[s.v] = plan.first + i;
    pos_[s.v] = plan.pos[i];
    hi_ = std::max(hi_, s.v + 1);
  }
  n_seen_ += plan.n_tokens;
}

void KvCache::Clear() {
  std::fill(index_.begin(), index_.end(), -1);
  n_used_ = 0;
  hi_ = 0;
  n_seen_ = 0;
}

}  // namespace rotor
