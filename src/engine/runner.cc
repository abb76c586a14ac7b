#include "engine/runner.h"

#include <algorithm>

#include "base/check.h"

namespace rotor {

Status FitsCache(const KvCache& cache, int64_t n_tokens) {
  const int64_t room = cache.Remaining();
  if (room >= 0 && n_tokens > room)
    return Errorf("kv: {} tokens do not fit: the context has room for {} more", n_tokens, room);
  return Status::Ok();
}

Status FitsNewCache(const KvConfig& resolved, const KvShape& shape, int64_t n_prompt) {
  const int64_t max_prompt = KvMaxPrompt(resolved, shape);
  if (max_prompt >= 0 && n_prompt > max_prompt)
    return Errorf("the prompt has {} tokens, more than the context size {}", n_prompt, max_prompt);
  return Status::Ok();
}

namespace {

int ContextOf(const Model& model, const RunnerOptions& o) {
  return o.n_ctx > 0 ? o.n_ctx : model.config().n_ctx_train;
}

int StepOf(const Model& model, const RunnerOptions& o) {
  CHECK_GE(o.prefill_step, 0);
  return o.prefill_step > 0 ? o.prefill_step : ContextOf(model, o);
}

int MaxTokensOf(const Model& model, const RunnerOptions& o) {
  CHECK_GT(o.max_seqs, 0);
  const int step = StepOf(model, o);
  const int max_tokens = o.max_tokens > 0 ? o.max_tokens : step + o.max_seqs - 1;
  CHECK_GE(max_tokens, step);  // a chunk always fits an empty ubatch
  return max_tokens;
}

}  // namespace

Runner::Runner(const Model& model, ThreadPool& pool, const RunnerOptions& options)
    : step_(StepOf(model, options)),
      forward_(model, pool, MaxTokensOf(model, options), ContextOf(model, options)) {
  inputs_.reserve(options.max_seqs);
  owners_.reserve(options.max_seqs);
}

int64_t Runner::NextChunk(const Feed& f) const {
  const int64_t end = f.n_run < f.n_prompt ? f.n_prompt : f.size();
  return std::min<int64_t>(step_, end - f.n_run);
}

Status Runner::Step(std::span<Feed* const> feeds) {
  // 1-2. The ubatch: each feed's next chunk while it fits; a feed's first
  // chunk asks its cache first.
  inputs_.clear();
  owners_.clear();
  int64_t budget = forward_.max_tokens();
  // New KV blocks taken so far, per pool and element type (callers share one
  // pool, perhaps with two types: a short linear list).
  taken_.clear();
  bool full = false, no_memory = false;
  for (Feed* f : feeds) {
    f->rows = nullptr;
    f->rows_first = f->n_rows = 0;
    f->waiting_for_memory = false;
    if (f->done()) continue;
    const int64_t n = NextChunk(*f);
    full = full || n > budget;
    if (full || no_memory) {
      f->waiting_for_memory = no_memory;
      continue;
    }
    if (f->n_run == 0) {
      f->status = FitsCache(*f->cache, f->size());
      if (f->status.ok() && f->n_prompt > 0) f->status = f->cache->ExpectPrompt(f->n_prompt);
      if (!f->status.ok()) continue;
    }
    const KvBlockPool& pool = f->cache->pool();
    const KvTypes type = f->cache->config().types;
    int64_t* taken = nullptr;
    for (auto& t : taken_)
      if (t.pool == &pool && t.type == type) taken = &t.blocks;
    if (taken == nullptr) {
      taken_.push_back({&pool, type, 0});
      taken = &taken_.back().blocks;
    }
    const int64_t need = f->cache->BlocksFor(static_cast<int32_t>(n));
    if (*taken + need > pool.Available(type)) {
      f->waiting_for_memory = no_memory = true;
      continue;
    }
    *taken += need;
    const int64_t b = f->n_run, e = b + n;
    LogitsWanted want = LogitsWanted::kAll;
    if (e <= f->logits_from)
      want = LogitsWanted::kNone;
    else if (f->logits_from == e - 1)
      want = LogitsWanted::kLast;
    inputs_.push_back(SeqInput{f->cache, f->tokens.subspan(b, n), want, e <= f->n_prompt});
    owners_.push_back(f);
    budget -= n;
  }
  if (inputs_.empty()) return Status::Ok();

  // 3. The forward pass.
  const size_t n_vocab = model().config().n_vocab;
  const size_t rows = static_cast<size_t>(Forward::OutputRows(inputs_));
  if (logits_.size() < rows * n_vocab) logits_.resize(rows * n_vocab);
  if (Status st = forward_.Run(inputs_, logits_.data()); !st.ok()) {
    // Memory one feed needed and could not have: that feed ends, none ran,
    // the others run at the next step.
    const int failed = forward_.failed_input();
    if (failed < 0) return st;
    owners_[failed]->status = std::move(st);
    owners_[failed]->out_of_memory = true;
    return Status::Ok();
  }

  // 4. Each feed's rows, sequence by sequence as Forward::Run wrote them.
  const float* at = logits_.data();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Feed& f = *owners_[i];
    const int64_t b = f.n_run, e = b + static_cast<int64_t>(inputs_[i].tokens.size());
    switch (inputs_[i].logits) {
      case LogitsWanted::kNone:
        break;
      case LogitsWanted::kLast:
        f.rows = at, f.rows_first = e - 1, f.n_rows = 1;
        at += n_vocab;
        break;
      case LogitsWanted::kAll: {
        const int64_t first = std::max(b, f.logits_from);
        f.rows = at + (first - b) * n_vocab, f.rows_first = first, f.n_rows = e - first;
        at += (e - b) * n_vocab;
        break;
      }
    }
    f.n_run = e;
  }
  return Status::Ok();
}

Status Runner::Run(Feed& feed, const LogitsSink& sink) {
  Feed* const one[1] = {&feed};
  while (!feed.done()) {
    const int64_t before = feed.n_run;
    RETURN_IF_ERROR(Step(one));
    if (!feed.status.ok()) break;
    if (feed.waiting_for_memory)
      return Errorf("kv: the KV memory budget ({} MiB) is full",
                    feed.cache->pool().budget_bytes() >> 20);
    CHECK_GT(feed.n_run, before);
    if (sink && feed.n_rows > 0) RETURN_IF_ERROR(sink(feed.rows_first, feed.n_rows, feed.rows));
  }
  return feed.status;
}

}  // namespace rotor
