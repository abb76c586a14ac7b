// The KV policies against the full cache, against a naive masked reference,
// across prefill steps, RoPE modes and position modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kv_test_util.h"
#include "model/forward.h"
#include "ops/rope.h"
#include "reference_forward.h"
#include "../model/run_tokens.h"

namespace rotor::testing {
namespace {

struct Mode {
  RopeK rope;
  KvPositions positions;
};
const Mode kModes[] = {{RopeK::kCached, KvPositions::kOriginal},
                       {RopeK::kDeferred, KvPositions::kOriginal},
                       {RopeK::kCached, KvPositions::kCompact},
                       {RopeK::kDeferred, KvPositions::kCompact}};

std::string Name(std::string_view p, Mode m) {
  return std::string(p) + "/" + std::string(RopeKName(m.rope)) + "/" +
         std::string(KvPositionsName(m.positions));
}

class KvPolicies : public ::testing::TestWithParam<std::string> {
 protected:
  const Model& model() { return LoadModelCached(ModelPath(GetParam())); }
};

// Before the first eviction every policy and mode is the full cache.
TEST_P(KvPolicies, EqualFullUntilFirstEviction) {
  const Model& m = model();
  std::vector<int32_t> prompt = Prompt(40, m.config().n_vocab);
  std::vector<float> full = AllLogits(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, prompt, 0);
  std::vector<float> full_deferred =
      AllLogits(m, Kv("full", 0, 0, RopeK::kDeferred), prompt, 7);
  // Cached and deferred K round the rotation differently (and the AVX2 and
  // AVX-512 attention kernels differently again): a few f32 ulps of logits
  // of magnitude ~10.
  constexpr double kTol = 4e-5;
  EXPECT_LT(MaxAbsDiff(full, full_deferred), kTol);
  for (std::string_view p : {"sink", "window", "h2o", "tova", "snapkv"}) {
    for (Mode mode : kModes) {
      for (int step : {0, 7}) {
        std::vector<float> got =
            AllLogits(m, Kv(p, 64, 4, mode.rope, mode.positions), prompt, step);
        EXPECT_LT(MaxAbsDiff(full, got), kTol) << Name(p, mode) << " step " << step;
      }
    }
  }
  // snapkv with a prompt announced: at its end (token 30) the 22 tokens
  // before the window of 8 all fit in the 56 selected cells: nothing is
  // evicted, and the 10 tokens after it are appended.
  for (Mode mode : kModes) {
    for (int step : {0, 7}) {
      std::vector<float> got = AllLogits(m, Kv("snapkv", 64, 4, mode.rope, mode.positions, -1, 8),
                                         prompt, step, 512, nullptr, /*prompt=*/30);
      EXPECT_LT(MaxAbsDiff(full, got), kTol) << Name("snapkv", mode) << " prompt 30 step " << step;
    }
  }
}

// With evictions, each query sees exactly what the policy promises: the
// reference masks keys by (query, key) index and places them at the promised
// distance, with no KV code involved.
TEST_P(KvPolicies, MatchMaskedReferenceAcrossEvictions) {
  const Model& m = model();
  const int n = 150, size = 48, keep = 4;
  std::vector<int32_t> prompt = Prompt(n, m.config().n_vocab);
  for (std::string_view p : {"sink", "window"}) {
    const int k = p == "window" ? 0 : keep;
    for (bool compact : {false, true}) {
      std::vector<float> ref = ReferenceLogits(m, prompt, RingDistance(size, k, compact));
      for (Mode mode : kModes) {
        if ((mode.positions == KvPositions::kCompact) != compact) continue;
        std::vector<float> got = AllLogits(m, Kv(p, size, keep, mode.rope, mode.positions), prompt, 7);
        EXPECT_LT(MaxAbsDiff(ref, got), 1e-4) << Name(p, mode);
      }
    }
  }
}

// The same logits whatever the prefill step, for every policy and mode.
TEST_P(KvPolicies, PrefillStepInvariant) {
  const Model& m = model();
  std::vector<int32_t> prompt = Prompt(150, m.config().n_vocab, 11);
  std::vector<float> full1 = AllLogits(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, prompt, 1);
  for (int step : {7, 64, 512, 0}) EXPECT_LT(MaxAbsDiff(full1, AllLogits(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, prompt, step)), 1e-4);
  for (std::string_view p : {"sink", "window", "h2o", "tova", "snapkv"}) {
    const bool per_lane = p == "h2o" || p == "tova" || p == "snapkv";
    // snapkv: a prompt of 100 tokens compressed to 40 at its end (window 8),
    // then 50 tokens of generation.
    const int64_t announced = p == "snapkv" ? 100 : 0;
    for (Mode mode : kModes) {
      // The per-lane policies renumber compact positions between ubatches:
      // only original positions are step-invariant there (see docs/ARCHITECTURE.md).
      if (per_lane && mode.positions == KvPositions::kCompact) continue;
      const KvConfig kv = Kv(p, 40, 4, mode.rope, mode.positions, -1, 8);
      std::vector<float> one = AllLogits(m, kv, prompt, 1, 512, nullptr, announced);
      for (int step : {7, 64, 512, 0})
        EXPECT_LT(MaxAbsDiff(one, AllLogits(m, kv, prompt, step, 512, nullptr, announced)), 1e-4)
            << Name(p, mode) << " step " << step;
    }
  }
}

// The per-lane policies choose by attention weights: deferred keys (rotated
// in attention) give the weights cached keys give, so the same tokens are
// evicted, past many evictions, in both position modes.
TEST_P(KvPolicies, TovaSnapKvDeferredEqualsCached) {
  const Model& m = model();
  std::vector<int32_t> prompt = Prompt(160, m.config().n_vocab, 5);
  for (std::string_view p : {"tova", "snapkv"}) {
    const int64_t announced = p == "snapkv" ? 100 : 0;
    for (KvPositions positions : {KvPositions::kOriginal, KvPositions::kCompact}) {
      for (int step : {1, 16}) {
        std::vector<float> cached = AllLogits(m, Kv(p, 32, 0, RopeK::kCached, positions, -1, 8),
                                              prompt, step, 512, nullptr, announced);
        std::vector<float> deferred = AllLogits(
            m, Kv(p, 32, 0, RopeK::kDeferred, positions, -1, 8), prompt, step, 512, nullptr,
            announced);
        EXPECT_LT(MaxAbsDiff(cached, deferred), 1e-4)
            << p << "/" << KvPositionsName(positions) << " step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, KvPolicies,
                         ::testing::Values("stories260K", "gqa", "qwen2", "qwen2-partial", "llama3",
                                           "llama3-keys"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Greedy decoding one token at a time for 5 x size tokens: the cache then
// holds exactly the sinks and the size - keep most recent tokens, at the
// positions the mode promises, with the keys and values those tokens had, and
// its memory never changed.
TEST(SinkCache, HoldsSinksAndRecentTokensAfterLongGeneration) {
  const Model& m = LoadModelCached(kStories);
  const int size = 32, keep = 4, n_ctx = 512;
  for (Mode mode : kModes) {
    SCOPED_TRACE(Name("sink", mode));
    ThreadPool pool(2);
    Forward fwd(m, pool, 16, n_ctx);
    auto cache = std::move(KvCache::Create(m.config().kv_shape(n_ctx),
                                           Kv("sink", size, keep, mode.rope, mode.positions)))
                     .value();
    const size_t bytes = cache->memory_bytes();
    std::vector<int32_t> text = {1, 403, 407, 261, 378};
    std::vector<float> logits(m.config().n_vocab);
    ASSERT_TRUE(RunTokens(m, *cache, text, 16, LogitsWanted::kLast, logits.data()).ok());
    for (int i = 0; i < 5 * size; ++i) {
      const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      text.push_back(tok);
      const int32_t one[1] = {tok};
      SeqInput in{cache.get(), one};
      ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), logits.data()).ok());
      ASSERT_EQ(cache->memory_bytes(), bytes);
    }
    const int64_t n = static_cast<int64_t>(text.size());
    ASSERT_EQ(cache->n_seen(), n);
    ASSERT_EQ(cache->n_used(), size);
    // Layer-0 keys depend only on the token and its position: compare with a full cache.
    auto full = std::move(KvCache::Create(m.config().kv_shape(n_ctx),
                                          Kv("full", 0, 0, mode.rope))).value();
    Forward fwd_full(m, pool, 256, n_ctx);
    std::vector<float> unused(m.config().n_vocab);
    ASSERT_TRUE(RunTokens(m, *full, text, 256, LogitsWanted::kLast, unused.data()).ok());
    std::vector<int64_t> held;
    const int row = m.config().n_head_kv * m.config().head_dim;
    for (int32_t c = 0; c < size; ++c) {
      const TextIndex idx = cache->CellIndex(c);
      held.push_back(idx);
      // Compact: the window sits below its text indices by the evictions
      // so far rounded down to a multiple of the window (policy_ring.cc),
      // so its positions stay below size + window.
      const int64_t window = size - keep, shift = (n - size) / window * window;
      int64_t want_pos = idx;
      if (mode.positions == KvPositions::kCompact && idx >= keep) want_pos = idx - shift;
      EXPECT_EQ(cache->CellPos(c), want_pos) << "cell " << c << " index " << idx;
      if (mode.positions == KvPositions::kCompact) {
        EXPECT_LT(cache->CellPos(c), size + window);
      }
      std::vector<float> want = full->CellK(0, static_cast<int32_t>(idx));
      if (mode.rope == RopeK::kCached && want_pos != idx)
        ops::RopeShift(m.config().rope(), want.data(), m.config().n_head_kv,
                       static_cast<int32_t>(want_pos - idx));
      const std::vector<float> got_k = cache->CellK(0, c), got_v = cache->CellV(0, c);
      const std::vector<float> want_v = full->CellV(0, static_cast<int32_t>(idx));
      for (int e = 0; e < row; ++e) {
        EXPECT_NEAR(got_k[e], want[e], 1e-4) << "cell " << c;
        EXPECT_NEAR(got_v[e], want_v[e], 1e-5);
      }
    }
    std::sort(held.begin(), held.end());
    for (int i = 0; i < keep; ++i) EXPECT_EQ(held[i], i);
    for (int i = keep; i < size; ++i) EXPECT_EQ(held[i], n - size + i);
  }
}

// h2o: deferred RoPE equals cached, past many evictions, for both position modes.
TEST(H2oCache, DeferredEqualsCached) {
  const Model& m = LoadModelCached(GqaModelPath());
  std::vector<int32_t> prompt = Prompt(160, m.config().n_vocab, 5);
  for (KvPositions positions : {KvPositions::kOriginal, KvPositions::kCompact}) {
    for (int step : {1, 16}) {
      std::vector<float> cached = AllLogits(m, Kv("h2o", 32, 0, RopeK::kCached, positions), prompt, step);
      std::vector<float> deferred = AllLogits(m, Kv("h2o", 32, 0, RopeK::kDeferred, positions), prompt, step);
      EXPECT_LT(MaxAbsDiff(cached, deferred), 1e-4) << KvPositionsName(positions) << " step " << step;
    }
  }
}

// Re-rotating cached keys on every eviction (compact, cached) gives what
// rotating them on the fly gives (compact, deferred), decoding past several
// wraps of the ring.
TEST(SinkCache, CompactReRotationEqualsDeferredWhileDecoding) {
  const Model& m = LoadModelCached(GqaModelPath());
  std::vector<int32_t> prompt = Prompt(200, m.config().n_vocab, 3);
  for (std::string_view p : {"sink", "window"}) {
    std::vector<float> cached = AllLogits(m, Kv(p, 24, 4, RopeK::kCached, KvPositions::kCompact), prompt, 1);
    std::vector<float> deferred = AllLogits(m, Kv(p, 24, 4, RopeK::kDeferred, KvPositions::kCompact), prompt, 1);
    EXPECT_LT(MaxAbsDiff(cached, deferred), 1e-4) << p;
  }
}

}  // namespace
}  // namespace rotor::testing

namespace rotor::testing {
namespace {

// A prompt 10x longer than the cache, in chunks: after every chunk the cache
// holds at most its size in tokens and its memory has not changed; the chunk's
// own keys and values live only in the forward pass's step-sized buffers.
TEST(ChunkedPrefill, CacheNeverExceedsItsSize) {
  const Model& m = LoadModelCached(GqaModelPath());
  std::vector<int32_t> prompt = Prompt(480, m.config().n_vocab, 9);
  // snapkv without a prompt announced appends and evicts its oldest token.
  for (std::string_view p : {"sink", "window", "h2o", "tova", "snapkv"}) {
    for (int step : {1, 7, 64}) {
      ThreadPool pool(2);
      Forward fwd(m, pool, step, 512);
      auto cache = std::move(KvCache::Create(m.config().kv_shape(512), Kv(p, 48))).value();
      const size_t bytes = cache->memory_bytes();
      std::vector<float> logits(m.config().n_vocab);
      for (size_t b = 0; b < prompt.size(); b += step) {
        const size_t n = std::min<size_t>(step, prompt.size() - b);
        SeqInput in{cache.get(), std::span<const int32_t>(prompt).subspan(b, n)};
        ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), logits.data()).ok());
        ASSERT_LE(cache->n_used(), 48) << p << " step " << step;
        ASSERT_EQ(cache->memory_bytes(), bytes);
      }
      EXPECT_EQ(cache->n_used(), 48);
      EXPECT_EQ(cache->n_seen(), 480);
    }
  }
}

}  // namespace
}  // namespace rotor::testing
