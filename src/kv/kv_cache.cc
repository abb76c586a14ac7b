#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kv/kv_key_offsets.h"
#include "kv/kv_quant.h"
#include "ops/quant.h"
#include "ops/rope.h"

namespace rotor {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvShape& shape, const KvConfig& config,
                                                 KvBlockPool* pool) {
  if (shape.n_layer <= 0 || shape.n_head_kv <= 0 || shape.head_dim <= 0)
    return Errorf("kv: bad cache shape: {} layers, {} kv heads, head dim {}", shape.n_layer,
                  shape.n_head_kv, shape.head_dim);
  ASSIGN_OR_RETURN(KvConfig resolved, ResolveKvConfig(config, shape));
  std::shared_ptr<KvBlockPool> own;
  if (pool == nullptr) {
    own = std::make_shared<KvBlockPool>(shape, KvPoolOptions{});
    pool = own.get();
  }
  const KvShape& ps = pool->shape();
  if (ps.n_layer != shape.n_layer || ps.n_head_kv != shape.n_head_kv ||
      ps.head_dim != shape.head_dim)
    return Errorf("kv: the block pool is for {} layers x {} kv heads x {}, not {} x {} x {}",
                  ps.n_layer, ps.n_head_kv, ps.head_dim, shape.n_layer, shape.n_head_kv,
                  shape.head_dim);
  std::unique_ptr<KvPolicy> policy = FindKvPolicy(resolved.policy)->create(shape, resolved);
  if (resolved.k_offset) shape.k_offsets->Layer(0);  // the model's calibration, once, now
  return std::unique_ptr<KvCache>(
      new KvCache(shape, resolved, std::move(policy), pool, std::move(own)));
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

int Log2(int32_t v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

}  // namespace

KvCache::KvCache(const KvShape& shape, const KvConfig& config, std::unique_ptr<KvPolicy> policy,
                 KvBlockPool* pool, std::shared_ptr<KvBlockPool> own_pool)
    : shape_(shape),
      config_(config),
      policy_(std::move(policy)),
      own_pool_(std::move(own_pool)),
      pool_(pool),
      n_cells_(policy_->n_cells()),
      k_head_bytes_(KvHeadBytes(config.types.k, shape.head_dim)),
      v_head_bytes_(KvHeadBytes(config.types.v, shape.head_dim)),
      block_shift_(Log2(pool->block_cells())),
      block_mask_(pool->block_cells() - 1),
      section_bytes_(pool->SectionBytes(config.types)),
      table_((n_cells_ + pool->block_cells() - 1) / pool->block_cells(), -1),
      block_data_(table_.size(), nullptr),
      cells_(
          LaneCount(policy_->lanes(), shape), n_cells_,
          config.rope_k == RopeK::kCached
              ? KvCells::Rotate(
                    [this](int lane, int32_t c, int32_t d) { RotateLane(lane, c, d, shift_[0]); })
              : KvCells::Rotate()),
      publish_(policy_->SharesPrefix()),
      root_(PrefixRoot(PrefixSeed{pool->model_id(), config.types, config.rotate, config.rope_k,
                                  config.k_offset})) {
  shift_.resize(1);
  shift_[0].row.resize(RowFloats());
  shift_[0].store.resize(RowFloats());
  store_row_.resize(RowFloats());
  if (policy_->lanes() != KvLanes::kShared)
    cells_.set_move_data([this](int lane, int32_t from, int32_t to) { MoveLaneCell(lane, from, to); });
}

KvCache::~KvCache() {
  for (int32_t b = 0; b < static_cast<int32_t>(table_.size()); ++b) ReleaseBlock(b);
  if (reserved_ > 0) pool_->Unreserve(config_.types, reserved_);
}

const float* KvCache::KeyOffset(int layer, int head) const {
  if (!config_.k_offset || config_.rope_k != RopeK::kCached) return nullptr;
  return shape_.k_offsets->Layer(layer) + static_cast<size_t>(head) * shape_.head_dim;
}

const float* KvCache::KeyCenter(int layer, int head) const {
  if (!config_.k_offset || config_.rope_k != RopeK::kDeferred) return nullptr;
  return shape_.k_offsets->Center(layer) + static_cast<size_t>(head) * shape_.head_dim;
}

const float* KvCache::KeyScale(int layer, int head) const {
  if (!config_.k_offset || config_.rope_k != RopeK::kDeferred) return nullptr;
  return shape_.k_offsets->Scale(layer) + static_cast<size_t>(head) * shape_.head_dim;
}

void KvCache::Store(bool is_v, int layer, int head, uint8_t* dst, const float* src, int n_heads,
                    KvRounding rounding, float* scratch) {
  float* row = scratch != nullptr ? scratch : store_row_.data();
  const KvType t = is_v ? config_.types.v : config_.types.k;
  const int hd = shape_.head_dim;
  const int64_t n = static_cast<int64_t>(n_heads) * hd;
  const float* m = is_v ? nullptr : KeyOffset(layer, head);
  if (m != nullptr) {
    for (int64_t i = 0; i < n; ++i) row[i] = src[i] - m[i];
    src = row;
  }
  if (const float* c = is_v ? nullptr : KeyCenter(layer, head)) {
    KvCenterKeys(src, c, KeyScale(layer, head), n, row);
    src = row;
  }
  if (is_v ? config_.rotate : RotateK()) {
    if (src != row) std::copy(src, src + n, row);
    KvHadamard(row, n, KvQuantBlock(hd));
    src = row;
  }
  if (t == KvType::kF16)
    ops::F32ToF16Row(src, reinterpret_cast<uint16_t*>(dst), static_cast<int64_t>(n_heads) * hd);
  else
    KvQuantizeHeads(t, hd, n_heads, src, dst, rounding);
}

void KvCache::Load(bool is_v, int layer, int head, const uint8_t* src, float* dst,
                   int n_heads) const {
  const int hd = shape_.head_dim;
  const int64_t n = static_cast<int64_t>(n_heads) * hd;
  KvDequantizeHeads(is_v ? config_.types.v : config_.types.k, hd, n_heads, src, dst);
  if (is_v ? config_.rotate : RotateK()) KvHadamard(dst, n, KvQuantBlock(hd));
  if (const float* m = is_v ? nullptr : KeyOffset(layer, head))
    for (int64_t i = 0; i < n; ++i) dst[i] += m[i];
  if (const float* c = is_v ? nullptr : KeyCenter(layer, head)) {
    const float* sc = KeyScale(layer, head);
    for (int64_t i = 0; i < n; ++i) dst[i] = c[i] + sc[i] * dst[i];
  }
}

void KvCache::ShiftKey(int layer, int head, uint8_t* at, int n_heads, int32_t delta,
                       ShiftScratch& s) {
  const ops::RopeConfig& rope = shape_.rope;
  // The rotation's angles, made once per delta (ops::RopeShift's, which
  // computes them at every call: compact positions shift about half a
  // lane's keys by the same delta at every eviction).
  if (s.cos.empty() || delta != s.delta) {
    s.cos.resize(rope.n_rot / 2);
    s.sin.resize(rope.n_rot / 2);
    ops::RopeAngles(rope, &delta, 1, s.cos.data(), s.sin.data());
    s.delta = delta;
  }
  const auto shift = [&](float* x) {
    ops::RopeWithAngles(rope, s.cos.data(), s.sin.data(), x, 1, n_heads);
  };
  if (config_.types.k == KvType::kF32 && !RotateK() && !config_.k_offset) {
    shift(reinterpret_cast<float*>(at));
    return;
  }
  // Another type: back to f32 (and unrotated), RoPE-shifted, stored again
  // (rounded or requantized once more, as llama.cpp's K-shift does).
  // Keys re-rotated at every eviction are rounded as GGML does: the
  // least-squares search (KvRounding) on every kept key per eviction halved
  // sink-compact q4_0 decode (BENCHMARKS.md, twenty-third session).
  Load(false, layer, head, at, s.row.data(), n_heads);
  shift(s.row.data());
  Store(false, layer, head, at, s.row.data(), n_heads, KvRounding::kGgml, s.store.data());
}

void KvCache::ApplyRotations(std::span<const KvCells::Rotation> rotations, ThreadPool& pool) {
  // Each lane's rotations in their order (a cell's key may turn twice),
  // the lanes' apart: their keys are separate bytes.
  std::vector<int32_t> start(cells_.n_lanes() + 1, 0), order(rotations.size());
  for (const KvCells::Rotation& r : rotations) ++start[r.lane + 1];
  for (int l = 0; l < cells_.n_lanes(); ++l) start[l + 1] += start[l];
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (size_t i = 0; i < rotations.size(); ++i) order[next[rotations[i].lane]++] = static_cast<int32_t>(i);
  std::vector<int> lanes;  // lanes with rotations
  for (int l = 0; l < cells_.n_lanes(); ++l)
    if (start[l + 1] > start[l]) lanes.push_back(l);
  while (static_cast<int>(shift_.size()) < pool.size()) {
    shift_.emplace_back();
    shift_.back().row.resize(RowFloats());
    shift_.back().store.resize(RowFloats());
  }
  pool.Run(static_cast<int>(lanes.size()), [&](int task, int thread) {
    const int l = lanes[task];
    for (int32_t i = start[l]; i < start[l + 1]; ++i) {
      const KvCells::Rotation& r = rotations[order[i]];
      RotateLane(r.lane, r.cell, r.delta, shift_[thread]);
    }
  });
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

void KvCache::MoveLaneCell(int lane, int32_t from, int32_t to) {
  int l0 = 0, l1 = 0, head = 0, n_heads = 0;
  LaneHeads(lane, &l0, &l1, &head, &n_heads);
  const BlockId b = table_[to >> block_shift_];
  CHECK(b >= 0 && pool_->refs(b) == 1 && !pool_->published(b));  // MakeWritable first
  const size_t kb = static_cast<size_t>(head) * k_head_bytes_, vb = static_cast<size_t>(head) * v_head_bytes_;
  for (int l = l0; l < l1; ++l) {
    std::memcpy(KRow(l, to) + kb, KRow(l, from) + kb, n_heads * k_head_bytes_);
    std::memcpy(VRow(l, to) + vb, VRow(l, from) + vb, n_heads * v_head_bytes_);
  }
}

void KvCache::RotateLane(int lane, int32_t cell, int32_t delta, ShiftScratch& s) {
  int l0 = 0, l1 = 0, head = 0, n_heads = 0;
  LaneHeads(lane, &l0, &l1, &head, &n_heads);
  const BlockId b = table_[cell >> block_shift_];
  CHECK(b >= 0 && pool_->refs(b) == 1 && !pool_->published(b));  // MakeWritable first
  for (int l = l0; l < l1; ++l)
    ShiftKey(l, head, KRow(l, cell) + static_cast<size_t>(head) * k_head_bytes_, n_heads, delta,
             s);
}

std::vector<float> KvCache::CellK(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  Load(false, layer, 0, KRow(layer, cell), out.data(), shape_.n_head_kv);
  return out;
}

std::vector<float> KvCache::CellV(int layer, int32_t cell) const {
  std::vector<float> out(RowFloats());
  Load(true, layer, 0, VRow(layer, cell), out.data(), shape_.n_head_kv);
  return out;
}

size_t KvCache::memory_bytes() const {
  return table_.size() * pool_->BlockBytes(config_.types) + cells_.bytes() + policy_->state_bytes();
}

int64_t KvCache::n_blocks_held() const {
  return std::count_if(table_.begin(), table_.end(), [](BlockId b) { return b >= 0; });
}

size_t KvCache::held_bytes() const {
  return static_cast<size_t>(n_blocks_held()) * pool_->BlockBytes(config_.types);
}

// ---- Blocks.

bool KvCache::NeedsBlock(int32_t b) const { return table_[b] < 0 || pool_->refs(table_[b]) > 1; }

void KvCache::MakeWritable(int32_t b, int64_t spare) {
  const BlockId old = table_[b];
  if (old >= 0 && pool_->refs(old) == 1) {
    if (!pool_->published(old)) return;
    // Ours alone but published: a copy keeps the cached prefix for later
    // requests when a block is spare; else it stops promising its tokens.
    if (spare <= 0) return pool_->Unpublish(old);
  }
  const BlockId fresh = pool_->Take(config_.types, reserved_ > 0);
  if (reserved_ > 0) --reserved_;
  if (old >= 0) {
    pool_->CopyBlock(fresh, old);
    pool_->Unref(old);
    ++pool_->mutable_stats().cow_copies;
  }
  table_[b] = fresh;
  block_data_[b] = pool_->data(fresh);
}

void KvCache::MakeWritable(std::span<const int32_t> blocks) {
  int64_t need = 0;  // blocks still to take that must be taken
  for (int32_t b : blocks) need += NeedsBlock(b) ? 1 : 0;
  for (int32_t b : blocks) {
    if (NeedsBlock(b)) --need;
    MakeWritable(b, pool_->Available(config_.types) + reserved_ - need);
  }
}

Status KvCache::MakeAllWritable() {
  int64_t need = 0;
  std::vector<int32_t> held;
  for (int32_t b = 0; b < static_cast<int32_t>(table_.size()); ++b) {
    if (table_[b] < 0) continue;
    held.push_back(b);
    need += NeedsBlock(b) ? 1 : 0;
  }
  if (need > pool_->Available(config_.types) + reserved_)
    return Errorf("kv: the KV memory budget has no room for the {} block copies this needs", need);
  MakeWritable(held);
  return Status::Ok();
}

void KvCache::ReleaseBlock(int32_t b) {
  if (table_[b] < 0) return;
  pool_->Unref(table_[b]);
  table_[b] = -1;
  block_data_[b] = nullptr;
}

void KvCache::ReleaseEmptyBlocks() {
  const int32_t bc = pool_->block_cells();
  for (int32_t b = 0; b < static_cast<int32_t>(table_.size()); ++b) {
    if (table_[b] < 0) continue;
    bool occupied = false;
    const int32_t c1 = std::min(n_cells_, (b + 1) * bc);
    for (int lane = 0; lane < cells_.n_lanes() && !occupied; ++lane)
      for (int32_t c = b * bc; c < c1 && !occupied; ++c) occupied = cells_.index(lane, c) >= 0;
    if (!occupied) ReleaseBlock(b);
  }
}

int64_t KvCache::BlocksFor(int32_t n_tokens) const {
  if (!Plan(n_tokens, &probe_).ok()) return 0;
  return Unreserved(probe_);
}

int64_t KvCache::BlocksToFill() const {
  int64_t n = 0;
  for (BlockId b : table_) n += b < 0 || pool_->refs(b) > 1 || pool_->published(b) ? 1 : 0;
  return n;
}

bool KvCache::ReserveAll() {
  const int64_t n = BlocksToFill() - reserved_;
  if (n > 0 && !pool_->Reserve(config_.types, n)) return false;
  if (n > 0) reserved_ += n;
  bounded_ = true;
  return true;
}

void KvCache::Rebalance() {
  if (!bounded_) return;
  const int64_t excess = reserved_ - BlocksToFill();
  if (excess <= 0) return;
  pool_->Unreserve(config_.types, excess);
  reserved_ -= excess;
}

Status KvCache::Prepare(const KvPlan& plan) {
  if (Unreserved(plan) > pool_->Available(config_.types))
    return Errorf("kv: the KV memory budget ({} MiB) has no room for {} more blocks of {} tokens",
                  pool_->budget_bytes() >> 20, plan.n_new_blocks, pool_->block_cells());
  MakeWritable(plan.writes);
  Rebalance();
  return Status::Ok();
}

void KvCache::PublishFull() {
  const int32_t bc = pool_->block_cells();
  while (publish_) {
    const int32_t b = static_cast<int32_t>(chain_.size());
    const TextIndex end = static_cast<TextIndex>(b + 1) * bc;
    if (end > n_seen_ || end > n_cells_) return;
    // The block must hold tokens [b * bc, end) at their own positions.
    for (int32_t c = b * bc; c < end; ++c)
      if (cells_.index(0, c) != c || cells_.pos(0, c) != c) {
        publish_ = false;
        text_.clear();
        return;
      }
    const uint64_t parent = b == 0 ? root_ : chain_.back();
    const std::span<const int32_t> tokens(text_.data() + static_cast<size_t>(b) * bc, bc);
    const BlockId id = table_[b];
    if (!pool_->published(id)) {
      // A bounded cache first sets aside the copy a shared block may need.
      if (bounded_ && !pool_->Reserve(config_.types, 1)) {
        publish_ = false;
        text_.clear();
        return;
      }
      if (pool_->Publish(id, parent, tokens))
        reserved_ += bounded_ ? 1 : 0;
      else if (bounded_)
        pool_->Unreserve(config_.types, 1);
    }
    chain_.push_back(PrefixHash(parent, tokens));
  }
}

int64_t KvCache::AttachPrefix(std::span<const int32_t> text, int64_t max_tokens) {
  CHECK_EQ(n_seen_, 0);
  KvBlockPool::Stats& stats = pool_->mutable_stats();
  stats.query_tokens += static_cast<int64_t>(text.size());
  if (!publish_) return 0;
  const int32_t bc = pool_->block_cells();
  max_tokens = std::min<int64_t>({max_tokens, static_cast<int64_t>(text.size()), n_cells_});
  int32_t n_blocks = 0;
  uint64_t parent = root_;
  while (static_cast<int64_t>(n_blocks + 1) * bc <= max_tokens) {
    const std::span<const int32_t> tokens = text.subspan(static_cast<size_t>(n_blocks) * bc, bc);
    const BlockId id = pool_->Lookup(parent, tokens);
    if (id < 0 || pool_->type(id) != config_.types) break;
    pool_->Ref(id);
    table_[n_blocks] = id;
    block_data_[n_blocks] = pool_->data(id);
    parent = PrefixHash(parent, tokens);
    chain_.push_back(parent);
    ++n_blocks;
  }
  const int64_t n = static_cast<int64_t>(n_blocks) * bc;
  for (int32_t c = 0; c < n; ++c) cells_.Set(0, c, c, c);
  text_.assign(text.begin(), text.begin() + n);
  n_seen_ = n;
  policy_->OnAdopt(cells_, n);
  stats.hit_tokens += n;
  return n;
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
  plan->writes.clear();
  plan->n_new_blocks = 0;
  plan->tokens = {};
  if (policy_->lanes() != KvLanes::kShared) {
    plan->hooks = policy_.get();
    plan->lane_slot.assign(static_cast<size_t>(cells_.n_lanes()) * n_tokens, -1);
  }
  RETURN_IF_ERROR(policy_->Plan(cells_, n_seen_, plan));
  // The blocks the ubatch writes: its slots' (shared lanes); for per-lane
  // policies every block a lane may admit to (a lane's highest cell grows by
  // at most one per token); all of them when Commit re-rotates cached keys.
  const int32_t n_blocks = static_cast<int32_t>(table_.size());
  std::vector<int32_t>& w = plan->writes;
  if (plan->hooks != nullptr) {
    const int64_t hi = std::min<int64_t>(n_cells_, int64_t{cells_.max_hi()} + n_tokens);
    for (int32_t b = 0; b < n_blocks && (int64_t{b} << block_shift_) < hi; ++b) w.push_back(b);
  } else if (plan->pos_shift != 0 && config_.rope_k == RopeK::kCached) {
    for (int32_t b = 0; b < n_blocks; ++b)
      if (table_[b] >= 0) w.push_back(b);
  }
  for (const Slot s : plan->slot)
    if (s.valid() && (w.empty() || w.back() != (s.v >> block_shift_)))
      w.push_back(s.v >> block_shift_);
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  for (int32_t b : w) plan->n_new_blocks += NeedsBlock(b) ? 1 : 0;
  return Status::Ok();
}

KvLayerView KvCache::View(int layer) {
  KvLayerView view;
  view.blocks = block_data_.data();
  view.block_shift = block_shift_;
  view.k_off = static_cast<size_t>(layer) * section_bytes_;
  view.v_off = static_cast<size_t>(shape_.n_layer + layer) * section_bytes_;
  view.types = config_.types;
  view.rotate_k = RotateK();
  view.rotate_v = config_.rotate;
  view.k_offset = KeyOffset(layer, 0);
  view.k_center = KeyCenter(layer, 0);
  view.k_scale = KeyScale(layer, 0);
  view.k_row_bytes = KRowBytes();
  view.v_row_bytes = VRowBytes();
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
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      const Slot s = plan.slot[i];
      if (!s.valid()) continue;
      Store(false, layer, 0, KRow(layer, s.v), k + i * row_stride, shape_.n_head_kv, KvRoundingOf(false));
      Store(true, layer, 0, VRow(layer, s.v), v + i * row_stride, shape_.n_head_kv, KvRoundingOf(true));
    }
    return;
  }
  const KvLayerView view = View(layer);
  const int hd = shape_.head_dim;
  for (int g = 0; g < view.n_lanes; ++g) {
    const int32_t* slots =
        plan.lane_slot.data() + static_cast<size_t>(view.first_lane + g) * plan.n_tokens;
    const int64_t col = static_cast<int64_t>(g) * view.lane_heads * hd;
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      if (slots[i] < 0) continue;
      const size_t head = static_cast<size_t>(g) * view.lane_heads;
      const int h = static_cast<int>(head);
      Store(false, layer, h, KRow(layer, slots[i]) + head * k_head_bytes_,
            k + i * row_stride + col, view.lane_heads, KvRoundingOf(false));
      Store(true, layer, h, VRow(layer, slots[i]) + head * v_head_bytes_,
            v + i * row_stride + col, view.lane_heads, KvRoundingOf(true));
    }
  }
}

