// The f16 KV cache (KvConfig::type = kF16): the stored values, its memory, and
// its logits against the naive reference whose keys and values are rounded to
// f16 the same way, for every policy, RoPE mode, prefill step and ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/cpu.h"
#include "kv_test_util.h"
#include "reference_forward.h"
#include "sanitizers/sweep.h"
#include "tensor/fp16.h"

namespace rotor::testing {
namespace {

KvConfig F16(KvConfig kv) {
  kv.types = KvTypes{KvType::kF16, KvType::kF16};
  return kv;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

TEST(F16Cache, StoresTheF16RoundingAndHalvesTheKvBytes) {
  KvShape shape;
  shape.n_layer = 2, shape.n_head_kv = 3, shape.head_dim = 16, shape.n_ctx = 8;
  KvConfig f32_config;
  f32_config.types = {KvType::kF32, KvType::kF32};
  auto f32 = KvCache::Create(shape, f32_config);
  auto f16 = KvCache::Create(shape, F16(KvConfig{.types = {KvType::kF32, KvType::kF32}}));
  ASSERT_TRUE(f32.ok() && f16.ok());
  // K and V, layers, cells (one block of 16 holds the 8), row, bytes
  const size_t kv32 = 2ull * 2 * 16 * 3 * 16 * 4;
  EXPECT_EQ((*f32)->memory_bytes() - (*f16)->memory_bytes(), kv32 / 2);
  KvCache& c = **f16;
  KvPlan plan;
  ASSERT_TRUE(c.Plan(5, &plan).ok());
  ASSERT_TRUE(c.Prepare(plan).ok());
  // [5, 48]: values spread over f16's range, subnormals and ties included.
  std::vector<float> k(5 * 48), v(5 * 48);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = std::ldexp(1.0f + static_cast<float>(i % 37) / 37, static_cast<int>(i % 40) - 24);
    v[i] = -k[i] * (i % 3 == 0 ? 1.0f / 3 : 1.0f);
  }
  k[7] = 1.0f + 1.0f / 2048;  // a tie: rounds to even (1.0)
  for (int l = 0; l < 2; ++l) c.Write(l, plan, k.data(), v.data(), 48);
  c.Commit(plan);
  for (int cell = 0; cell < 5; ++cell) {
    const std::vector<float> got_k = c.CellK(1, cell), got_v = c.CellV(1, cell);
    for (int e = 0; e < 48; ++e) {
      EXPECT_EQ(got_k[e], F16ToF32(F32ToF16(k[cell * 48 + e]))) << cell << " " << e;
      EXPECT_EQ(got_v[e], F16ToF32(F32ToF16(v[cell * 48 + e]))) << cell << " " << e;
    }
  }
  EXPECT_EQ(c.CellK(0, 0)[7], 1.0f);
  const KvLayerView view = c.View(0);
  EXPECT_EQ(view.types, (KvTypes{KvType::kF16, KvType::kF16}));
  EXPECT_EQ(view.k_row_bytes, 48u * 2);
  EXPECT_EQ(view.v_row_bytes, 48u * 2);
}

class F16Models : public ::testing::TestWithParam<std::string> {};

// End to end, f32 sums in a different order (rotor's kernels vs the
// reference's doubles, or one prefill step's matmul vs another's) move a K/V
// value by an f32 ulp; next to an f16 rounding boundary that becomes a whole
// f16 ulp (2^-11 relative), and later layers amplify it. Measured: at most
// 2.9e-3 (6.8e-3 for h2o, whose eviction choices can follow), against
// 1.2e-3 .. 2.3e-2 between the f16 and f32 caches. The AVX2 fold's sums in
// another order flip another value: 1.8e-2 on stories260K full/cached,
// prefill step 1 against 7 (one flip at position 128, fading over the next
// tokens; with f32 caches the two steps differ by 8e-6 everywhere, and the
// AVX2 and scalar folds by 7.6e-6). The kernels themselves are exact:
// attention_f16_test.cc.
constexpr double kF16Tol = 3e-2;

// Deferred keys are stored before RoPE, as the reference rounds them: every
// policy's logits equal the reference's under the policy's mask, on every
// ISA path, for prefill steps 1, 7 and whole.
TEST_P(F16Models, DeferredMatchesF16ReferenceOnEveryIsa) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const int n = 120, size = 40, keep = 4;
  const std::vector<int32_t> prompt = Prompt(n, m.config().n_vocab, 19);
  struct Case {
    KvConfig kv;
    std::vector<float> ref;
  };
  std::vector<Case> cases;
  cases.push_back({F16(Kv("full", 0, 0, RopeK::kDeferred)),
                   ReferenceLogits(m, prompt, [](int64_t t, int64_t j) { return t - j; }, true)});
  for (std::string_view p : {"sink", "window"}) {
    const int k = p == "window" ? 0 : keep;
    for (bool compact : {false, true}) {
      const KvPositions pos = compact ? KvPositions::kCompact : KvPositions::kOriginal;
      cases.push_back({F16(Kv(p, size, keep, RopeK::kDeferred, pos)),
                       ReferenceLogits(m, prompt, RingDistance(size, k, compact), true)});
    }
  }
  const Isa saved = ActiveIsa();
  Sweep sweep(4);  // under the sanitizers: every ISA, case and step, fewer combinations
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    for (const Case& c : cases)
      for (int step : {1, 7, 0}) {
        if (!sweep.Next({isa, static_cast<int>(&c - cases.data()), step})) continue;
        EXPECT_LT(MaxAbsDiff(c.ref, AllLogits(m, c.kv, prompt, step)), kF16Tol)
            << IsaName(static_cast<Isa>(isa)) << " " << c.kv.policy << "/"
            << KvPositionsName(c.kv.positions) << " step " << step;
      }
  }
  SetIsa(saved);
  EXPECT_TRUE(sweep.EveryValueRan());
}

