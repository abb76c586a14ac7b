// Prompt scoring: each token's log-probability is the log-softmax, at that
// token, of the logits a plain full forward pass gives at the position
// before; the first token has none; the chunk size does not change the
// result; the alternatives are the best logits in order.
#include "engine/score.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine_test_util.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace rotor {
namespace {
namespace score_test {

using ::testing::HasSubstr;

using testing::MakeStoriesEngine;

constexpr KvTypes kF32{KvType::kF32, KvType::kF32};

// [n, n_vocab]: every position's logits from one forward pass over all tokens.
std::vector<float> AllLogits(Engine& e, const std::vector<int32_t>& ids) {
  const Model& m = e.model();
  const int n = static_cast<int>(ids.size());
  auto cache = KvCache::Create(m.config().kv_shape(n), KvConfig{.types = kF32});
  EXPECT_TRUE(cache.ok()) << cache.message();
  Forward fwd(m, e.pool(), n, n);
  const SeqInput in{cache->get(), ids, LogitsWanted::kAll};
  std::vector<float> logits(static_cast<size_t>(n) * m.config().n_vocab);
  EXPECT_TRUE(fwd.Run(std::span(&in, 1), logits.data()).ok());
  return logits;
}

TEST(Score, LogprobsAreTheLogSoftmaxOfTheForwardLogitsAtThePreviousPosition) {
  auto e = MakeStoriesEngine();
  const int n_vocab = e->model().config().n_vocab;
  const std::vector<int32_t> ids =
      e->tokenizer().Encode("Once upon a time, there was a little cat named Tom.", true);
  const int64_t n = std::ssize(ids);
  ASSERT_GT(n, 8);
  const std::vector<float> logits = AllLogits(*e, ids);
  for (int step : {0, 1, 7}) {
    Result<std::vector<std::optional<TokenLogprobs>>> s =
        ScoreTokens(*e, ids, {.top = 3, .step = step, .kv_types = kF32});
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(std::ssize(*s), n);
    EXPECT_FALSE((*s)[0].has_value());
    for (int64_t i = 1; i < n; ++i) {
      ASSERT_TRUE((*s)[i].has_value()) << i;
      const float* row = logits.data() + (i - 1) * n_vocab;
      const double max = *std::max_element(row, row + n_vocab);
      double sum = 0;
      for (int v = 0; v < n_vocab; ++v) sum += std::exp(row[v] - max);
      const double log_z = max + std::log(sum);
      EXPECT_NEAR((*s)[i]->logprob, row[ids[i]] - log_z, 1e-4) << "step " << step << " i " << i;
      // The alternatives: the three best logits, best first.
      std::vector<int> order(n_vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
      ASSERT_EQ((*s)[i]->top.size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ((*s)[i]->top[k].first, order[k]) << i << " " << k;
        EXPECT_NEAR((*s)[i]->top[k].second, row[order[k]] - log_z, 1e-4);
      }
    }
  }
}

TEST(Score, OneTokenHasNoLogprobAndStepsCoverTheText) {
  auto e = MakeStoriesEngine();
  auto one = ScoreTokens(*e, std::vector<int32_t>{1}, {.kv_types = kF32});
  ASSERT_TRUE(one.ok()) << one.message();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_FALSE((*one)[0].has_value());

  const std::vector<int32_t> ids = e->tokenizer().Encode("The dog ran to the park.", true);
  auto s = PromptScorer::Create(*e, ids, {.top = 0, .step = 4, .kv_types = kF32});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ((*s)->step(), 4);
  int steps = 0;
  while (!(*s)->done()) {
    ASSERT_TRUE((*s)->Step().ok());
    ++steps;
  }
  EXPECT_EQ(steps, (std::ssize(ids) + 3) / 4);
  const auto scores = (*s)->Take();
  for (size_t i = 1; i < scores.size(); ++i) {
    ASSERT_TRUE(scores[i].has_value());
    EXPECT_TRUE(scores[i]->top.empty());
    EXPECT_LE(scores[i]->logprob, 0.0f);
  }
}

TEST(Score, TooLongEmptyOrUnknownTokensAreErrors) {
  auto e = MakeStoriesEngine(/*n_ctx=*/16);
  const std::vector<int32_t> long_ids(17, 5);
  auto r = ScoreTokens(*e, long_ids, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("17 tokens, more than the context size 16"));
  r = ScoreTokens(*e, std::vector<int32_t>{}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("no tokens"));
  r = ScoreTokens(*e, std::vector<int32_t>{1, 1 << 20}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("token id 1048576 is out of range"));
}

}  // namespace score_test
}  // namespace
}  // namespace rotor