void KvCache::WriteStored(int layer, const KvPlan& plan, const uint8_t* k, size_t k_row_bytes,
                          const uint8_t* v, size_t v_row_bytes) {
  CHECK(k_row_bytes >= KRowBytes() && v_row_bytes >= VRowBytes());
  if (plan.hooks == nullptr) {
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      const Slot s = plan.slot[i];
      if (!s.valid()) continue;
      std::memcpy(KRow(layer, s.v), k + i * k_row_bytes, KRowBytes());
      std::memcpy(VRow(layer, s.v), v + i * v_row_bytes, VRowBytes());
    }
    return;
  }
  const KvLayerView view = View(layer);
  for (int g = 0; g < view.n_lanes; ++g) {
    const int32_t* slots =
        plan.lane_slot.data() + static_cast<size_t>(view.first_lane + g) * plan.n_tokens;
    const size_t head = static_cast<size_t>(g) * view.lane_heads;
    const size_t kb = head * k_head_bytes_, vb = head * v_head_bytes_;
    for (int32_t i = 0; i < plan.n_tokens; ++i) {
      if (slots[i] < 0) continue;
      std::memcpy(KRow(layer, slots[i]) + kb, k + i * k_row_bytes + kb, view.lane_heads * k_head_bytes_);
      std::memcpy(VRow(layer, slots[i]) + vb, v + i * v_row_bytes + vb, view.lane_heads * v_head_bytes_);
    }
  }
}

