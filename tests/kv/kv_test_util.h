// Shared fixtures of the KV tests: models, prompts and a forward under a policy.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rotor::testing {

inline const std::string kStories = ROTOR_MODELS_DIR "/stories260K.gguf";

// A random grouped-query model (8 heads sharing 2 KV heads, head_dim 32, so the
// AVX-512 attention path runs), written once per process.
const std::string& GqaModelPath();

// Random models of the other RoPE variants and architectures, written once per
// process (removed at exit), by name:
//   "qwen2"          qwen2-tiny: qwen2 arch, Q/K/V biases, NeoX pairs, tied output
//   "qwen2-partial"  qwen2 with 16 of 32 dims rotated and linear scaling x2
//   "llama3"         llama3-tiny: rope_freqs.weight + llama3 scaling keys
//   "llama3-keys"    llama3 scaling from the keys alone (factors computed),
//                    24 of 32 dims rotated
// "gqa" is GqaModelPath(), "gqa-q8_0" / "gqa-q4_0" the same shape quantized,
// "gqa256-Q4_K_M" / "gqa256-q5_K" / "gqa256-Q3_K_M" / "gqa256-Q2_K" that shape
// at width 256 in K-quants, "stories260K"
// the bundled model; "qwen2", "qwen2-partial", "llama3", "llama3-keys" tiny
// random models of those architectures.
const std::string& ModelPath(const std::string& name);

const Model& LoadModelCached(const std::string& path);

// A deterministic pseudo-text of n tokens (BOS first) for a vocabulary.
std::vector<int32_t> Prompt(int n, int n_vocab, uint32_t seed = 7);

// A config of the named policy ("full", "sink", "window", "h2o", "snapkv",
// "tova"), set through KvConfig::Set as a user would: only the options the
// policy uses (KvPolicyUses) are given, so a test never trips the "not used by
// this policy" error. size 0, recent -1 and window -1 leave the policy's default.
KvConfig Kv(std::string_view policy, int size, int keep = 4, RopeK rope = RopeK::kCached,
            KvPositions positions = KvPositions::kOriginal, int recent = -1, int window = -1);

// Every token's logits [n, n_vocab] after prefilling `tokens` in steps of
// `step` under `kv` (context n_ctx). prompt > 0: the first `prompt` tokens are
// announced as a prompt (KvCache::ExpectPrompt) before prefilling, so snapkv
// compresses at its end; the tokens after it run as generation. Fails the test
// on error.
std::vector<float> AllLogits(const Model& model, const KvConfig& kv,
                             const std::vector<int32_t>& tokens, int step, int n_ctx = 512,
                             std::unique_ptr<KvCache>* keep_cache = nullptr, int64_t prompt = 0);

// Every token's logits [n, n_vocab] after running `tokens` through an existing
// cache in steps of `step` (0 = all at once). Fails the test on error.
std::vector<float> ContinueLogits(const Model& model, KvCache& cache,
                                  const std::vector<int32_t>& tokens, int step);

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace rotor::testing
