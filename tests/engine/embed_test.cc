// Embeddings: the hidden states Embed pools are those the LM head reads (its
// logits equal a forward pass's), pooling and normalization are what they
// say, and the chunk size does not change the result.
#include "engine/embed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "engine_test_util.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "ops/ops.h"

namespace rotor {
namespace {

using ::testing::HasSubstr;

using testing::MakeStoriesEngine;

constexpr KvTypes kF32{KvType::kF32, KvType::kF32};

std::vector<float> MustEmbed(Engine& e, const std::vector<int32_t>& ids, EmbedOptions o) {
  Result<std::vector<float>> v = Embed(e, ids, o);
  EXPECT_TRUE(v.ok()) << v.message();
  return v.ok() ? *v : std::vector<float>();
}

TEST(Embed, LastHiddenStateThroughTheLmHeadGivesTheForwardLogits) {
  auto e = MakeStoriesEngine();
  const Model& m = e->model();
  const int n_vocab = m.config().n_vocab, E = m.config().n_embd;
  const std::vector<int32_t> ids = e->tokenizer().Encode("Once upon a time, a cat", true);
  const std::vector<float> h = MustEmbed(
      *e, ids, {.pooling = Pooling::kLast, .normalize = false, .step = 0, .kv_types = kF32});
  ASSERT_EQ(std::ssize(h), E);
  std::vector<float> via_head(n_vocab);
  ops::MatmulScratch scratch(1, std::max(n_vocab, E));
  ops::Matmul(e->pool(), m.output(), h.data(), 1, via_head.data(), n_vocab, scratch);

  auto cache = KvCache::Create(m.config().kv_shape(64), KvConfig{.types = kF32});
  ASSERT_TRUE(cache.ok()) << cache.message();
  Forward fwd(m, e->pool(), static_cast<int>(ids.size()), 64);
  const SeqInput in{cache->get(), ids, LogitsWanted::kLast};
  std::vector<float> logits(n_vocab);
  ASSERT_TRUE(fwd.Run(std::span(&in, 1), logits.data()).ok());
  for (int i = 0; i < n_vocab; ++i) ASSERT_NEAR(via_head[i], logits[i], 1e-4) << i;
}

TEST(Embed, MeanIsTheAverageOfEveryTokenAndHasUnitNorm) {
  auto e = MakeStoriesEngine();
  const int64_t E = e->model().config().n_embd;
  const std::vector<int32_t> ids = e->tokenizer().Encode("The little dog ran home.", true);
  const int64_t n = std::ssize(ids);
  const std::vector<float> rows = MustEmbed(
      *e, ids, {.pooling = Pooling::kNone, .normalize = false, .step = 0, .kv_types = kF32});
  ASSERT_EQ(std::ssize(rows), n * E);
  std::vector<double> mean(E, 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < E; ++i) mean[i] += rows[t * E + i] / static_cast<double>(n);
  const double norm = std::sqrt(std::inner_product(mean.begin(), mean.end(), mean.begin(), 0.0));
  const std::vector<float> pooled = MustEmbed(
      *e, ids, {.pooling = Pooling::kMean, .normalize = true, .step = 0, .kv_types = kF32});
  ASSERT_EQ(std::ssize(pooled), E);
  double sq = 0;
  for (int64_t i = 0; i < E; ++i) {
    EXPECT_NEAR(pooled[i], mean[i] / norm, 1e-5) << i;
    sq += static_cast<double>(pooled[i]) * pooled[i];
  }
  EXPECT_NEAR(sq, 1.0, 1e-5);
  // cls and last are the first and last rows.
  const std::vector<float> cls = MustEmbed(
      *e, ids, {.pooling = Pooling::kCls, .normalize = false, .step = 0, .kv_types = kF32});
  const std::vector<float> last = MustEmbed(
      *e, ids, {.pooling = Pooling::kLast, .normalize = false, .step = 0, .kv_types = kF32});
  EXPECT_EQ(cls, std::vector<float>(rows.begin(), rows.begin() + E));
  EXPECT_EQ(last, std::vector<float>(rows.end() - E, rows.end()));
}

TEST(Embed, ChunkSizeDoesNotChangeTheVector) {
  auto e = MakeStoriesEngine();
  const std::vector<int32_t> ids =
      e->tokenizer().Encode("Once upon a time there was a girl who liked to play.", true);
  const std::vector<float> whole = MustEmbed(*e, ids, {.step = 0, .kv_types = kF32});
  for (int step : {1, 7}) {
    const std::vector<float> v = MustEmbed(*e, ids, {.step = step, .kv_types = kF32});
    ASSERT_EQ(v.size(), whole.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], whole[i], 1e-5) << step << " " << i;
  }
}

TEST(Embed, RefusesEmptyAndTooLongInputs) {
  auto e = MakeStoriesEngine(/*n_ctx=*/32);
  EXPECT_THAT(Embed(*e, {}, {}).message(), HasSubstr("no tokens"));
  const std::vector<int32_t> long_ids(33, 5);
  EXPECT_THAT(Embed(*e, long_ids, {}).message(),
              HasSubstr("33 tokens, more than the context size 32"));
  EXPECT_TRUE(Embed(*e, std::vector<int32_t>(32, 5), {}).ok());
}

TEST(Embed, PoolingNames) {
  for (Pooling p : {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast})
    EXPECT_EQ(*ParsePooling(PoolingName(p)), p);
  EXPECT_THAT(ParsePooling("max").message(),
              HasSubstr("'max' is not one of none, mean, cls, last"));
  auto e = MakeStoriesEngine();
  EXPECT_EQ(*ModelPooling(e->model()), Pooling::kMean);  // stories260K says nothing
}

}  // namespace
}  // namespace rotor
