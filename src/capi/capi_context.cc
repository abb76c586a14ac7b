// The C API (include/rotor/rotor.h): contexts, their sequences, evaluation in
// chunks, sequence operations and KV files.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "capi_internal.h"
#include "kv/kv_file.h"

using rotor::capi::Count;
using rotor::capi::Guard;
using rotor::capi::Make;
using rotor::capi::Seq;

namespace {

// The sequence `id` of ctx, or nullptr.
Seq* Find(rotor_context* ctx, int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(ctx->seqs.size())) return nullptr;
  return ctx->seqs[id].get();
}

// Looks the sequence up under the model's lock, held to the end of the call:
// looked up before it, a sequence freed by another thread was used freed.
#define ROTOR_CAPI_SEQ(call, ctx, id, seq)                                                    \
  ROTOR_CAPI_REQUIRE(ctx != nullptr, "{}: ctx is NULL", call);                               \
  std::lock_guard<std::mutex> lock(ctx->model->mu);                                           \
  Seq* seq = Find(ctx, id);                                                                   \
  ROTOR_CAPI_REQUIRE(seq != nullptr, "{}: no sequence {} in this context", call, id);

int32_t AddSeq(rotor_context* ctx, std::unique_ptr<Seq> seq) {
  for (size_t i = 0; i < ctx->seqs.size(); ++i)
    if (!ctx->seqs[i]) {
      ctx->seqs[i] = std::move(seq);
      return static_cast<int32_t>(i);
    }
  ctx->seqs.push_back(std::move(seq));
  return static_cast<int32_t>(ctx->seqs.size() - 1);
}

// One entry of rotor_eval_batch on its way.
struct Pending {
  int32_t id;
  Seq* seq;
  rotor::Feed feed;
  float* all_logits;  // [n_tokens, n_vocab] or null
  int64_t attached;   // tokens taken from the prefix cache, not run
  bool reported = false;
};

// Runs the entries stepped together; returns the first failure (by entry order).
rotor_status* Run(rotor_context* ctx, std::vector<Pending>& todo) {
  const rotor::Engine& engine = *ctx->model->engine;
  const int32_t n_vocab = engine.tokenizer().n_vocab();
  rotor_status* first_error = nullptr;
  auto fail = [&](Pending& p, rotor_code code, const std::string& message) {
    p.reported = true;
    if (p.feed.status.ok()) p.feed.status = rotor::Status::Error(message);
    rotor_status* err = Make(code, fmt::format("sequence {}: {}", p.id, message));
    if (!first_error) first_error = err;
    else rotor_status_free(err);
  };
  for (Pending& p : todo) {
    for (int64_t i = 0; i < p.feed.size(); ++i) {
      const int32_t t = p.feed.tokens[i];
      if (t < 0 || t >= n_vocab) {
        fail(p, ROTOR_ERR_INVALID_ARGUMENT,
             fmt::format("token {} (at {}) out of range [0, {})", t, i, n_vocab));
        break;
      }
    }
    if (p.reported) continue;
    if (rotor::Status s = rotor::FitsCache(*p.seq->cache, p.feed.size()); !s.ok()) {
      fail(p, ROTOR_ERR_CONTEXT_FULL, s.message());
      continue;
    }
    p.seq->logits.clear();
  }
  while (true) {
    std::vector<rotor::Feed*> feeds;
    std::vector<int64_t> before;
    for (Pending& p : todo)
      if (!p.feed.done()) {
        feeds.push_back(&p.feed);
        before.push_back(p.feed.n_run);
      }
    if (feeds.empty()) break;
    if (rotor::Status s = ctx->runner->Step(feeds); !s.ok()) {
      for (Pending& p : todo)
        if (!p.feed.done()) fail(p, ROTOR_ERR_INTERNAL, s.message());
      break;
    }
    bool progress = false;
    for (size_t i = 0; i < feeds.size(); ++i) progress |= feeds[i]->n_run > before[i];
    for (Pending& p : todo) {
      const rotor::Feed& f = p.feed;
      if (f.n_rows == 0 || f.rows == nullptr) continue;
      if (p.all_logits)
        std::memcpy(p.all_logits + (p.attached + f.rows_first) * n_vocab, f.rows,
                    sizeof(float) * n_vocab * f.n_rows);
      if (f.rows_first + f.n_rows == f.size())
        p.seq->logits.assign(f.rows + (f.n_rows - 1) * n_vocab, f.rows + f.n_rows * n_vocab);
    }
    // No feed ran: the first that waits for K/V blocks waits for good,
    // since nothing here frees any.
    if (!progress)
      for (Pending& p : todo)
        if (!p.feed.done() && p.feed.waiting_for_memory) {
          fail(p, ROTOR_ERR_OUT_OF_MEMORY,
               fmt::format("the model's K/V memory ({} MiB) has no room for {} more tokens",
                           p.feed.cache->pool().budget_bytes() >> 20,
                           p.feed.size() - p.feed.n_run));
          break;
        }
  }
  for (Pending& p : todo) {
    rotor::Feed& f = p.feed;
    if (!f.status.ok() && !p.reported) fail(p, ROTOR_ERR_CONTEXT_FULL, f.status.message());
    // The tokens that ran are the text's.
    p.seq->tokens.insert(p.seq->tokens.end(), f.tokens.begin(), f.tokens.begin() + f.n_run);
    if (f.n_run < f.size()) p.seq->logits.clear();
  }
  return first_error;
}

}  // namespace

