// Random-weight Llama models in the shape of real ones (rotor synth): speed
// does not depend on weight values, and tests need models of many shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace rotor {

struct SynthSpec {
  std::string name = "synth";
  int n_vocab = 0;       // 0 = the vocabulary's size (or 512 without one)
  int n_embd = 64;
  int n_ff = 176;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 4;
  int n_ctx = 512;
  float rope_base = 10000.f;
  DType type = DType::kF32;   // matrices; norms stay f32
  uint64_t seed = 1;
  bool tied_output = false;   // no output.weight: the embeddings are reused
  std::string arch = "llama"; // llama | qwen2 (keys qwen2.*, NeoX RoPE pairs)
  bool qkv_bias = false;      // blk.N.attn_{q,k,v}.bias (every qwen2 file has them)
  int n_rot = 0;              // rope.dimension_count; 0 = head_dim (< head_dim: partial rotary)
  float rms_eps = 1e-5f;
  // RoPE scaling keys: "none", "linear" (rope.scaling.factor) or "llama3"
  // (factor, low/high_freq_factor 1/4, original_context_length).
  std::string rope_scaling = "none";
  float rope_scale = 1.0f;
  int rope_orig_ctx = 8192;
  // llama3: write the factors as rope_freqs.weight and no rope.scaling keys,
  // as files converted from Llama 3.1+ do (false: the keys, which rotor reads).
  bool rope_freqs = false;
};

// Presets with the hyper-parameters of real models: stories15m, stories110m,
// smollm2-135m, llama3.2-1b (Llama 3 RoPE factors), qwen2.5-0.5b (qwen2:
// biases, NeoX RoPE, tied, 151936 embeddings), and the small test shapes
// qwen2-tiny and llama3-tiny. Vocabulary size is left to the vocabulary file
// unless the preset sets it (qwen2.5-0.5b).
Result<SynthSpec> SynthPreset(const std::string& name);
std::vector<std::string> SynthPresetNames();

// Writes the model. The vocabulary (tokenizer.* keys) is copied from `vocab`
// when given (its size sets n_vocab unless spec.n_vocab says otherwise: a
// smaller n_vocab is an error, a larger one pads the vocabulary with unused
// tokens, so a real model's embedding size runs with the bundled vocabulary;
// qwen2 shapes get the Llama-2 SPM vocabulary this way); otherwise a small SPM vocabulary of byte tokens
// and letter pieces is generated, so any text tokenizes.
// Weights: uniform with the standard deviation 1/sqrt(fan_in) (embeddings 1),
// norms 1: activations stay O(1) and logits are spread, not degenerate.
Status WriteSynthModel(const SynthSpec& spec, const GgufFile* vocab, const std::string& path,
                       ThreadPool& pool);

}  // namespace rotor
