#include "engine/score.h"

#include <algorithm>

#include "base/check.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace rotor {

PromptScorer::PromptScorer(Engine& engine, std::vector<int32_t> tokens, const ScoreOptions& options)
    : engine_(engine), tokens_(std::move(tokens)), top_(options.top) {}

PromptScorer::~PromptScorer() = default;

Result<std::unique_ptr<PromptScorer>> PromptScorer::Create(Engine& engine,
                                                           std::vector<int32_t> tokens,
                                                           const ScoreOptions& options) {
  const Model& model = engine.model();
  const int64_t n = std::ssize(tokens);
  const int64_t n_vocab = model.config().n_vocab;
  if (n == 0) return Status::Error("score: no tokens");
  if (n > engine.n_ctx())
    return Errorf("score: {} tokens, more than the context size {}", n, engine.n_ctx());
  if (options.top < 0) return Errorf("score: top {} must be >= 0", options.top);
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab)
      return Errorf("score: token id {} is out of range [0, {})", t, n_vocab);
  std::unique_ptr<PromptScorer> s(new PromptScorer(engine, std::move(tokens), options));
  KvConfig kv;  // full
  kv.types = options.kv_types;
  ASSIGN_OR_RETURN(s->cache_, KvCache::Create(model.kv_shape(static_cast<int>(n)), kv,
                                              /*pool=*/nullptr));
  const int64_t max_rows =
      std::max<int64_t>(1, kScoreLogitsBytes / (n_vocab * static_cast<int64_t>(sizeof(float))));
  s->step_ = static_cast<int>(std::min({options.step > 0 ? options.step : n, n, max_rows}));
  s->forward_ = std::make_unique<Forward>(model, engine.pool(), s->step_, static_cast<int>(n));
  s->logits_.resize(static_cast<size_t>(s->step_ * n_vocab));
  s->scores_.resize(static_cast<size_t>(n));
  return s;
}

Status PromptScorer::Step() {
  CHECK(!done());
  const int64_t n = std::ssize(tokens_);
  const int64_t n_vocab = engine_.model().config().n_vocab;
  const int64_t b = n_run_, rows = std::min<int64_t>(step_, n - b);
  const SeqInput in{cache_.get(), std::span<const int32_t>(tokens_).subspan(b, rows),
                    LogitsWanted::kAll, /*prompt=*/true};
  RETURN_IF_ERROR(forward_->Run(std::span(&in, 1), logits_.data()));
  // Row r predicts token b + r + 1 (the last token's row predicts nothing).
  for (int64_t r = 0; r < rows && b + r + 1 < n; ++r)
    ComputeLogprobs(std::span<const float>(logits_).subspan(r * n_vocab, n_vocab),
                    tokens_[b + r + 1], top_, &scores_[b + r + 1].emplace());
  n_run_ += rows;
  return Status::Ok();
}

Result<std::vector<std::optional<TokenLogprobs>>> ScoreTokens(Engine& engine,
                                                              std::span<const int32_t> tokens,
                                                              const ScoreOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<PromptScorer> s,
                   PromptScorer::Create(engine, {tokens.begin(), tokens.end()}, options));
  while (!s->done()) RETURN_IF_ERROR(s->Step());
  return s->Take();
}

}  // namespace rotor