extern "C" {

rotor_context_params rotor_context_default_params(void) {
  return rotor_context_params{.max_seqs = 1, .prefill_step = rotor::kDefaultPrefillStep};
}

rotor_status* rotor_context_new(rotor_model* model, const rotor_context_params* params,
                                rotor_context** out) {
  return Guard("rotor_context_new", [&]() -> rotor_status* {
    rotor::capi::ResetOut<rotor_context*>(out, nullptr);
    ROTOR_CAPI_NOT_NULL("rotor_context_new", out);
    ROTOR_CAPI_NOT_NULL("rotor_context_new", model);
    ROTOR_CAPI_REQUIRE_WEIGHTS(model, "rotor_context_new");
    const rotor_context_params p = params ? *params : rotor_context_default_params();
    ROTOR_CAPI_REQUIRE(p.max_seqs >= 1 && p.max_seqs <= 4096,
                       "rotor_context_new: max_seqs {} out of range [1, 4096]", p.max_seqs);
    ROTOR_CAPI_REQUIRE(p.prefill_step >= 0 && p.prefill_step <= rotor::kMaxPrefillStep,
                       "rotor_context_new: prefill_step {} out of range [0, {}]", p.prefill_step,
                       rotor::kMaxPrefillStep);
    std::lock_guard<std::mutex> lock(model->mu);
    auto ctx = std::make_unique<rotor_context>();
    ctx->model = model;
    ctx->max_seqs = p.max_seqs;
    ctx->prefill_step = p.prefill_step > 0 ? p.prefill_step : rotor::kDefaultPrefillStep;
    rotor::Engine& e = *model->engine;
    ctx->runner = std::make_unique<rotor::Runner>(
        e.model(), e.pool(),
        rotor::RunnerOptions{.prefill_step = ctx->prefill_step,
                             .max_seqs = p.max_seqs,
                             .max_tokens = ctx->prefill_step * p.max_seqs,
                             .n_ctx = e.n_ctx()});
    *out = ctx.release();
    return nullptr;
  });
}

void rotor_context_free(rotor_context* ctx) {
  if (!ctx) return;
  std::lock_guard<std::mutex> lock(ctx->model->mu);
  ctx->seqs.clear();  // their blocks go back to the model's pool
  ctx->runner.reset();
  delete ctx;
}

rotor_status* rotor_seq_new(rotor_context* ctx, const rotor_kv_config* kv, int32_t* seq) {
  return Guard("rotor_seq_new", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int32_t>(seq, -1);
    ROTOR_CAPI_NOT_NULL("rotor_seq_new", seq);
    ROTOR_CAPI_NOT_NULL("rotor_seq_new", ctx);
    std::lock_guard<std::mutex> lock(ctx->model->mu);
    rotor::Engine& e = *ctx->model->engine;
    const rotor::KvConfig config = kv ? kv->Build() : rotor::KvConfig{};
    // Checked as the configuration was set: by field name (KvCache::Create
    // would name the flags).
    if (rotor::Result<rotor::KvConfig> r = rotor::ResolveKvConfig(
            config, e.model().kv_shape(e.n_ctx()), rotor::KvSpelling::kField);
        !r.ok())
      return rotor::capi::FromStatus(r.status());
    rotor::Result<std::unique_ptr<rotor::KvCache>> cache = rotor::KvCache::Create(
        e.model().kv_shape(e.n_ctx()), config, &e.kv_pool());
    if (!cache.ok()) return rotor::capi::FromStatus(cache.status());
    if (!e.prefix_cache()) (*cache)->DisablePublishing();
    auto s = std::make_unique<Seq>();
    s->cache = std::move(*cache);
    *seq = AddSeq(ctx, std::move(s));
    return nullptr;
  });
}

