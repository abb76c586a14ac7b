// Shared by the model tests: how many distinct tokens 64 greedy steps of a
// model produce after "<s> Once upon a time" (Llama-2 vocabulary ids); a
// random model that only repeats one token has a broken graph or scaling.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "run_tokens.h"

namespace rotor::testing {

// -1 (and a test failure) if a forward pass fails or a logit is not finite.
inline int DistinctGreedyTokens(const Model& m, ThreadPool& pool) {
  Forward fwd(m, pool, 64, 128);
  auto cache = std::move(KvCache::Create(m.config().kv_shape(128), KvConfig{.types = {KvType::kF32, KvType::kF32}})).value();
  const std::vector<int32_t> text = {1, 9038, 2501, 263, 931};  // <s> Once upon a time
  std::vector<float> logits(m.config().n_vocab);
  if (!RunTokens(m, *cache, text, 0, LogitsWanted::kLast, logits.data()).ok()) return -1;
  std::vector<int32_t> out;
  for (int i = 0; i < 64; ++i) {
    const int32_t t =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_TRUE(std::isfinite(logits[t]));
    if (!std::isfinite(logits[t])) return -1;
    out.push_back(t);
    SeqInput in{cache.get(), std::span<const int32_t>(&out.back(), 1)};
    if (!fwd.Run(std::span<const SeqInput>(&in, 1), logits.data()).ok()) return -1;
  }
  std::sort(out.begin(), out.end());
  return static_cast<int>(std::unique(out.begin(), out.end()) - out.begin());
}

}  // namespace rotor::testing
