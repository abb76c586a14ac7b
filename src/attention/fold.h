// Internal: folding a block of keys into the online softmax of every query
// head of one token. Per-ISA implementations; attention.cc dispatches.
// ISA translation units include only this header (plain structs).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rotor::attn {

inline constexpr int kBlock = 64;  // keys per online-softmax block

struct FoldState {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  const float* q = nullptr;       // [n_head, head_dim]: rotated (cached) or not (deferred)
  const int* partner = nullptr;   // [head_dim] rotation-pair partner of each lane (deferred)
  bool normal_pairs = true;       // partner[l] == l ^ 1 for every rotated lane
  float* scores = nullptr;        // scratch [n_head, kBlock]
  float* k_rot = nullptr;         // scratch [head_dim]
  float* cs = nullptr;            // scratch [2, head_dim] combined rotation row
  float* m = nullptr;             // [n_head] running max of scaled scores
  float* l = nullptr;             // [n_head] running sum of exp(score - m)
  float* acc = nullptr;           // [n_head, head_dim] running sum of exp(score - m) * v
};

struct KeyBlock {
  int n = 0;
  bool f16 = false;           // k and v rows hold f16 (else f32) values
  const void* k[kBlock];      // each [n_head_kv, head_dim]
  const void* v[kBlock];      // each [n_head_kv, head_dim]
  const float* cos[kBlock];   // deferred: [head_dim] rotation rows; null when keys are rotated
  const float* sin[kBlock];
  // Deferred, two-level: the fine rows to combine with cos/sin by angle
  // addition; null when cos/sin are the whole rotation.
  const float* cos2[kBlock];
  const float* sin2[kBlock];
};

void FoldScalar(FoldState& s, const KeyBlock& b);

// A token's attention probabilities over n_keys keys, summed over its query
// heads, from the scaled scores a fold left and its final state:
// out[k] = sum_h exp(scores[h * stride + k] - m[h]) / l[h].
// scores: [n_heads, stride]; m, l: [n_heads]; out: [n_keys].
void LaneWeightsScalar(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out);
void LaneWeightsAvx512(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out);
// head_dim % 16 == 0 and normal pairs (or cached keys).
void FoldAvx512(FoldState& s, const KeyBlock& b);

}  // namespace rotor::attn