rotor_status* rotor_seq_free(rotor_context* ctx, int32_t id) {
  return Guard("rotor_seq_free", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_seq_free", ctx, id, seq);
    ctx->seqs[id].reset();
    return nullptr;
  });
}

rotor_status* rotor_eval(rotor_context* ctx, int32_t id, const int32_t* tokens, size_t n_tokens,
                         float* all_logits) {
  return Guard("rotor_eval", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_eval", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(tokens || n_tokens == 0, "rotor_eval: tokens is NULL");
    // Past int32, a count read as int64 went negative (a CHECK) or appended nothing.
    ROTOR_CAPI_REQUIRE(n_tokens <= static_cast<size_t>(INT32_MAX),
                       "rotor_eval: n_tokens {} is more than any context holds", n_tokens);
    if (n_tokens == 0) return nullptr;
    // Every id before anything is attached: a bad one past a cached prefix
    // left the prefix appended to a call that failed.
    const int32_t n_vocab = ctx->model->engine->tokenizer().n_vocab();
    for (size_t i = 0; i < n_tokens; ++i)
      ROTOR_CAPI_REQUIRE(tokens[i] >= 0 && tokens[i] < n_vocab,
                         "rotor_eval: sequence {}: token {} (at {}) out of range [0, {})", id,
                         tokens[i], i, n_vocab);
    std::span<const int32_t> text(tokens, n_tokens);
    std::vector<Pending> todo(1);
    Pending& p = todo[0];
    p.id = id;
    p.seq = seq;
    p.all_logits = all_logits;
    p.attached = 0;
    if (rotor::Status s = rotor::FitsCache(*seq->cache, static_cast<int64_t>(n_tokens)); !s.ok())
      return Make(ROTOR_ERR_CONTEXT_FULL, fmt::format("sequence {}: {}", id, s.message()));
    if (seq->cache->n_seen() == 0) {
      // A prompt: start from the longest cached prefix of it (all logits
      // wanted: nothing is skipped), keeping its last token to run.
      if (!all_logits && ctx->model->engine->prefix_cache() && seq->cache->SharesPrefix()) {
        p.attached = seq->cache->AttachPrefix(text, static_cast<int64_t>(n_tokens) - 1);
        seq->tokens.assign(text.begin(), text.begin() + p.attached);
      }
      p.feed = rotor::Feed::Prompt(seq->cache.get(), text.subspan(p.attached));
    } else {
      p.feed = rotor::Feed::Continue(seq->cache.get(), text);
    }
    if (all_logits) p.feed.logits_from = 0;
    return Run(ctx, todo);
  });
}

rotor_status* rotor_eval_batch(rotor_context* ctx, const rotor_batch_entry* entries, size_t n) {
  return Guard("rotor_eval_batch", [&]() -> rotor_status* {
    ROTOR_CAPI_REQUIRE(ctx != nullptr, "rotor_eval_batch: ctx is NULL");
    ROTOR_CAPI_REQUIRE(entries || n == 0, "rotor_eval_batch: entries is NULL");
    ROTOR_CAPI_REQUIRE(n <= static_cast<size_t>(ctx->max_seqs),
                       "rotor_eval_batch: {} entries, the context's max_seqs is {}", n,
                       ctx->max_seqs);
    std::lock_guard<std::mutex> lock(ctx->model->mu);
    std::vector<Pending> todo;
    for (size_t i = 0; i < n; ++i) {
      const rotor_batch_entry& e = entries[i];
      Seq* seq = Find(ctx, e.seq);
      ROTOR_CAPI_REQUIRE(seq != nullptr, "rotor_eval_batch: entry {}: no sequence {}", i, e.seq);
      ROTOR_CAPI_REQUIRE(e.tokens || e.n_tokens == 0, "rotor_eval_batch: entry {}: tokens is NULL",
                         i);
      ROTOR_CAPI_REQUIRE(e.n_tokens <= static_cast<size_t>(INT32_MAX),
                         "rotor_eval_batch: entry {}: n_tokens {} is more than any context holds",
                         i, e.n_tokens);
      for (const Pending& p : todo)
        ROTOR_CAPI_REQUIRE(p.id != e.seq, "rotor_eval_batch: sequence {} appears twice", e.seq);
      if (e.n_tokens == 0) continue;
      std::span<const int32_t> text(e.tokens, e.n_tokens);
      rotor::Feed f = seq->cache->n_seen() == 0 ? rotor::Feed::Prompt(seq->cache.get(), text)
                                                : rotor::Feed::Continue(seq->cache.get(), text);
      todo.push_back(Pending{e.seq, seq, f, nullptr, 0});
    }
    return Run(ctx, todo);
  });
}

