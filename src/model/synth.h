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
};

// Presets with the hyper-parameters of real models: stories15m, stories110m,
// smollm2-135m, llama3.2-1b (vocabulary size left to the vocabulary file).
Result<SynthSpec> SynthPreset(const std::string& name);
std::vector<std::string> SynthPresetNames();

// Writes the model. The vocabulary (tokenizer.* keys) is copied from `vocab`
// when given (its size sets n_vocab unless spec.n_vocab says otherwise, which
// is an error if they differ); otherwise a small SPM vocabulary of byte tokens
// and letter pieces is generated, so any text tokenizes.
// Weights: uniform with the standard deviation 1/sqrt(fan_in) (embeddings 1),
// norms 1: activations stay O(1) and logits are spread, not degenerate.
Status WriteSynthModel(const SynthSpec& spec, const GgufFile* vocab, const std::string& path,
                       ThreadPool& pool);

}  // namespace rotor
