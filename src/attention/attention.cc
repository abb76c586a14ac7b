#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/attention_internal.h"
#include "base/check.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"
#include "ops/quant.h"
#include "ops/rope.h"

namespace rotor {

using attn::kBlock;

AttentionScratch::AttentionScratch(int n_threads, int n_head, int n_head_kv, int head_dim)
    : n_threads_(n_threads), n_head_(n_head), head_dim_(head_dim) {
  per_thread_ = static_cast<size_t>(n_head) * kBlock + 3 * head_dim + n_head * head_dim +
                kBlock * 2 * head_dim + 2 * n_head + n_head * head_dim +
                (n_head * head_dim + 3) / 4 + n_head * head_dim;
  per_thread_ = (per_thread_ + 15) / 16 * 16;
  buf_.Resize(per_thread_ * n_threads);
  lanes_.resize(n_threads);
}

AttentionScratch::Thread AttentionScratch::thread(int t) {
  float* p = buf_.data() + per_thread_ * t;
  Thread th;
  th.scores = p, p += static_cast<size_t>(n_head_) * kBlock;
  th.k_rot = p, p += head_dim_;
  th.cs = p, p += 2 * head_dim_;
  th.q_sink = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.far = p, p += static_cast<size_t>(kBlock) * 2 * head_dim_;
  th.m = p, p += n_head_;
  th.l = p, p += n_head_;
  th.acc = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.q8d = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.q8 = reinterpret_cast<int8_t*>(p);
  return th;
}

AttentionScratch::LaneBuffers& AttentionScratch::lanes(int thread, size_t max_keys, int n_lanes,
                                                       int q_heads) {
  LaneBuffers& b = lanes_[thread];
  if (b.stride < max_keys) {
    b.stride = max_keys;
    b.weights.resize(b.stride);
  }
  if (b.key_cells.size() < b.stride * n_lanes) b.key_cells.resize(b.stride * n_lanes);
  if (b.scores.size() < b.stride * n_lanes * q_heads) b.scores.resize(b.stride * n_lanes * q_heads);
  return b;
}

uint8_t* AttentionScratch::ChunkBytes(size_t bytes) {
  if (chunk_bytes_.size() < bytes) chunk_bytes_.Resize(bytes);
  return chunk_bytes_.data();
}

float* AttentionScratch::QueryRot(size_t elements) {
  if (q_rot_.size() < elements) q_rot_.Resize(elements);
  return q_rot_.data();
}

float* AttentionScratch::Partials(int64_t n_tasks) {
  const size_t need = static_cast<size_t>(n_tasks) * n_head_ * (head_dim_ + 2);
  if (partials_.size() < need) partials_.Resize(need);  // grows to its bound once
  return partials_.data();
}

attn::FoldState MakeFoldState(const AttentionArgs& a, const AttentionScratch::Thread& th,
                              int n_head, int n_head_kv) {
  attn::FoldState st;
  st.n_head = n_head;
  st.n_head_kv = n_head_kv;
  st.head_dim = a.head_dim;
  st.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  st.scores = th.scores;
  st.k_rot = th.k_rot;
  st.cs = th.cs;
  st.m = th.m;
  st.l = th.l;
  st.acc = th.acc;
  st.q8 = th.q8;
  st.q8d = th.q8d;
  if (a.rope != nullptr) st.partner = a.rope->partner().data();
  return st;
}

void SetRotation(const RopeDistanceTable& table, int64_t distance, attn::KeyBlock& block, int b,
                 float* far, int* far_used) {
  if (distance >= 0 && distance < table.max_distance()) {
    block.cos[b] = table.CoarseCos(distance);
    block.sin[b] = table.CoarseSin(distance);
    block.cos2[b] = table.FineCos(distance);
    block.sin2[b] = table.FineSin(distance);
    return;
  }
  float* row = far + static_cast<size_t>((*far_used)++) * 2 * table.head_dim();
  table.Compute(distance, row, row + table.head_dim());
  block.cos[b] = row;
  block.sin[b] = row + table.head_dim();
}

void SetBlockTypes(const KvLayerView& view, int head_dim, attn::KeyBlock& block) {
  block.tk = static_cast<attn::Elem>(view.types.k);
  block.tv = static_cast<attn::Elem>(view.types.v);
  block.k_head_bytes = static_cast<int>(KvHeadBytes(view.types.k, head_dim));
  block.v_head_bytes = static_cast<int>(KvHeadBytes(view.types.v, head_dim));
  block.qblock = KvQuantBlock(head_dim);
}

namespace {

// Builds key blocks for one (token, cell range) task and folds them.
class TaskRunner {
 public:
  TaskRunner(const AttentionArgs& a, const AttentionScratch::Cut& cut, AttentionScratch::Thread th)
      : a_(a),
        cut_(cut),
        th_(th),
        deferred_(a.cache->rope_k == RopeK::kDeferred),
        state_(MakeFoldState(a, th, a.n_head, a.n_head_kv)) {
    SetBlockTypes(*a.cache, a.head_dim, block_);
  }

