// The engine: a loaded model, its tokenizer, one thread pool and the forward
// pass; generation of a single sequence with streaming output.
//
// Data path: text -> tokenizer -> tokens -> the runner: prompt chunks (KV
// plan/commit; runner.h) -> logits -> the sample/stop step: sampler, end of
// generation, stream decoder, stop strings, limits (sample_step.h) -> callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/runner.h"
#include "engine/token_trie_cache.h"
#include "kv/kv_config.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace rotor {

// The largest context (-c, n_ctx): per-context tables are sized by it.
inline constexpr int kMaxContext = 1 << 24;

struct EngineOptions {
  std::string model_path;
  int n_threads = 0;  // 0 = the machine's hardware threads
  int n_ctx = 0;      // context per sequence; 0 = the model's trained context
  // Bytes all K/V of the process may hold (the block pool's budget, kv_pool.h);
  // 0 = DefaultKvMemory for max_seqs sequences.
  int64_t kv_memory_bytes = 0;
  int max_seqs = 1;  // sequences run at once (sizes the default budget)
  // Automatic prefix caching (kv_pool.h): sequences start from the longest
  // cached prefix of their prompt and leave their full blocks cached.
  bool prefix_cache = true;
  // How the model file is held (gguf.h): --no-mmap, --mlock.
  GgufOpenOptions open = {};
};

// --kv-memory: "4096" (MiB), "0.25" or "25%" (of the machine's memory).
Result<int64_t> ParseKvMemory(std::string_view text);
// max_seqs full contexts of f32 K/V, at most half the machine's memory. A
// context is counted in whole blocks of kKvBlockCells, plus the one block a
// sequence holds ahead of its prompt for the tokens it generates (the
// scheduler's admission check), so a prompt that fits -c always fits it.
int64_t DefaultKvMemory(const KvShape& shape, int max_seqs);

// The most alternatives GenerateOptions::logprobs may ask for.
inline constexpr int kMaxTopLogprobs = 20;

struct GenerateOptions {
  std::string prompt;
  bool add_bos = true;
  // Control-token texts in the prompt ("<|im_start|>", "<|eot_id|>") become
  // those tokens; otherwise they are ordinary text (CLI --special).
  bool parse_special = false;
  int n_predict = 256;  // -1 = until end of generation or a full context
  // With n_predict -1, also stop ("length") once the prompt and the reply
  // fill the context size (Engine::n_ctx(), -c), as a cache of that size
  // under the full policy would: the policies that evict never fill theirs,
  // and would otherwise generate until end of text (the server's default
  // budget; llama-server without context shift). A prompt that alone fills
  // the context size (only the policies that evict take one) may be
  // followed by that many tokens.
  bool stop_at_context = false;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // A chat reply: no leading whitespace in the text (StopRules).
  bool trim_leading_space = false;
  KvConfig kv;
  // Start from the longest cached prefix of the prompt and leave this
  // sequence's blocks cached (llama-server's cache_prompt), where the
  // scheduler caches prefixes at all.
  bool cache_prompt = true;
  // Keep the generated tokens and text in the result. Streaming callers that
  // generate without end turn it off so memory stays flat.
  bool collect_output = true;
  // Log-probabilities of every generated token and of this many most likely
  // alternatives (TokenLogprobs, in each SeqEvent); -1 = none (no cost).
  int logprobs = -1;
  // Called after every generated token with the count so far (progress reports).
  std::function<void(int64_t n_generated)> on_token;
};

// kError: the sequence could not run (GenerateResult::error says why).
enum class FinishReason { kEos, kLength, kStop, kContext, kCancelled, kError };
std::string_view FinishReasonName(FinishReason r);

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  int64_t cached_tokens = 0;    // prompt tokens taken from the prefix cache, not computed
  std::vector<int32_t> tokens;  // generated (if collect_output)
  std::string text;             // generated text, stop string excluded (if collect_output)
  int64_t n_generated = 0;
  FinishReason finish = FinishReason::kLength;
  std::string error;      // kError: why
  bool out_of_memory = false;  // kError: an allocation failed (retrying later may work)
  int64_t prompt_ns = 0;  // prefill time
  int64_t gen_ns = 0;     // decode time (first sampled token to last)
  double prompt_tps() const { return prompt_ns ? prompt_tokens.size() * 1e9 / prompt_ns : 0; }
  double gen_tps() const { return gen_ns ? n_generated * 1e9 / gen_ns : 0; }
};

// Receives text as it is generated; return false to stop.
using TextCallback = std::function<bool(std::string_view text)>;

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);

  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The vocabulary as a trie, for grammar masks (built on first use).
  const TokenTrieCache& token_trie() const { return *token_trie_; }
  ThreadPool& pool() { return *pool_; }
  int n_ctx() const { return n_ctx_; }
  // The K/V budget is DefaultKvMemory's (no --kv-memory given).
  bool kv_memory_default() const { return kv_memory_default_; }
  // The process's K/V blocks: every sequence of this engine takes its blocks here.
  KvBlockPool& kv_pool() { return *kv_pool_; }
  bool prefix_cache() const { return prefix_cache_; }
  // "512.00 MiB (default, ...) = 65536 tokens of f16 K/V (32768 of f32), in blocks of 16
  // tokens".
  std::string DescribeKvMemory() const;

  // Checks a request without running it (also done by Generate and
  // Scheduler::Add) and returns its resolved KV config; KV errors name the
  // options as `spelling` writes them (flags, or JSON fields).
  Result<KvConfig> Validate(const GenerateOptions& options,
                            KvSpelling spelling = KvSpelling::kFlag) const;
  // A run of up to `max_tokens` tokens (-1: no bound) with the resolved cache
  // `kv` puts keys farther from the newest query than the model's trained
  // context, where the text degrades (docs/EVALUATION.md): the warning, or "".
  std::string TrainedContextWarning(const KvConfig& kv, int64_t max_tokens) const;
  // prefill_step: prompt tokens per forward pass (0 = the whole prompt), the
  // runner's option (runner.h), not the request's.
  Result<GenerateResult> Generate(const GenerateOptions& options, const TextCallback& on_text,
                                  int prefill_step = kDefaultPrefillStep);

 private:
  Engine() = default;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TokenTrieCache> token_trie_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvBlockPool> kv_pool_;
  bool kv_memory_default_ = true;
  bool prefix_cache_ = true;
  int n_ctx_ = 0;
};

}  // namespace rotor