rotor_status* rotor_logits(rotor_context* ctx, int32_t id, const float** logits) {
  return Guard("rotor_logits", [&]() -> rotor_status* {
    rotor::capi::ResetOut<const float*>(logits, nullptr);
    ROTOR_CAPI_SEQ("rotor_logits", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(logits != nullptr, "rotor_logits: logits is NULL");
    if (seq->logits.empty())
      return Make(ROTOR_ERR_INVALID_ARGUMENT,
                  fmt::format("rotor_logits: sequence {} has no logits (no token evaluated since "
                              "it began, was loaded or changed)",
                              id));
    *logits = seq->logits.data();
    return nullptr;
  });
}

rotor_status* rotor_seq_n_tokens(rotor_context* ctx, int32_t id, int64_t* n) {
  return Guard("rotor_seq_n_tokens", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int64_t>(n, 0);
    ROTOR_CAPI_SEQ("rotor_seq_n_tokens", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(n != nullptr, "rotor_seq_n_tokens: n_tokens is NULL");
    *n = seq->cache->n_seen();
    return nullptr;
  });
}

rotor_status* rotor_seq_n_cached(rotor_context* ctx, int32_t id, int64_t* n_cells) {
  return Guard("rotor_seq_n_cached", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int64_t>(n_cells, 0);
    ROTOR_CAPI_SEQ("rotor_seq_n_cached", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(n_cells != nullptr, "rotor_seq_n_cached: n_cells is NULL");
    *n_cells = seq->cache->n_used();
    return nullptr;
  });
}

rotor_status* rotor_seq_kv_bytes(rotor_context* ctx, int32_t id, int64_t* bytes) {
  return Guard("rotor_seq_kv_bytes", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int64_t>(bytes, 0);
    ROTOR_CAPI_SEQ("rotor_seq_kv_bytes", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(bytes != nullptr, "rotor_seq_kv_bytes: bytes is NULL");
    *bytes = static_cast<int64_t>(seq->cache->held_bytes());
    return nullptr;
  });
}

rotor_status* rotor_seq_keep_prefix(rotor_context* ctx, int32_t id, int64_t n) {
  return Guard("rotor_seq_keep_prefix", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_seq_keep_prefix", ctx, id, seq);
    if (rotor::Status s = seq->cache->KeepPrefix(n); !s.ok()) return rotor::capi::FromStatus(s);
    seq->tokens.resize(static_cast<size_t>(n));
    seq->logits.clear();
    return nullptr;
  });
}

rotor_status* rotor_seq_remove(rotor_context* ctx, int32_t id, int64_t from, int64_t to) {
  return Guard("rotor_seq_remove", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_seq_remove", ctx, id, seq);
    if (rotor::Status s = seq->cache->RemoveRange(from, to); !s.ok())
      return rotor::capi::FromStatus(s);
    // Up to the end, the text is cut there (the cache keeps the prefix); a
    // hole keeps the later tokens' indices, and with them their ids.
    if (seq->cache->n_seen() < static_cast<rotor::TextIndex>(seq->tokens.size()))
      seq->tokens.resize(static_cast<size_t>(seq->cache->n_seen()));
    seq->logits.clear();
    return nullptr;
  });
}

