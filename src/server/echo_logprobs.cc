// /v1/completions with echo and logprobs: the prompt's own log-probabilities.
// Each distinct prompt of the request is scored once (engine/score.h: a
// scratch cache and a forward pass with every position's logits, apart from
// the scheduler's sequences and the prefix cache), one chunk per visit to the
// engine thread so that generation steps run between chunks; the choices of a
// prompt share its entries. The request's prompts have passed Prepare's
// checks (context limit, vocabulary) before any of this runs.
#include <fmt/format.h>

#include <new>

#include "engine/score.h"
#include "server/server.h"

namespace rotor::serve {

std::optional<ApiError> Server::ScorePrompts(HttpExchange& ex, const ApiRequest& api,
                                             const std::vector<SeqRequest>& seqs,
                                             const std::vector<std::string>& echoes,
                                             std::vector<nlohmann::json>* out) {
  const ScoreOptions so{
      .top = api.logprobs, .step = options_.prefill_step, .kv_types = api.options.kv.types};
  const size_t n_prompts = seqs.size() / static_cast<size_t>(api.n);
  // A policy that evicts may take a prompt beyond the context; the scoring
  // pass keeps every token (a full cache), so the context bounds it.
  for (size_t p = 0; p < n_prompts; ++p)
    if (const int64_t n = std::ssize(seqs[p * api.n].tokens); n > engine_->n_ctx())
      return BadRequest(
          fmt::format("'prompt'{} has {} tokens, more than the context size {}: "
                      "'echo' with 'logprobs' scores every token",
                      n_prompts > 1 ? fmt::format("[{}]", p) : "", n, engine_->n_ctx()),
          "prompt", "context_length_exceeded");
  const ApiError shutting_down{503, "the server is shutting down", "server_error", "", ""};
  for (size_t p = 0; p < n_prompts; ++p) {
    const std::vector<int32_t>& tokens = seqs[p * api.n].tokens;
    // The prompt passed every check of the request, so what fails here is
    // memory (the scratch cache, a chunk's logits): this request's 503.
    Result<std::unique_ptr<PromptScorer>> scorer = Status::Error("not run");
    if (!batcher_->RunOnEngineThread([&] {
          try {
            scorer = PromptScorer::Create(*engine_, tokens, so);
          } catch (const std::bad_alloc&) {
            scorer = Status::Error("out of memory");
          }
        }))
      return shutting_down;
    Status st = scorer.status();
    while (st.ok() && !(*scorer)->done()) {
      if (ex.gone()) return std::nullopt;
      if (!batcher_->RunOnEngineThread([&] {
            try {
              st = (*scorer)->Step();
            } catch (const std::bad_alloc&) {
              st = Status::Error("out of memory");
            }
          }))
        return shutting_down;
    }
    if (!st.ok())
      return ApiError{503, fmt::format("scoring the prompt: {}; retry later", st.message()),
                      "server_error", "", ""};
    const std::vector<std::optional<TokenLogprobs>> scores = (*scorer)->Take();
    out->push_back(PromptLogprobsJson(engine_->tokenizer(), tokens, scores, std::ssize(echoes[p])));
  }
  return std::nullopt;
}

}  // namespace rotor::serve
