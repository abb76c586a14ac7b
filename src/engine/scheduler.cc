#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/timer.h"
#include "engine/stop_matcher.h"

namespace rotor {

struct Scheduler::Seq {
  SeqId id;
  GenerateOptions options;
  SeqCallback callback;
  GenerateResult result;
  std::unique_ptr<KvCache> cache;
  int64_t kv_bytes = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stops;
  size_t prefilled = 0;           // prompt tokens already run
  int32_t next_token = -1;        // sampled, to be run at the next step
  bool cancelled = false;
  bool done = false;
  int64_t start_ns = 0, first_token_ns = 0;
};

Scheduler::Scheduler(Engine& engine, const Options& options)
    : engine_(engine), options_(options) {
  CHECK_GT(options.max_seqs, 0);
  const int step = options.prefill_step > 0 ? options.prefill_step : engine.n_ctx();
  forward_ = std::make_unique<Forward>(engine.model(), engine.pool(), step + options.max_seqs,
                                       engine.n_ctx());
  logits_.resize(static_cast<size_t>(options.max_seqs) * engine.model().config().n_vocab);
  inputs_.reserve(options.max_seqs);
  owners_.reserve(options.max_seqs);
}

Scheduler::~Scheduler() = default;

Result<SeqId> Scheduler::Add(SeqRequest request, SeqCallback callback) {
  RETURN_IF_ERROR(engine_.Validate(request.options));
  if (static_cast<int>(waiting_.size()) >= options_.max_queue)
    return Errorf("scheduler: the queue is full ({} waiting)", waiting_.size());
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->options = std::move(request.options);
  s->callback = std::move(callback);
  s->result.prompt_tokens = request.tokens.empty()
                                ? engine_.tokenizer().Encode(request.prompt, s->options.add_bos,
                                                             s->options.parse_special)
                                : std::move(request.tokens);
  const int64_t n_prompt = static_cast<int64_t>(s->result.prompt_tokens.size());
  if (n_prompt == 0) return Status::Error("generate: the prompt is empty");
  const int n_vocab = engine_.model().config().n_vocab;
  for (int32_t t : s->result.prompt_tokens)
    if (t < 0 || t >= n_vocab) return Errorf("generate: token id {} out of range [0, {})", t, n_vocab);
  ASSIGN_OR_RETURN(KvConfig kv, ResolveKvConfig(s->options.kv,
                                                engine_.model().config().kv_shape(engine_.n_ctx())));
  const int64_t max_prompt = KvMaxPrompt(kv, engine_.model().config().kv_shape(engine_.n_ctx()));
  if (max_prompt >= 0 && n_prompt > max_prompt)
    return Errorf("generate: the prompt has {} tokens, more than the context size {} (raise -c)",
                  n_prompt, max_prompt);
  const SeqId id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

void Scheduler::Cancel(SeqId id) {
  for (auto& s : running_)
    if (s->id == id) s->cancelled = true;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    std::unique_ptr<Seq> s = std::move(*it);
    waiting_.erase(it);
    Finish(*s, FinishReason::kCancelled);
    return;
  }
}

int64_t Scheduler::kv_cells_used() const {
  int64_t n = 0;
  for (const auto& s : running_) n += s->cache->n_used();
  return n;
}

// First come, first served: a sequence whose KV reservation does not fit waits,
// and so do the ones behind it, so a large request is not starved.
Status Scheduler::Admit() {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_seqs) {
    Seq& s = *waiting_.front();
    ASSIGN_OR_RETURN(s.cache, KvCache::Create(engine_.model().config().kv_shape(engine_.n_ctx()),
                                              s.options.kv));
    s.kv_bytes = static_cast<int64_t>(s.cache->memory_bytes());
    if (options_.kv_budget_bytes > 0 && s.kv_bytes > options_.kv_budget_bytes)
      return Errorf("scheduler: a sequence's KV cache needs {} bytes, more than the budget {}",
                    s.kv_bytes, options_.kv_budget_bytes);
    if (options_.kv_budget_bytes > 0 && kv_reserved_ + s.kv_bytes > options_.kv_budget_bytes) {
      s.cache.reset();
      break;
    }
    kv_reserved_ += s.kv_bytes;
    const int n_vocab = engine_.model().config().n_vocab;
    s.sampler = std::make_unique<Sampler>(s.options.sampling, n_vocab);
    for (int32_t t : s.result.prompt_tokens) s.sampler->Accept(t);
    s.decoder = std::make_unique<StreamDecoder>(engine_.tokenizer());
    s.stops = std::make_unique<StopMatcher>(s.options.stop);
    s.start_ns = NowNs();
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return Status::Ok();
}

void Scheduler::Finish(Seq& s, FinishReason reason) {
  if (s.done) return;
  s.done = true;
  s.result.finish = reason;
  const int64_t now = NowNs();
  if (s.first_token_ns > 0) {
    s.result.prompt_ns = s.first_token_ns - s.start_ns;
    s.result.gen_ns = now - s.first_token_ns;
  } else if (s.start_ns > 0) {
    s.result.prompt_ns = now - s.start_ns;
  }
  if (reason != FinishReason::kStop && reason != FinishReason::kCancelled && s.decoder) {
    std::string tail = s.stops->Push(s.decoder->Flush()) + s.stops->Flush();
    if (!tail.empty()) {
      if (s.options.collect_output) s.result.text += tail;
      if (s.callback) s.callback(SeqEvent{s.id, -1, tail, false, nullptr});
    }
  }
  if (s.cache) {
    kv_reserved_ -= s.kv_bytes;
    s.cache.reset();  // the cache is freed at once
  }
  if (s.callback) s.callback(SeqEvent{s.id, -1, {}, true, &s.result});
}

bool Scheduler::Advance(Seq& s, const float* logits) {
  const GenerateOptions& o = s.options;
  const int n_vocab = engine_.model().config().n_vocab;
  if (o.n_predict >= 0 && s.result.n_generated >= o.n_predict) {
    Finish(s, FinishReason::kLength);
    return false;
  }
  const int32_t token = s.sampler->Sample(std::span<const float>(logits, n_vocab));
  s.sampler->Accept(token);
  if (s.first_token_ns == 0) s.first_token_ns = NowNs();
  if (!o.ignore_eos && engine_.tokenizer().IsEndOfGeneration(token)) {
    Finish(s, FinishReason::kEos);
    return false;
  }
  ++s.result.n_generated;
  if (o.collect_output) s.result.tokens.push_back(token);
  if (o.on_token) o.on_token(s.result.n_generated);
  const std::string text = s.stops->Push(s.decoder->Push(token));
  if (o.collect_output) s.result.text += text;
  if (s.callback) s.callback(SeqEvent{s.id, token, text, false, nullptr});
  if (s.stops->stopped()) {
    Finish(s, FinishReason::kStop);
    return false;
  }
  if (o.n_predict >= 0 && s.result.n_generated >= o.n_predict) {
    Finish(s, FinishReason::kLength);
    return false;
  }
  if (s.cache->Remaining() == 0) {
    Finish(s, FinishReason::kContext);
    return false;
  }
  s.next_token = token;
  return true;
}

Status Scheduler::Step() {
  // Cancelled sequences leave first, freeing their slot and cache.
  for (auto& s : running_)
    if (s->cancelled) Finish(*s, FinishReason::kCancelled);
  std::erase_if(running_, [](const auto& s) { return s->done; });
  RETURN_IF_ERROR(Admit());
  if (running_.empty()) return Status::Ok();

  // One token of every decoding sequence, then whole prompt chunks while they fit.
  const int step = options_.prefill_step > 0 ? options_.prefill_step : forward_->max_tokens();
  std::vector<SeqInput>& inputs = inputs_;
  std::vector<Seq*>& owners = owners_;
  inputs.clear();
  owners.clear();
  int budget = forward_->max_tokens();
  for (auto& s : running_) {
    if (s->prefilled < s->result.prompt_tokens.size()) continue;
    inputs.push_back(SeqInput{s->cache.get(), std::span<const int32_t>(&s->next_token, 1)});
    owners.push_back(s.get());
    --budget;
  }
  for (auto& s : running_) {
    const size_t n_prompt = s->result.prompt_tokens.size();
    if (s->prefilled >= n_prompt) continue;
    const int chunk = static_cast<int>(std::min<size_t>(step, n_prompt - s->prefilled));
    if (chunk > budget) break;  // keeps chunk boundaries the same as alone
    const bool last = s->prefilled + chunk == n_prompt;
    inputs.push_back(SeqInput{s->cache.get(),
                              std::span<const int32_t>(s->result.prompt_tokens).subspan(s->prefilled, chunk),
                              last ? LogitsWanted::kLast : LogitsWanted::kNone});
    owners.push_back(s.get());
    budget -= chunk;
  }
  RETURN_IF_ERROR(forward_->Run(inputs, logits_.data()));

  const int n_vocab = engine_.model().config().n_vocab;
  int row = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Seq& s = *owners[i];
    if (s.prefilled < s.result.prompt_tokens.size()) {
      s.prefilled += inputs[i].tokens.size();
      if (inputs[i].logits == LogitsWanted::kNone) continue;
    }
    Advance(s, logits_.data() + static_cast<size_t>(row++) * n_vocab);
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  return Status::Ok();
}

}  // namespace rotor