  // Processes cells [c0, c1) (and the ubatch's own keys if `chunk`) for token i.
  void Run(int i, int32_t c0, int32_t c1, bool chunk) {
    const KvPlan& plan = *a_.plan;
    const KvLayerView& cache = *a_.cache;
    const TextIndex t = plan.first + i;
    const int32_t pos_q = plan.pos[i];
    const int32_t delta = plan.sink_delta[i];
    const int hd = a_.head_dim, nh = a_.n_head;
    const float* q = a_.q + i * a_.q_stride;
    std::fill(state_.m, state_.m + nh, -std::numeric_limits<float>::infinity());
    std::fill(state_.l, state_.l + nh, 0.f);
    std::fill(state_.acc, state_.acc + static_cast<size_t>(nh) * hd, 0.f);
    // Sinks seen at a shifted distance form their own blocks: with cached keys
    // they need the query rotated back by the shift.
    const bool shifted_sinks = delta != 0 && cache.keep > 0;
    const float* q_sink = q;
    if (shifted_sinks && !deferred_) {
      // q is rotated (Hadamard) when the keys are: back, RoPE-shifted, again.
      std::memcpy(th_.q_sink, q, sizeof(float) * nh * hd);
      const int64_t n = static_cast<int64_t>(nh) * hd;
      if (cache.rotate_k) KvHadamard(th_.q_sink, n, KvQuantBlock(hd));
      if (cache.k_offset != nullptr) OffsetDots(th_.q_sink, -1.f);  // before the shift: q
      ops::RopeShift(a_.rope->config(), th_.q_sink, nh, -delta);
      if (cache.k_offset != nullptr) OffsetDots(th_.q_sink, 1.f);  // after it: q_sink
      if (cache.rotate_k) KvHadamard(th_.q_sink, n, KvQuantBlock(hd));
      q_sink = th_.q_sink;
    }
    const bool two_pass = shifted_sinks && !deferred_;
    for (int pass = 0; pass < (two_pass ? 2 : 1); ++pass) {
      const bool sink_pass = pass == 1;
      if (sink_pass && cache.k_offset != nullptr)  // the pass-0 scores as the sinks' (below)
        for (int h = 0; h < nh; ++h) state_.m[h] -= th_.far[h];
      state_.q = sink_pass ? q_sink : q;
      state_.q8_of = nullptr;
      auto add = [&](const void* k, const void* v, int32_t pos_k, TextIndex idx) {
        if (!plan.visibility.Visible(t, idx)) return;
        const bool sink = idx < cache.keep;
        if (two_pass && sink != sink_pass) return;
        const int64_t shift = shifted_sinks && sink && deferred_ ? delta : 0;
        Push(k, v, static_cast<int64_t>(pos_q) - pos_k - shift);
      };
      for (int32_t c = c0; c < c1; ++c) {
        const TextIndex idx = cache.index[c];
        if (idx >= 0) add(cache.KRow(c), cache.VRow(c), cache.pos[c], idx);
      }
      if (chunk)
        for (int j = 0; j <= i; ++j)
          add(cut_.chunk_k + j * cut_.chunk_k_row_bytes, cut_.chunk_v + j * cut_.chunk_v_row_bytes,
              plan.pos[j], plan.first + j);
      Flush();
    }
  }

  const attn::FoldState& state() const { return state_; }

