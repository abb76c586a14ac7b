// Tests: tokens through a cache with the engine's prompt runner (the one
// chunking loop), in chunks of `step` (0 = all at once).
#pragma once

#include <algorithm>
#include <cstring>
#include <span>

#include "engine/runner.h"

namespace rotor::testing {

// logits: every token's row ([n, n_vocab]) for kAll, the last one's for kLast.
inline Status RunTokens(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                        int step, LogitsWanted wanted, float* logits, int threads = 2) {
  ThreadPool pool(threads);
  const int n = static_cast<int>(tokens.size());
  Runner runner(model, pool,
                RunnerOptions{.prefill_step = step > 0 ? step : std::max(n, 1),
                              .n_ctx = cache.shape().n_ctx});
  Feed feed = Feed::Continue(&cache, tokens);
  if (wanted == LogitsWanted::kAll) feed.logits_from = 0;
  if (wanted == LogitsWanted::kNone) feed.logits_from = n;
  const int64_t n_vocab = model.config().n_vocab;
  return runner.Run(feed, [&](int64_t first, int64_t rows, const float* data) {
    float* out = logits + (wanted == LogitsWanted::kAll ? first * n_vocab : 0);
    std::memcpy(out, data, sizeof(float) * rows * n_vocab);
    return Status::Ok();
  });
}

}  // namespace rotor::testing