// Cached keys are rounded after RoPE (and again at each compact re-rotation):
// their logits differ from deferred ones by f16 rounding, far less than the
// f16 cache differs from the f32 one... and that stays small too.
TEST_P(F16Models, CachedKeysAndF32CacheWithinF16Rounding) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const std::vector<int32_t> prompt = Prompt(120, m.config().n_vocab, 23);
  const std::vector<float> f32 = AllLogits(m, Kv("full", 0, 0), prompt, 0);
  const double scale = MaxAbs(f32);
  // f16 keeps 11 significant bits: each K/V element moves by <= 2^-12
  // relative; through softmax and 2 layers of residuals the logits move by a
  // small multiple of that, relative to their magnitude.
  const double bound = 32 * std::ldexp(1.0, -12) * scale;
  for (RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
    const std::vector<float> f16 = AllLogits(m, F16(Kv("full", 0, 0, rope)), prompt, 7);
    const double d = MaxAbsDiff(f32, f16);
    EXPECT_LT(d, bound) << RopeKName(rope);
    EXPECT_GT(d, 0.0) << "the f16 cache must round";
  }
  for (KvPositions pos : {KvPositions::kOriginal, KvPositions::kCompact}) {
    const std::vector<float> cached = AllLogits(m, F16(Kv("sink", 40, 4, RopeK::kCached, pos)), prompt, 1);
    const std::vector<float> deferred = AllLogits(m, F16(Kv("sink", 40, 4, RopeK::kDeferred, pos)), prompt, 1);
    EXPECT_LT(MaxAbsDiff(cached, deferred), bound) << KvPositionsName(pos);
  }
}

// Each policy's logits do not depend on the prefill step with f16 storage
// either (up to kF16Tol): a chunk's own keys are rounded before attention
// reads them, so a token never sees an f32 key that later becomes f16.
TEST_P(F16Models, PrefillStepInvariant) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const std::vector<int32_t> prompt = Prompt(150, m.config().n_vocab, 29);
  for (std::string_view p : {"full", "sink", "window", "h2o", "tova", "snapkv"}) {
    for (RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
      const KvConfig kv = F16(p == "full" ? Kv(p, 0, 0, rope) : Kv(p, 40, 4, rope));
      const std::vector<float> one = AllLogits(m, kv, prompt, 1);
      for (int step : {7, 64, 0})
        EXPECT_LT(MaxAbsDiff(one, AllLogits(m, kv, prompt, step)), kF16Tol)
            << p << "/" << RopeKName(rope) << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, F16Models,
                         ::testing::Values("stories260K", "gqa", "qwen2", "llama3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rotor::testing