 private:
  // Keys stored minus offsets m score q.k - q.m: a shift softmax ignores
  // while one query scores them all. The sinks' pass scores with q_sink,
  // shifted by q_sink.m instead; th_.far[h] = scale * (q_sink - q).m of head
  // h, taken off the running max of the other keys' pass, puts both passes on
  // the sinks' shift (exact: m, l and acc then describe scores lowered by it).
  // Called with the unrotated q (sign -1, which starts the sums) and then
  // with q_sink (sign +1): [n_head, head_dim] each.
  void OffsetDots(const float* x, float sign) {
    const int hd = a_.head_dim, group = a_.n_head / a_.n_head_kv;
    for (int h = 0; h < a_.n_head; ++h) {
      const float* m = a_.cache->k_offset + static_cast<size_t>(h / group) * hd;
      const float* xh = x + static_cast<size_t>(h) * hd;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += xh[d] * m[d];
      th_.far[h] = (sign < 0 ? 0.f : th_.far[h]) + sign * state_.scale * dot;
    }
  }

  void Push(const void* k, const void* v, int64_t distance) {
    const int n = block_.n;
    block_.k[n] = k;
    block_.v[n] = v;
    block_.cos[n] = block_.sin[n] = block_.cos2[n] = block_.sin2[n] = nullptr;
    if (deferred_) SetRotation(*a_.rope, distance, block_, n, th_.far, &far_used_);
    if (++block_.n == kBlock) Flush();
  }

  void Flush() {
    if (block_.n == 0) return;
    FoldWith(cut_, state_, block_);
    block_.n = 0;
    far_used_ = 0;
  }