void KvCache::Commit(KvPlan& plan, ThreadPool* pool) {
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
  // Keys re-rotated by the policy's renumbering: on the pool's threads, lane
  // by lane, after it (a lane's rotations in their order, as the hook would).
  const bool parallel = pool != nullptr && pool->size() > 1 && cells_.n_lanes() > 1;
  if (parallel) cells_.DeferRotations(true);
  policy_->Commit(cells_, plan);
  if (parallel) {
    cells_.DeferRotations(false);
    const std::vector<KvCells::Rotation> rotations = cells_.TakeRotations();
    if (!rotations.empty()) ApplyRotations(rotations, *pool);
  }
  if (plan.hooks != nullptr && !bounded_) {
    // Per-lane policies may shrink (snapkv compresses its prompt): the
    // blocks above every lane's highest cell go back to the pool (a bounded
    // cache keeps them: its reservation counts them anyway).
    const int32_t used_blocks = (cells_.max_hi() + block_mask_) >> block_shift_;
    for (int32_t b = used_blocks; b < static_cast<int32_t>(table_.size()); ++b) ReleaseBlock(b);
  }
  if (!publish_) return;
  if (static_cast<int32_t>(plan.tokens.size()) != plan.n_tokens) {
    publish_ = false;  // a caller that does not say which tokens ran
    text_.clear();
    return;
  }
  // Only the ids of tokens [0, n_cells) can be in a published block: a ring
  // past its size (sink, window) generating forever keeps no more of them.
  // text_ holds tokens [0, min(n_seen, n_cells)).
  const size_t room = static_cast<size_t>(n_cells_) - std::min(text_.size(), size_t(n_cells_));
  const size_t take = std::min(room, plan.tokens.size());
  text_.insert(text_.end(), plan.tokens.begin(), plan.tokens.begin() + take);
  PublishFull();
}

