// Prompt scoring: the log-probability of each token of a text given the
// tokens before it, with the most likely alternatives (what /v1/completions
// returns for the prompt with echo and logprobs; perplexity averages the same
// numbers).
//
// As Embed (embed.h): the tokens run through a scratch full cache sized to
// them (on a private pool, freed with the scorer) and a Forward of its own,
// so the scheduler's sequences, the prefix cache and the KV budget are not
// touched. Each Step runs one chunk of `step` tokens with every position's
// logits, [step, n_vocab] floats at most (fewer when a large vocabulary
// would make that buffer exceed kScoreLogitsBytes), turned into
// TokenLogprobs before the next chunk: memory is the cache of the text plus
// one chunk's logits. Steps use the engine's thread pool: the caller runs
// them on the thread that owns it (the server: one Step per
// Batcher::RunOnEngineThread, so generation steps run between chunks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "engine/sample_step.h"
#include "kv/kv_config.h"

namespace rotor {

class Forward;
class KvCache;

// A chunk's logits take at most this many bytes (the chunk shrinks below
// ScoreOptions::step for a large vocabulary; one row at least).
inline constexpr int64_t kScoreLogitsBytes = int64_t{64} << 20;

struct ScoreOptions {
  int top = 0;                     // alternatives per token (TokenLogprobs::top)
  int step = kDefaultPrefillStep;  // tokens per forward pass (0 = all at once)
  KvTypes kv_types;                // of the scratch cache
};

// Scores one sequence of at most engine.n_ctx() tokens, chunk by chunk.
class PromptScorer {
 public:
  static Result<std::unique_ptr<PromptScorer>> Create(Engine& engine, std::vector<int32_t> tokens,
                                                      const ScoreOptions& options);
  ~PromptScorer();

  // Runs the next chunk (engine thread).
  Status Step();
  bool done() const { return n_run_ == std::ssize(tokens_); }
  // Tokens per Step.
  int step() const { return step_; }
  // Once done: [tokens.size()], entry 0 empty (nothing precedes the first
  // token), entry i the log-softmax of the logits after tokens[0..i) at
  // tokens[i] and the `top` best tokens there.
  std::vector<std::optional<TokenLogprobs>> Take() { return std::move(scores_); }

 private:
  PromptScorer(Engine& engine, std::vector<int32_t> tokens, const ScoreOptions& options);

  Engine& engine_;
  std::vector<int32_t> tokens_;
  int top_ = 0;
  int step_ = 1;
  int64_t n_run_ = 0;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Forward> forward_;
  std::vector<float> logits_;  // [step, n_vocab]
  std::vector<std::optional<TokenLogprobs>> scores_;
};

// Every Step at once.
Result<std::vector<std::optional<TokenLogprobs>>> ScoreTokens(Engine& engine,
                                                              std::span<const int32_t> tokens,
                                                              const ScoreOptions& options);

}  // namespace rotor
