// An independent, naive Llama-graph forward pass for tests (llama and qwen2:
// Q/K/V biases, NeoX or interleaved RoPE pairs, partial rotary, frequency
// divisors from rope_freqs.weight or the rope.scaling keys, all read from the
// file itself, not from ModelConfig): every token's logits,
// with attention decided by a function of (query index, key index) alone, so
// a KV policy can be checked against the mask it promises without any KV code.
#pragma once

#include <functional>
#include <vector>

#include "model/model.h"

namespace rotor::testing {

// Distance (RoPE position difference) at which query t sees key j, or -1 if
// the key is masked out. Original positions: t - j.
using DistanceFn = std::function<int64_t(int64_t t, int64_t j)>;

// What a sink cache of `size` cells keeping `keep` sinks promises (a window
// cache: keep 0): query t sees the sinks and the size - keep most recent keys;
// with compact positions a sink sits at min(t, size - 1) - j from the query.
DistanceFn RingDistance(int size, int keep, bool compact);

// Logits [n_tokens, n_vocab]. Weights are dequantized and dotted in double.
// kv_f16: every key (before RoPE) and value is rounded to f16 first, as a
// cache storing f16 keys before RoPE holds them.
std::vector<float> ReferenceLogits(const Model& model, const std::vector<int32_t>& tokens,
                                   const DistanceFn& distance, bool kv_f16 = false);

}  // namespace rotor::testing
