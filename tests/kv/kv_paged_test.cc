// Paged storage changes where a row lives, not what attention computes: for
// every policy, both RoPE modes and both position modes, the logits with
// blocks of 16 cells equal, bit for bit, those of one block holding the whole
// cache (the contiguous layout of before paging), chunked and token by token.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "kv/kv_pool.h"
#include "kv_test_util.h"
#include "sanitizers/sweep.h"

namespace rotor::testing {
namespace {

constexpr int kCtx = 256;

class Paged
    : public ::testing::TestWithParam<std::tuple<std::string, RopeK, KvPositions, std::string>> {};

TEST_P(Paged, LogitsEqualTheContiguousLayout) {
  const auto& [policy, rope, positions, model_name] = GetParam();
  const Model& m = LoadModelCached(ModelPath(model_name));
  const KvShape shape = m.config().kv_shape(kCtx);
  const std::vector<int32_t> tokens = Prompt(150, m.config().n_vocab, 5);
  // Every K/V type: f16 (the default), q8_0, q4_0 rotated, q5_0 K with bf16 V.
  const KvTypes types[] = {{}, {KvType::kQ8_0, KvType::kQ8_0}, {KvType::kQ4_0, KvType::kQ4_0},
                           {KvType::kQ5_0, KvType::kBF16}};
  Sweep sweep(3);  // under the sanitizers: one or two types here, each in some instance
  for (const KvTypes& t : types) {
  if (!sweep.Next()) continue;
  SCOPED_TRACE(KvTypesName(t));
  KvConfig kv = Kv(policy, policy == "full" ? 0 : 48, 4, rope, positions);
  kv.types = t;
  kv.rotate = t.k == KvType::kQ4_0;
  std::vector<std::vector<float>> runs;
  for (int block : {kKvBlockCells, 256}) {  // 256: one block for the whole cache
    KvBlockPool pool(shape, KvPoolOptions{.block_cells = block});
    auto cache = KvCache::Create(shape, kv, &pool);
    ASSERT_TRUE(cache.ok()) << cache.message();
    for (int step : {7, 1}) {
      (*cache)->Clear();
      runs.push_back(ContinueLogits(m, **cache, tokens, step));
    }
    EXPECT_LE((*cache)->held_bytes(), (*cache)->memory_bytes());
  }
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_TRUE(runs[0] == runs[2]) << "step 7: paged differs from contiguous";
  EXPECT_TRUE(runs[1] == runs[3]) << "step 1: paged differs from contiguous";
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, Paged,
    ::testing::Combine(::testing::Values("full", "sink", "window", "h2o", "snapkv", "tova"),
                       ::testing::Values(RopeK::kCached, RopeK::kDeferred),
                       ::testing::Values(KvPositions::kOriginal, KvPositions::kCompact),
                       ::testing::Values("stories260K", "gqa")),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      name += std::get<1>(info.param) == RopeK::kCached ? "_cached" : "_deferred";
      name += std::get<2>(info.param) == KvPositions::kCompact ? "_compact" : "_original";
      return name + "_" + (std::get<3>(info.param) == "gqa" ? "gqa" : "stories");
    });

}  // namespace
}  // namespace rotor::testing
