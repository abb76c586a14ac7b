// Attention of a ubatch of one sequence over its KV cache plus the ubatch's own
// keys and values (which the cache stores only after attention has read it, so
// a ring can be overwritten by the chunk that evicts its old contents).
// Online softmax in blocks of keys: no [n_tokens x n_cells] score matrix.
// Query heads that share a KV head are processed together: each K/V row is
// read once per group.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"

namespace rotor {

struct AttentionArgs {
  const float* q = nullptr;      // [n_tokens, n_head, head_dim], rows q_stride apart
  const float* k = nullptr;      // [n_tokens, n_head_kv, head_dim], rows kv_stride apart
  const float* v = nullptr;      // [n_tokens, n_head_kv, head_dim], rows kv_stride apart
  int64_t q_stride = 0;
  int64_t kv_stride = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  const KvLayerView* cache = nullptr;
  const KvPlan* plan = nullptr;
  float* out = nullptr;          // [n_tokens, n_head, head_dim], rows out_stride apart
  int64_t out_stride = 0;
};

// Per-thread working memory, sized once.
class AttentionScratch {
 public:
  AttentionScratch(int n_threads, int n_head, int n_head_kv, int head_dim);
  float* Scores(int thread) { return scores_.data() + thread * scores_per_thread_; }
  float* Acc(int thread) { return acc_.data() + thread * acc_per_thread_; }
  const float** KeyPtrs(int thread) { return key_ptrs_.data() + thread * kBlock; }
  const float** ValuePtrs(int thread) { return value_ptrs_.data() + thread * kBlock; }
  static constexpr int kBlock = 64;  // keys per online-softmax block

 private:
  size_t scores_per_thread_, acc_per_thread_;
  std::vector<float> scores_;  // per thread [group, kBlock] scores, then [group] max and sum
  std::vector<float> acc_;     // per thread [group, head_dim]
  std::vector<const float*> key_ptrs_, value_ptrs_;  // per thread [kBlock]
};

void Attend(ThreadPool& pool, const AttentionArgs& args, AttentionScratch& scratch);

}  // namespace rotor