void KvCache::Clear() {
  cells_.Clear();
  policy_->Clear();
  n_seen_ = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(table_.size()); ++b) ReleaseBlock(b);
  publish_ = policy_->SharesPrefix() && publish_allowed_;
  text_.clear();
  chain_.clear();
  keys_moved_ = false;
  if (bounded_) CHECK(ReserveAll());  // the blocks just returned
}

// After tokens [n, n_seen) left: the published chain and text stop at n.
void KvCache::TruncatePublished(TextIndex n) {
  if (!publish_) return;
  const size_t full = static_cast<size_t>(n >> block_shift_);
  if (chain_.size() > full) chain_.resize(full);
  if (text_.size() > static_cast<size_t>(n)) text_.resize(n);
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
  if (DropRotates()) RETURN_IF_ERROR(MakeAllWritable());
  DropCells(n, n_seen_);
  policy_->OnDrop(cells_, n_seen_, n, n_seen_);
  n_seen_ = n;
  TruncatePublished(n);
  ReleaseEmptyBlocks();
  return Status::Ok();
}

Status KvCache::RemoveRange(TextIndex from, TextIndex to) {
  RETURN_IF_ERROR(CheckRange("remove", from, to));
  if (to == n_seen_) return KeepPrefix(from);
  if (from == to) return Status::Ok();
  RETURN_IF_ERROR(policy_->CanDrop(cells_, n_seen_, from, to));
  if (DropRotates()) RETURN_IF_ERROR(MakeAllWritable());
  DropCells(from, to);
  policy_->OnDrop(cells_, n_seen_, from, to);
  // A hole: later blocks no longer hold their own tokens.
  TruncatePublished(from);
  publish_ = false;
  text_.clear();
  ReleaseEmptyBlocks();
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
      if (static_cast<int64_t>(cells_.pos(lane, c)) + delta > INT32_MAX)  // wrapped before
        return Errorf("kv: shift: token {} at position {} would move past {}", idx,
                      cells_.pos(lane, c), INT32_MAX);
    }
  if (config_.rope_k == RopeK::kCached) {
    RETURN_IF_ERROR(MakeAllWritable());
    keys_moved_ = true;
  }
  // Moved positions: the blocks from `from` on no longer hold tokens at their own positions.
  TruncatePublished(from);
  publish_ = false;
  text_.clear();
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = 0; c < cells_.hi(lane); ++c) {
      const TextIndex idx = cells_.index(lane, c);
      if (idx >= from && idx < to) cells_.Move(lane, c, cells_.pos(lane, c) + delta);
    }
  policy_->OnShift(n_seen_, from, to, delta);
  return Status::Ok();
}