rotor_status* rotor_seq_shift(rotor_context* ctx, int32_t id, int64_t from, int64_t to,
                              int32_t delta) {
  return Guard("rotor_seq_shift", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_seq_shift", ctx, id, seq);
    if (rotor::Status s = seq->cache->ShiftPositions(from, to, delta); !s.ok())
      return rotor::capi::FromStatus(s);
    seq->logits.clear();
    return nullptr;
  });
}

rotor_status* rotor_seq_fork(rotor_context* ctx, int32_t id, int32_t* copy) {
  return Guard("rotor_seq_fork", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int32_t>(copy, -1);
    ROTOR_CAPI_SEQ("rotor_seq_fork", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(copy != nullptr, "rotor_seq_fork: copy is NULL");
    rotor::Result<std::unique_ptr<rotor::KvCache>> cache = seq->cache->Fork();
    if (!cache.ok()) return rotor::capi::FromStatus(cache.status(), ROTOR_ERR_OUT_OF_MEMORY);
    auto s = std::make_unique<Seq>();
    s->cache = std::move(*cache);
    s->tokens = seq->tokens;
    s->logits = seq->logits;
    *copy = AddSeq(ctx, std::move(s));
    return nullptr;
  });
}

rotor_status* rotor_seq_clear(rotor_context* ctx, int32_t id) {
  return Guard("rotor_seq_clear", [&]() -> rotor_status* {
    ROTOR_CAPI_SEQ("rotor_seq_clear", ctx, id, seq);
    seq->cache->Clear();
    seq->tokens.clear();
    seq->logits.clear();
    return nullptr;
  });
}

rotor_status* rotor_seq_save(rotor_context* ctx, int32_t id, const char* path, int64_t* bytes) {
  return Guard("rotor_seq_save", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int64_t>(bytes, 0);
    ROTOR_CAPI_SEQ("rotor_seq_save", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(path != nullptr, "rotor_seq_save: path is NULL");
    rotor::Result<int64_t> r = rotor::SaveKvFile(path, *seq->cache, seq->tokens);
    if (!r.ok()) return rotor::capi::FromStatus(r.status(), ROTOR_ERR_IO);
    if (bytes) *bytes = *r;
    return nullptr;
  });
}

rotor_status* rotor_seq_load(rotor_context* ctx, int32_t id, const char* path, int64_t* n_tokens) {
  return Guard("rotor_seq_load", [&]() -> rotor_status* {
    rotor::capi::ResetOut<int64_t>(n_tokens, 0);
    ROTOR_CAPI_SEQ("rotor_seq_load", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(path != nullptr, "rotor_seq_load: path is NULL");
    ROTOR_CAPI_REQUIRE(seq->cache->n_seen() == 0,
                       "rotor_seq_load: sequence {} holds {}; load into an empty one", id,
                       Count(seq->cache->n_seen(), "token"));
    rotor::Result<rotor::KvFileLoaded> r = rotor::LoadKvFile(path, *seq->cache);
    if (!r.ok()) return rotor::capi::FromStatus(r.status(), ROTOR_ERR_IO);
    seq->tokens = r->tokens;
    seq->logits.clear();
    if (n_tokens) *n_tokens = r->n_loaded;
    return nullptr;
  });
}

rotor_status* rotor_seq_tokens(rotor_context* ctx, int32_t id, int32_t* tokens, size_t capacity,
                               size_t* n_tokens) {
  return Guard("rotor_seq_tokens", [&]() -> rotor_status* {
    rotor::capi::ResetOut<size_t>(n_tokens, 0);
    ROTOR_CAPI_SEQ("rotor_seq_tokens", ctx, id, seq);
    ROTOR_CAPI_REQUIRE(n_tokens != nullptr, "rotor_seq_tokens: n_tokens is NULL");
    ROTOR_CAPI_REQUIRE(tokens || capacity == 0, "rotor_seq_tokens: tokens is NULL");
    *n_tokens = seq->tokens.size();
    if (seq->tokens.size() > capacity)
      return Make(ROTOR_ERR_BUFFER_TOO_SMALL,
                  fmt::format("rotor_seq_tokens: {}, room for {}",
                              Count(seq->tokens.size(), "token"), capacity));
    std::copy(seq->tokens.begin(), seq->tokens.end(), tokens);
    return nullptr;
  });
}

}  // extern "C"
