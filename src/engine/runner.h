// The prompt runner: every token that enters a KV cache goes through here
// (generate, batched generate and serve through the Scheduler, chat,
// perplexity, bench), in one chunking loop.
//
// A caller hands the runner Feeds: one sequence's cache and the tokens to
// append to it, the first n_prompt of which are a prompt. One Step:
//   1. each feed's next chunk: its prompt in chunks of prefill_step tokens
//      from the prompt's start, then the tokens after it in chunks of
//      prefill_step from the prompt's end; chunks join the ubatch in the
//      feeds' order while they fit (one that does not fit waits for the next
//      step, and so do the feeds behind it: a sequence is cut the same alone
//      or batched)
//   2. a chunk whose new KV blocks the pool cannot give waits
//      (Feed::waiting_for_memory), and so do the feeds behind it;
//      a feed's first chunk first asks its cache: do all its tokens fit
//      (FitsCache), and, for a prompt, KvCache::ExpectPrompt (snapkv holds a
//      whole prompt and compresses it at its end). A no fails that feed
//      alone (Feed::status), before anything of it runs
//   3. Forward::Run over the ubatch: every cache planned before any mutates
//   4. each feed's logits rows from logits_from on, valid until the next step
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"

namespace rotor {

inline constexpr int kDefaultPrefillStep = 512;
// The C library's bound on a prefill step (its activations grow with it).
inline constexpr int kMaxPrefillStep = 1 << 20;

// The one "does it fit" answer, from the cache: n more tokens fit when the
// cache has room for them (KvCache::Remaining(); -1 = any number).
Status FitsCache(const KvCache& cache, int64_t n_tokens);
// The same before a sequence has a cache (or for an empty one): the longest
// prompt a cache of this resolved config takes from empty (KvMaxPrompt).
Status FitsNewCache(const KvConfig& resolved, const KvShape& shape, int64_t n_prompt);

// One sequence's tokens on their way into its cache.
struct Feed {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;  // appended in order
  int64_t n_prompt = 0;             // the first n_prompt tokens are a prompt
  int64_t logits_from = 0;          // logits wanted after tokens [logits_from, tokens.size())

  // Kept by the runner.
  int64_t n_run = 0;             // tokens run so far
  Status status = Status::Ok();  // an error: the tokens do not fit the cache; none of them ran
  bool out_of_memory = false;    // the error is a failed allocation (the feed alone ends)
  // The last step did not run this feed's chunk: the KV block pool had no
  // room for its blocks (the scheduler frees some, or the feed waits).
  bool waiting_for_memory = false;
  // The rows of the last step: logits after tokens [rows_first, rows_first +
  // n_rows), n_vocab floats each; valid until the runner's next step.
  const float* rows = nullptr;
  int64_t rows_first = 0;
  int64_t n_rows = 0;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  bool done() const { return !status.ok() || n_run == size(); }

  // A prompt, with the logits of its last token.
  static Feed Prompt(KvCache* cache, std::span<const int32_t> tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    return Feed{.cache = cache, .tokens = tokens, .n_prompt = n, .logits_from = n - 1};
  }
  // Tokens that continue the text (a sampled token), with the logits of the last.
  static Feed Continue(KvCache* cache, std::span<const int32_t> tokens) {
    return Feed{
        .cache = cache, .tokens = tokens, .logits_from = static_cast<int64_t>(tokens.size()) - 1};
  }
};

// Receives rows [first, first + n) of a feed's logits (row i: after token i),
// n_vocab floats each.
using LogitsSink = std::function<Status(int64_t first, int64_t n, const float* rows)>;

struct RunnerOptions {
  int prefill_step = kDefaultPrefillStep;  // tokens per chunk; 0 = a whole context (n_ctx)
  int max_seqs = 1;                        // sequences sharing a ubatch
  // Tokens one ubatch holds; 0 = a chunk plus one token of each other sequence.
  int max_tokens = 0;
  int n_ctx = 0;  // the largest cache context served (0 = the model's)
};

class Runner {
 public:
  Runner(const Model& model, ThreadPool& pool, const RunnerOptions& options);

  const Model& model() const { return forward_.model(); }
  int step() const { return step_; }
  int max_tokens() const { return forward_.max_tokens(); }

  // One ubatch: the next chunk of each feed (see the top of this file).
  // Errors only for what no single feed owns (a forward pass that fails);
  // a feed that cannot start carries its own status.
  Status Step(std::span<Feed* const> feeds);
  // Runs a feed to its end, one chunk per step, handing `sink` each step's
  // rows. Returns the feed's status (its tokens do not fit) or the step's.
  Status Run(Feed& feed, const LogitsSink& sink = {});

 private:
  // Tokens of the feed's next chunk.
  int64_t NextChunk(const Feed& f) const;

  int step_;
  Forward forward_;
  std::vector<float> logits_;     // [rows of the last step, n_vocab], grown when needed
  std::vector<SeqInput> inputs_;  // one step's ubatch
  std::vector<Feed*> owners_;     // [inputs_.size()]
  struct PoolNeed {
    const KvBlockPool* pool;
    KvTypes type;
    int64_t blocks;
  };
  std::vector<PoolNeed> taken_;  // one step's new blocks per pool and type
};

}  // namespace rotor
