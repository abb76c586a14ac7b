#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/timer.h"
#include "engine/sample_step.h"

namespace rotor {

struct Scheduler::Seq {
  SeqId id;
  GenerateOptions options;
  SeqCallback callback;
  GenerateResult result;
  std::unique_ptr<KvCache> cache;
  int64_t kv_bytes = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<SampleStep> step;
  Feed feed;                // what runs next: the prompt, then each sampled token
  int32_t next_token = -1;  // the token `feed` holds while decoding
  bool cancelled = false;
  bool done = false;
  int64_t start_ns = 0, first_token_ns = 0;
};

Scheduler::Scheduler(Engine& engine, const Options& options)
    : engine_(engine),
      options_(options),
      runner_(engine.model(), engine.pool(),
              RunnerOptions{.prefill_step = options.prefill_step,
                            .max_seqs = options.max_seqs,
                            .n_ctx = engine.n_ctx()}) {
  CHECK_GT(options.max_seqs, 0);
  feeds_.reserve(options.max_seqs);
  owners_.reserve(options.max_seqs);
}

Scheduler::~Scheduler() = default;

Result<SeqId> Scheduler::Add(SeqRequest request, SeqCallback callback) {
  ASSIGN_OR_RETURN(const KvConfig kv, engine_.Validate(request.options, request.spelling));
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
  const KvShape shape = engine_.model().config().kv_shape(engine_.n_ctx());
  RETURN_IF_ERROR(FitsNewCache(kv, shape, n_prompt).WithContext("generate"));
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
    const GenerateOptions& o = s.options;
    s.sampler = std::make_unique<Sampler>(o.sampling, engine_.model().config().n_vocab);
    for (int32_t t : s.result.prompt_tokens) s.sampler->Accept(t);
    s.step = std::make_unique<SampleStep>(
        engine_.tokenizer(), *s.sampler,
        StopRules{.n_predict = o.n_predict, .ignore_eos = o.ignore_eos, .stop = o.stop});
    s.feed = Feed::Prompt(s.cache.get(), s.result.prompt_tokens);
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
  // Held-back text, unless nobody reads it (cancelled) or it follows a stop string.
  if (reason != FinishReason::kCancelled && s.step) {
    const std::string tail = s.step->Flush().text;
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

void Scheduler::Advance(Seq& s, const float* logits) {
  const GenerateOptions& o = s.options;
  const int n_vocab = engine_.model().config().n_vocab;
  const Sampled t = s.step->Next(std::span<const float>(logits, n_vocab), *s.cache);
  if (t.token >= 0 && s.first_token_ns == 0) s.first_token_ns = NowNs();
  if (t.generated) {
    ++s.result.n_generated;
    if (o.collect_output) {
      s.result.tokens.push_back(t.token);
      s.result.text += t.text;
    }
    if (o.on_token) o.on_token(s.result.n_generated);
    if (s.callback) s.callback(SeqEvent{s.id, t.token, t.text, false, nullptr});
  }
  if (t.finish) return Finish(s, *t.finish);
  s.next_token = t.token;
  s.feed = Feed::Continue(s.cache.get(), std::span<const int32_t>(&s.next_token, 1));
}

Status Scheduler::Step() {
  // Cancelled sequences leave first, freeing their slot and cache.
  for (auto& s : running_)
    if (s->cancelled) Finish(*s, FinishReason::kCancelled);
  std::erase_if(running_, [](const auto& s) { return s->done; });
  RETURN_IF_ERROR(Admit());
  if (running_.empty()) return Status::Ok();

  // One ubatch: the sampled token of every decoding sequence, then prompt
  // chunks in arrival order while they fit.
  feeds_.clear();
  owners_.clear();
  for (bool decoding : {true, false})
    for (auto& s : running_) {
      if ((s->feed.n_prompt == 0) != decoding) continue;
      feeds_.push_back(&s->feed);
      owners_.push_back(s.get());
    }
  RETURN_IF_ERROR(runner_.Step(feeds_));

  for (size_t i = 0; i < feeds_.size(); ++i) {
    Seq& s = *owners_[i];
    if (!s.feed.status.ok()) {
      s.result.error = s.feed.status.message();
      Finish(s, FinishReason::kError);
    } else if (s.feed.n_rows > 0 && s.feed.done()) {
      Advance(s, s.feed.rows);
    }
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  return Status::Ok();
}

}  // namespace rotor
