// Hyper-parameters of a model from its GGUF keys: the architecture (llama,
// qwen2), the shape, and RoPE (base, layout, rotated dimensions, frequency
// factors from `rope_freqs.weight` and the rope.scaling.* keys).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kv/kv_config.h"
#include "ops/rope.h"

namespace rotor {

// Architectures rotor runs, for error messages: "llama, qwen2".
std::string SupportedArchitectures();

struct ModelConfig {
  std::string arch;  // "llama" or "qwen2"
  std::string name;  // general.name, if any
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  int n_rot = 0;  // dimensions of each head that RoPE rotates (partial rotary if < head_dim)
  float rope_base = 10000.f;
  float rms_eps = 1e-5f;
  // The file's pairing: llama kNormal (2i, 2i+1), qwen2 kNeox (i, i + n_rot/2).
  ops::RopeLayout rope_layout = ops::RopeLayout::kNormal;
  std::string rope_scaling = "none";  // none | linear | llama3 (as read from the file)
  float rope_scale = 1.0f;            // rope.scaling.factor (linear: positions divided by it)
  // Per-pair divisors of the RoPE frequency [n_rot / 2] (rope_freqs.weight, or
  // computed for llama3 scaling, times the linear factor); empty = none.
  std::vector<float> rope_freq_factors;
  int sliding_window = 0;  // attention.sliding_window if the file gives one (not applied)

  KvShape kv_shape(int n_ctx) const { return KvShape{n_layer, n_head_kv, head_dim, n_ctx, rope()}; }
  // RoPE as the engine applies it. Q and K heads of a NeoX file are permuted
  // into interleaved pairs right after their projection (q.k is unchanged when
  // both are permuted alike, and the rotation then pairs the same values), so
  // every kernel, the KV cache and deferred attention see kNormal. The factors
  // pointer refers to this config: the model outlives its caches and forwards.
  ops::RopeConfig rope() const {
    return ops::RopeConfig{head_dim, n_rot, rope_base, ops::RopeLayout::kNormal,
                           rope_freq_factors.empty() ? nullptr : rope_freq_factors.data()};
  }
  // Whether Q/K heads are permuted at projection time (see rope()).
  bool permute_qk() const { return rope_layout == ops::RopeLayout::kNeox; }
};

// Reads the hyper-parameters (all but n_vocab, which the embeddings give).
// Errors name the key or tensor and its value.
Result<ModelConfig> ReadModelConfig(const GgufFile& f);

// The Llama 3.1 frequency divisors for pairs [0, n_rot / 2): 1 for short
// wavelengths (< original_ctx / high_freq_factor), `factor` for long ones
// (> original_ctx / low_freq_factor), interpolated in between.
std::vector<float> Llama3FreqFactors(int n_rot, double base, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_ctx);

}  // namespace rotor
