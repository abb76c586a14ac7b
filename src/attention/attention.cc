#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace rotor {

AttentionScratch::AttentionScratch(int n_threads, int n_head, int n_head_kv, int head_dim) {
  int group = n_head / n_head_kv;
  scores_per_thread_ = static_cast<size_t>(group) * (kBlock + 2);
  acc_per_thread_ = static_cast<size_t>(group) * head_dim;
  scores_.resize(scores_per_thread_ * n_threads);
  acc_.resize(acc_per_thread_ * n_threads);
  key_ptrs_.resize(static_cast<size_t>(kBlock) * n_threads);
  value_ptrs_.resize(static_cast<size_t>(kBlock) * n_threads);
}

namespace {

float Dot(const float* a, const float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Online softmax state of one (token, kv head) group of query heads.
struct GroupState {
  const float* q;   // [group, head_dim] (rows q_head_stride apart)
  int group, head_dim;
  float scale;
  float* scores;    // [group, kBlock]
  float* max;       // [group]
  float* sum;       // [group]
  float* acc;       // [group, head_dim]
};

// Folds a block of n keys into the running softmax of every head in the group.
void FoldBlock(GroupState& s, const float* const* keys, const float* const* values, int n) {
  const int hd = s.head_dim;
  for (int h = 0; h < s.group; ++h) {
    const float* q = s.q + h * hd;
    float* sc = s.scores + h * AttentionScratch::kBlock;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      sc[j] = Dot(q, keys[j], hd) * s.scale;
      block_max = std::max(block_max, sc[j]);
    }
    float new_max = std::max(s.max[h], block_max);
    float correction = std::exp(s.max[h] - new_max);  // exp(-inf) = 0 on the first block
    float* acc = s.acc + h * hd;
    for (int d = 0; d < hd; ++d) acc[d] *= correction;
    float sum = s.sum[h] * correction;
    for (int j = 0; j < n; ++j) {
      float p = std::exp(sc[j] - new_max);
      sum += p;
      const float* v = values[j];
      for (int d = 0; d < hd; ++d) acc[d] += p * v[d];
    }
    s.sum[h] = sum;
    s.max[h] = new_max;
  }
}

}  // namespace

void Attend(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  const KvPlan& plan = *a.plan;
  const KvLayerView& cache = *a.cache;
  const int group = a.n_head / a.n_head_kv;
  const int hd = a.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_tasks = static_cast<int64_t>(plan.n_tokens) * a.n_head_kv;
  constexpr int kBlock = AttentionScratch::kBlock;

  pool.ParallelFor(n_tasks, 1, [&](int64_t begin, int64_t end, int thread) {
    const float** kp = scratch.KeyPtrs(thread);
    const float** vp = scratch.ValuePtrs(thread);
    float* scores = scratch.Scores(thread);
    for (int64_t task = begin; task < end; ++task) {
      const int i = static_cast<int>(task / a.n_head_kv);
      const int g = static_cast<int>(task % a.n_head_kv);
      const TextIndex t = plan.first + i;
      GroupState s{a.q + i * a.q_stride + static_cast<int64_t>(g) * group * hd, group, hd, scale,
                   scores, scores + group * kBlock, scores + group * kBlock + group,
                   scratch.Acc(thread)};
      std::fill(s.max, s.max + group, -std::numeric_limits<float>::infinity());
      std::fill(s.sum, s.sum + group, 0.f);
      std::fill(s.acc, s.acc + group * hd, 0.f);
      int n = 0;
      auto push = [&](const float* k, const float* v) {
        kp[n] = k;
        vp[n] = v;
        if (++n == kBlock) {
          FoldBlock(s, kp, vp, n);
          n = 0;
        }
      };
      // Keys already in the cache.
      const float* ck = cache.k + static_cast<size_t>(g) * cache.cell_stride * hd;
      const float* cv = cache.v + static_cast<size_t>(g) * cache.cell_stride * hd;
      for (int32_t c = 0; c < cache.n_cells; ++c) {
        TextIndex idx = cache.index[c];
        if (idx < 0 || !plan.visibility.Visible(t, idx)) continue;
        push(ck + static_cast<size_t>(c) * hd, cv + static_cast<size_t>(c) * hd);
      }
      // Keys of this ubatch, causally.
      for (int j = 0; j <= i; ++j) {
        if (!plan.visibility.Visible(t, plan.first + j)) continue;
        push(a.k + j * a.kv_stride + g * hd, a.v + j * a.kv_stride + g * hd);
      }
      if (n > 0) FoldBlock(s, kp, vp, n);
      for (int h = 0; h < group; ++h) {
        float* out = a.out + i * a.out_stride + (static_cast<int64_t>(g) * group + h) * hd;
        const float inv = s.sum[h] > 0.f ? 1.0f / s.sum[h] : 0.f;
        for (int d = 0; d < hd; ++d) out[d] = s.acc[h * hd + d] * inv;
      }
    }
  });
}

}  // namespace rotor
