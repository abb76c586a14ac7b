#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <new>

#include "base/check.h"
#include "base/memory.h"
#include "base/timer.h"
#include "engine/sample_step.h"

namespace rotor {

struct Scheduler::Seq {
  SeqId id;
  GenerateOptions options;
  SeqCallback callback;
  GenerateResult result;
  KvConfig kv;           // resolved
  bool bounded = false;  // an evicting policy: all its blocks set aside when it joins
  // The text so far: the prompt, and for an unbounded sequence each token
  // fed after it (what a preempted sequence recomputes when it rejoins).
  std::vector<int32_t> text;
  bool started = false;  // joined once (a preempted sequence rejoins)
  int64_t attached = 0;  // tokens of `text` the cache started from (the feed runs the rest)
  std::unique_ptr<KvCache> cache;
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
  s->result.prompt_tokens =
      request.tokens.empty()
          ? engine_.tokenizer().Encode(request.prompt, s->options.add_bos, s->options.parse_special)
          : std::move(request.tokens);
  const int64_t n_prompt = static_cast<int64_t>(s->result.prompt_tokens.size());
  if (n_prompt == 0) return Status::Error("generate: the prompt is empty");
  const int n_vocab = engine_.model().config().n_vocab;
  for (int32_t t : s->result.prompt_tokens)
    if (t < 0 || t >= n_vocab)
      return Errorf("generate: token id {} out of range [0, {})", t, n_vocab);
  const KvShape shape = engine_.model().kv_shape(engine_.n_ctx());
  RETURN_IF_ERROR(FitsNewCache(kv, shape, n_prompt).WithContext("generate"));
  // A sequence the whole K/V budget cannot hold is refused now, not queued forever.
  KvBlockPool& pool = engine_.kv_pool();
  s->kv = kv;
  s->bounded = KvPolicyEvicts(kv.policy);
  if (pool.budget_bytes() > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<KvCache> probe, KvCache::Create(shape, kv, &pool));
    const int64_t b = pool.block_cells();
    const int64_t need = s->bounded ? probe->BlocksToFill() : (n_prompt + b - 1) / b + 1;
    const int64_t block = static_cast<int64_t>(pool.BlockBytes(kv.types));
    const int64_t capacity = pool.budget_bytes() / block;
    if (need > capacity)
      return Errorf(
          "generate: {} needs {} blocks of {} tokens ({} of {} K/V), more than the whole "
          "K/V budget: {}, {} blocks ({})",
          s->bounded ? fmt::format("a {}-cell {} cache", probe->n_cells(), kv.policy)
                     : fmt::format("a prompt of {} tokens", n_prompt),
          need, b, HumanBytes(need * block), KvTypesName(kv.types),
          HumanBytes(pool.budget_bytes()), capacity,
          engine_.kv_memory_default()
              ? fmt::format("the default for -c {}; --kv-memory sets it", engine_.n_ctx())
              : "--kv-memory");
  }
  s->text = s->result.prompt_tokens;
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

// First come, first served: a sequence whose KV memory is not free yet waits,
// and so do the ones behind it, so a large request is not starved.
Status Scheduler::Admit() {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_seqs) {
    Seq& s = *waiting_.front();
    bool started = false;
    try {
      started = Start(s);
      if (started && !s.started) Begin(s);
    } catch (const std::bad_alloc&) {
      // Its cache (cell tables, sampler) cannot be had: it alone ends.
      std::unique_ptr<Seq> gone = std::move(waiting_.front());
      waiting_.pop_front();
      gone->cache.reset();
      gone->result.error = fmt::format(
          "out of memory admitting the request (a cache for a context of {} tokens; lower -c or "
          "--parallel, or retry later)",
          engine_.n_ctx());
      gone->result.out_of_memory = true;
      Finish(*gone, FinishReason::kError);
      continue;
    }
    if (!started) {
      if (!running_.empty()) break;  // it waits for them to free memory
      // Nothing of this scheduler holds memory: others hold it (another
      // scheduler or chat session of the engine), and may never let go.
      std::unique_ptr<Seq> gone = std::move(waiting_.front());
      waiting_.pop_front();
      const KvBlockPool& pool = engine_.kv_pool();
      gone->result.error = fmt::format(
          "the K/V memory budget ({} MiB) is held by other sequences of this engine: {} blocks "
          "in use, {} available",
          pool.budget_bytes() >> 20, pool.stats().blocks_used, pool.Available(gone->kv.types));
      Finish(*gone, FinishReason::kError);
      continue;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return Status::Ok();
}

void Scheduler::Begin(Seq& s) {
  const GenerateOptions& o = s.options;
  s.sampler = std::make_unique<Sampler>(o.sampling, engine_.model().config().n_vocab);
  for (int32_t t : s.result.prompt_tokens) s.sampler->Accept(t);
  int n_predict = o.n_predict;
  if (n_predict < 0 && o.stop_at_context) {
    const int64_t n_ctx = engine_.n_ctx(), n_prompt = std::ssize(s.result.prompt_tokens);
    n_predict = static_cast<int>(n_prompt < n_ctx ? n_ctx - n_prompt : n_ctx);
  }
  s.step = std::make_unique<SampleStep>(engine_.tokenizer(), *s.sampler,
                                        StopRules{.n_predict = n_predict,
                                                  .ignore_eos = o.ignore_eos,
                                                  .stop = o.stop,
                                                  .trim_leading_space = o.trim_leading_space,
                                                  .logprobs = o.logprobs},
                                        &engine_.token_trie());
  s.start_ns = NowNs();
  s.started = true;
}

bool Scheduler::Start(Seq& s) {
  KvBlockPool& pool = engine_.kv_pool();
  const bool share = engine_.prefix_cache() && s.options.cache_prompt;
  // A sequence still prefilling blocks this one's prompt shares will publish
  // them shortly: waiting for it beats computing them twice.
  if (share)
    for (const auto& r : running_) {
      if (!r->options.cache_prompt || r->feed.n_run >= r->feed.n_prompt) continue;
      const auto [a, b] =
          std::mismatch(s.text.begin(), s.text.end(), r->text.begin(), r->text.end());
      const int64_t common = std::min<int64_t>(a - s.text.begin(), std::ssize(s.text) - 1);
      const int64_t done = r->attached + r->feed.n_run;
      if (common / pool.block_cells() > done / pool.block_cells()) return false;
    }
  auto created = KvCache::Create(engine_.model().kv_shape(engine_.n_ctx()), s.kv, &pool);
  CHECK(created.ok());  // the config was resolved by Add
  std::unique_ptr<KvCache> cache = std::move(*created);
  const int64_t n = static_cast<int64_t>(s.text.size());
  int64_t cached = 0;
  if (share)
    cached = cache->AttachPrefix(s.text, n - 1);  // the last token runs: its logits are needed
  else
    cache->DisablePublishing();
  if (s.bounded && !cache->ReserveAll()) {
    // Shared blocks it may have to copy cost a reservation each: without
    // the cached prefix it may fit.
    if (cached == 0) return false;
    cache = std::move(
        KvCache::Create(engine_.model().kv_shape(engine_.n_ctx()), s.kv, &pool).value());
    cached = 0;
    if (!cache->ReserveAll()) return false;
  } else if (!s.bounded) {
    // The prompt's blocks, and one for each growing sequence's next token.
    const int64_t b = pool.block_cells();
    int64_t need = (n - cached + b - 1) / b + 1;
    for (const auto& r : running_) need += r->bounded ? 0 : 1;
    if (need > pool.Available(s.kv.types)) return false;
  }
  if (!s.started) s.result.cached_tokens = cached;
  s.attached = cached;
  s.cache = std::move(cache);
  s.feed = Feed::Prompt(s.cache.get(), std::span<const int32_t>(s.text).subspan(cached));
  return true;
}

void Scheduler::Preempt() {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Seq& s = **it;
    if (s.bounded || s.done) continue;
    if (running_.size() == 1) {
      s.result.error = fmt::format(
          "the K/V memory budget ({} MiB) is full: the context cannot grow past {} tokens",
          engine_.kv_pool().budget_bytes() >> 20, s.cache->n_seen());
      return Finish(s, FinishReason::kContext);
    }
    s.cache.reset();  // its full blocks stay cached: the rejoin recomputes little
    s.feed = Feed{};
    waiting_.push_front(std::move(*it));
    running_.erase(std::next(it).base());
    ++n_preempted_;
    return;
  }
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
  s.cache.reset();  // its blocks go back to the pool (full ones stay cached) at once
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
    if (s.callback)
      s.callback(SeqEvent{s.id, t.token, t.text, false, nullptr,
                          t.logprobs ? &*t.logprobs : nullptr});
  }
  if (t.finish) {
    if (*t.finish == FinishReason::kError) s.result.error = t.error;
    return Finish(s, *t.finish);
  }
  s.next_token = t.token;
  if (!s.bounded) s.text.push_back(t.token);
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
  int64_t run_before = 0, run_after = 0;
  for (const Feed* f : feeds_) run_before += f->n_run;
  RETURN_IF_ERROR(runner_.Step(feeds_));
  bool starved = false;
  for (const Feed* f : feeds_) {
    run_after += f->n_run;
    starved = starved || f->waiting_for_memory;
  }
  const bool ran = run_after > run_before;

  for (size_t i = 0; i < feeds_.size(); ++i) {
    Seq& s = *owners_[i];
    if (!s.feed.status.ok()) {
      s.result.error = s.feed.status.message();
      s.result.out_of_memory = s.feed.out_of_memory;
      Finish(s, FinishReason::kError);
    } else if (s.feed.n_rows > 0 && s.feed.done()) {
      try {
        Advance(s, s.feed.rows);
      } catch (const std::bad_alloc&) {
        s.result.error = "out of memory sampling the next token; retry later";
        s.result.out_of_memory = true;
        Finish(s, FinishReason::kError);
      }
    }
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  if (starved && !ran) Preempt();
  std::erase_if(running_, [](const auto& s) { return s->done; });
  return Status::Ok();
}

}  // namespace rotor