  const AttentionArgs& a_;
  const AttentionScratch::Cut& cut_;
  AttentionScratch::Thread th_;
  bool deferred_;
  attn::FoldState state_;
  attn::KeyBlock block_;
  int far_used_ = 0;
};

}  // namespace

namespace {

using Cut = AttentionScratch::Cut;

// The fold of this ubatch: the active ISA's (AVX-512: head size a multiple of
// 16; AVX2, on an AVX2 machine or with ROTOR_ISA=avx2: of 8; up to 256, and
// deferred RoPE only with interleaved pairs), else the scalar one. AVX-512
// keeps the scalar fold for the head sizes its folds do not take.
void ChooseFold(const AttentionArgs& a, Cut& c) {
  const bool deferred = a.cache->rope_k == RopeK::kDeferred;
  const bool normal = a.rope->config().layout == ops::RopeLayout::kNormal;
  const bool fits = a.head_dim <= 256 && (!deferred || normal);
  c.avx512 = fits && ActiveIsa() == Isa::kAvx512 && a.head_dim % 16 == 0;
  c.avx2 = fits && ActiveIsa() == Isa::kAvx2 && a.head_dim % 8 == 0;
}

Cut CutOf(const ThreadPool& pool, const AttentionArgs& a) {
  const int32_t n_cells = a.cache->n_cells;
  const int n_tokens = a.plan->n_tokens;
  Cut c;
  ChooseFold(a, c);
  // Few tokens: split the cells so every thread has work (flash-decoding).
  if (n_tokens < 2 * pool.size() && n_cells >= 256)
    c.splits = std::min<int>((4 * pool.size() + n_tokens - 1) / n_tokens, n_cells / 128);
  c.per_split = (n_cells + c.splits - 1) / c.splits;
  c.n_tasks = static_cast<int64_t>(n_tokens) * c.splits;
  return c;
}

// Where each ubatch's own K/V rows are read from: in place (f32 caches
// without rotation) or stored as the cache stores them (rounded, quantized,
// rotated), so they are the values the cache will hold.
void SetChunks(std::span<const AttentionArgs> batch, AttentionScratch& scratch,
               std::vector<Cut>& cuts) {
  auto in_place = [](const KvLayerView& v, bool is_v) {
    return (is_v ? v.types.v : v.types.k) == KvType::kF32 && !(is_v ? v.rotate_v : v.rotate_k) &&
           (is_v || v.k_offset == nullptr);
  };
  size_t bytes = 0;
  for (const AttentionArgs& a : batch)
    for (bool is_v : {false, true})
      if (!in_place(*a.cache, is_v))
        bytes += static_cast<size_t>(a.plan->n_tokens) * a.n_head_kv *
                     KvHeadBytes(is_v ? a.cache->types.v : a.cache->types.k, a.head_dim) +
                 64;
  // [sum of n_tokens x row of K and V] each ubatch's typed rows.
  uint8_t* buf = bytes > 0 ? scratch.ChunkBytes(bytes) : nullptr;
  std::vector<float> rot;  // [n_head_kv * head_dim] one rotated row
  for (size_t b = 0; b < batch.size(); ++b) {
    const AttentionArgs& a = batch[b];
    const KvLayerView& view = *a.cache;
    Cut& c = cuts[b];
    for (bool is_v : {false, true}) {
      const float* src = is_v ? a.v : a.k;
      const uint8_t** chunk = is_v ? &c.chunk_v : &c.chunk_k;
      size_t* row_bytes = is_v ? &c.chunk_v_row_bytes : &c.chunk_k_row_bytes;
      if (in_place(view, is_v)) {
        *chunk = reinterpret_cast<const uint8_t*>(src);
        *row_bytes = static_cast<size_t>(a.kv_stride) * sizeof(float);
        continue;
      }
      const KvType t = is_v ? view.types.v : view.types.k;
      const bool rotate = is_v ? view.rotate_v : view.rotate_k;
      const int64_t row = static_cast<int64_t>(a.n_head_kv) * a.head_dim;
      *row_bytes = a.n_head_kv * KvHeadBytes(t, a.head_dim);
      *chunk = buf;
      const float* offset = is_v ? nullptr : view.k_offset;  // [row], or none
      if (rotate || offset != nullptr) rot.resize(row);
      for (int64_t j = 0; j < a.plan->n_tokens; ++j) {
        const float* x = src + j * a.kv_stride;
        if (offset != nullptr) {  // as KvCache::Store: minus the offsets, then rotated
          for (int64_t e = 0; e < row; ++e) rot[e] = x[e] - offset[e];
          x = rot.data();
        }
        if (rotate) {
          if (x != rot.data()) std::copy(x, x + row, rot.data());
          KvHadamard(rot.data(), row, KvQuantBlock(a.head_dim));
          x = rot.data();
        }
        uint8_t* dst = buf + j * *row_bytes;
        if (t == KvType::kF16)  // as KvCache::Store
          ops::F32ToF16Row(x, reinterpret_cast<uint16_t*>(dst), row);
        else
          KvQuantizeHeads(t, a.head_dim, a.n_head_kv, x, dst);
      }
      buf += (a.plan->n_tokens * *row_bytes + 63) / 64 * 64;
    }
  }
}

// Task `task` of ubatch a: token task / splits over split task % splits.
void RunTask(const AttentionArgs& a, const Cut& c, int64_t task, AttentionScratch::Thread th,
             float* partial) {
  const int nh = a.n_head, hd = a.head_dim;
  const int32_t n_cells = a.cache->n_cells;
  const int i = static_cast<int>(task / c.splits), s = static_cast<int>(task % c.splits);
  TaskRunner runner(a, c, th);
  const int32_t c0 = std::min(n_cells, s * c.per_split), c1 = std::min(n_cells, c0 + c.per_split);
  runner.Run(i, c0, c1, /*chunk=*/s == c.splits - 1);
  const attn::FoldState& st = runner.state();
  if (c.splits == 1) {
    for (int h = 0; h < nh; ++h) {
      float* out = a.out + i * a.out_stride + static_cast<int64_t>(h) * hd;
      const float inv = st.l[h] > 0.f ? 1.0f / st.l[h] : 0.f;
      for (int d = 0; d < hd; ++d) out[d] = st.acc[h * hd + d] * inv;
    }
  } else {
    std::memcpy(partial, st.m, sizeof(float) * nh);
    std::memcpy(partial + nh, st.l, sizeof(float) * nh);
    std::memcpy(partial + 2 * nh, st.acc, sizeof(float) * nh * hd);
  }
}

// Merges the partial softmax states of each token's splits into a.out.
void MergeSplits(const AttentionArgs& a, const Cut& c, const float* partials) {
  const int nh = a.n_head, hd = a.head_dim, splits = c.splits;
  const size_t part_stride = static_cast<size_t>(nh) * (hd + 2);
  for (int i = 0; i < a.plan->n_tokens; ++i) {
    for (int h = 0; h < nh; ++h) {
      float m = -std::numeric_limits<float>::infinity();
      for (int s = 0; s < splits; ++s) m = std::max(m, partials[(i * splits + s) * part_stride + h]);
      float* out = a.out + i * a.out_stride + static_cast<int64_t>(h) * hd;
      std::fill(out, out + hd, 0.f);
      float l = 0.f;
      for (int s = 0; s < splits; ++s) {
        const float* p = partials + (i * splits + s) * part_stride;
        if (p[nh + h] == 0.f) continue;
        const float w = std::exp(p[h] - m);
        l += p[nh + h] * w;
        const float* acc = p + 2 * nh + static_cast<size_t>(h) * hd;
        for (int d = 0; d < hd; ++d) out[d] += acc[d] * w;
      }
      const float inv = l > 0.f ? 1.0f / l : 0.f;
      for (int d = 0; d < hd; ++d) out[d] *= inv;
    }
  }
}

}  // namespace

void Attend(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  AttendBatch(pool, std::span<const AttentionArgs>(&a, 1), scratch);
}

void AttendBatch(ThreadPool& pool, std::span<const AttentionArgs> batch_in,
                 AttentionScratch& scratch) {
  CHECK_LE(pool.size(), scratch.n_threads());
  // Rotated keys (--kv-rotate, cached RoPE): the queries rotated alike, so
  // q.k is unchanged; rotated values: the outputs rotated back at the end.
  std::span<const AttentionArgs> batch = batch_in;
  size_t n_rot = 0;
  for (const AttentionArgs& a : batch_in)
    if (a.cache->rotate_k) n_rot += static_cast<size_t>(a.plan->n_tokens) * a.n_head * a.head_dim;
  if (n_rot > 0) {
    float* q = scratch.QueryRot(n_rot);  // [sum of n_tokens, n_head, head_dim]
    std::vector<AttentionArgs>& args = scratch.rotated_args();
    args.assign(batch_in.begin(), batch_in.end());
    for (AttentionArgs& a : args) {
      if (!a.cache->rotate_k) continue;
      const int64_t row = static_cast<int64_t>(a.n_head) * a.head_dim;
      for (int i = 0; i < a.plan->n_tokens; ++i) {
        std::copy(a.q + i * a.q_stride, a.q + i * a.q_stride + row, q + i * row);
        KvHadamard(q + i * row, row, KvQuantBlock(a.head_dim));
      }
      a.q = q, a.q_stride = row;
      q += a.plan->n_tokens * row;
    }
    batch = args;
  }
  std::vector<AttentionScratch::Cut>& cuts = scratch.cuts();
  cuts.assign(batch.size(), Cut{});
  int64_t n_tasks = 0, n_partials = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const AttentionArgs& a = batch[b];
    CHECK(a.rope != nullptr);
    CHECK(a.n_head == batch[0].n_head && a.head_dim == batch[0].head_dim);
    if (a.plan->hooks != nullptr) continue;  // per-lane policies: below, one ubatch at a time
    cuts[b] = CutOf(pool, a);
    cuts[b].first_task = n_tasks;
    n_tasks += cuts[b].n_tasks;
    if (cuts[b].splits > 1) {
      cuts[b].first_partial = n_partials;
      n_partials += cuts[b].n_tasks;
    }
  }
  SetChunks(batch, scratch, cuts);
  if (n_tasks > 0) {
    const size_t part_stride = static_cast<size_t>(batch[0].n_head) * (batch[0].head_dim + 2);
    // [n_partials, part_stride]: the split tasks' softmax states.
    float* partials = n_partials > 0 ? scratch.Partials(n_partials) : nullptr;
    CHECK_LE(n_tasks, int64_t{1} << 30);
    pool.Run(static_cast<int>(n_tasks), [&](int task, int thread) {
      // The ubatch holding `task` (batches are small: a linear scan).
      size_t b = 0;
      while (cuts[b].n_tasks == 0 || task >= cuts[b].first_task + cuts[b].n_tasks) ++b;
      const Cut& c = cuts[b];
      const int64_t t = task - c.first_task;
      RunTask(batch[b], c, t, scratch.thread(thread),
              c.splits > 1 ? partials + (c.first_partial + t) * part_stride : nullptr);
    });
    for (size_t b = 0; b < batch.size(); ++b)
      if (cuts[b].splits > 1)
        MergeSplits(batch[b], cuts[b], partials + cuts[b].first_partial * part_stride);
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].plan->hooks == nullptr) continue;
    ChooseFold(batch[b], cuts[b]);
    AttendLanes(pool, batch[b], *batch[b].plan, scratch, cuts[b]);
  }
  for (const AttentionArgs& a : batch) {
    if (!a.cache->rotate_v) continue;
    const int64_t row = static_cast<int64_t>(a.n_head) * a.head_dim;
    for (int i = 0; i < a.plan->n_tokens; ++i)
      KvHadamard(a.out + i * a.out_stride, row, KvQuantBlock(a.head_dim));
  }
}

}  // namespace rotor