Result<std::unique_ptr<KvCache>> KvCache::Fork() const {
  std::unique_ptr<KvCache> copy(new KvCache(shape_, config_, policy_->Clone(), pool_, own_pool_));
  const bool share = policy_->SharesPrefix();
  if (!share && n_blocks_held() > pool_->Available(config_.types))
    return Errorf("kv: fork: the KV memory budget has no room for {} blocks", n_blocks_held());
  for (int32_t b = 0; b < static_cast<int32_t>(table_.size()); ++b) {
    if (table_[b] < 0) continue;
    if (share) {
      pool_->Ref(table_[b]);
      copy->table_[b] = table_[b];
    } else {
      copy->table_[b] = pool_->Take(config_.types);
      pool_->CopyBlock(copy->table_[b], table_[b]);
    }
    copy->block_data_[b] = pool_->data(copy->table_[b]);
  }
  copy->n_seen_ = n_seen_;
  copy->publish_ = publish_;
  copy->keys_moved_ = keys_moved_;
  copy->publish_allowed_ = publish_allowed_;
  copy->text_ = text_;
  copy->chain_ = chain_;
  // The cell table, without re-rotating (the rows are copied as they are).
  for (int lane = 0; lane < cells_.n_lanes(); ++lane)
    for (int32_t c = 0; c < cells_.hi(lane); ++c)
      if (cells_.index(lane, c) >= 0)
        copy->cells_.Set(lane, c, cells_.index(lane, c), cells_.pos(lane, c));
  return copy;
}

}  // namespace rotor
