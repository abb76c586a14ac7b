// qwen2 (biases, NeoX pairs, partial rotary, linear scaling) and Llama 3 RoPE
// factors (rope_freqs.weight, or computed from the scaling keys) through every
// KV mode: rotor's logits equal the naive reference's on every ISA path, for
// the full cache and for sink/window caches past many evictions, with cached
// and deferred keys, original and compact positions, prefill steps 1, 7, whole.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/cpu.h"
#include "kv_test_util.h"
#include "reference_forward.h"
#include "sanitizers/sweep.h"

namespace rotor::testing {
namespace {

class ArchModes : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchModes, EveryKvModeMatchesReferenceOnEveryIsa) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const int n = 120, size = 40, keep = 4;
  const std::vector<int32_t> prompt = Prompt(n, m.config().n_vocab, 13);
  struct Case {
    std::string_view policy;
    bool compact;
    std::vector<float> ref;
  };
  std::vector<Case> cases;
  cases.push_back({"full", false,
                   ReferenceLogits(m, prompt, [](int64_t t, int64_t j) { return t - j; })});
  for (std::string_view p : {"sink", "window"}) {
    const int k = p == "window" ? 0 : keep;
    for (bool compact : {false, true})
      cases.push_back({p, compact, ReferenceLogits(m, prompt, RingDistance(size, k, compact))});
  }
  const Isa saved = ActiveIsa();
  Sweep sweep(7);  // under the sanitizers: every ISA, case, mode and step, fewer combinations
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    for (const Case& c : cases) {
      for (RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
        const int case_index = static_cast<int>(&c - cases.data());
        const KvPositions pos = c.compact ? KvPositions::kCompact : KvPositions::kOriginal;
        const KvConfig kv = c.policy == "full" ? Kv("full", 0, 0, rope)
                                                        : Kv(c.policy, size, keep, rope, pos);
        for (int step : {1, 7, 0}) {
          if (!sweep.Next({isa, case_index, static_cast<int>(rope), step})) continue;
          const double diff = MaxAbsDiff(c.ref, AllLogits(m, kv, prompt, step));
          EXPECT_LT(diff, 1e-4) << IsaName(static_cast<Isa>(isa)) << " " << c.policy
                                << "/" << RopeKName(rope) << "/" << KvPositionsName(pos) << " step "
                                << step;
        }
      }
    }
  }
  SetIsa(saved);
  EXPECT_TRUE(sweep.EveryValueRan());
}

// Sinks under original positions drift farther than the distance table
// reaches when the forward is sized for a small context: their rotation rows
// are computed on the fly, with the frequency factors too.
TEST_P(ArchModes, SinksBeyondTheDistanceTableMatchReference) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const int n = 120, size = 24, keep = 4, n_ctx = 32;
  const std::vector<int32_t> prompt = Prompt(n, m.config().n_vocab, 17);
  const std::vector<float> ref = ReferenceLogits(m, prompt, [&](int64_t t, int64_t j) -> int64_t {
    return j < keep || t - j < size - keep ? t - j : -1;
  });
  const Isa saved = ActiveIsa();
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    for (RopeK rope : {RopeK::kCached, RopeK::kDeferred})
      for (int step : {1, 7})
        EXPECT_LT(MaxAbsDiff(ref, AllLogits(m, Kv("sink", size, keep, rope), prompt, step,
                                            n_ctx)),
                  1e-4)
            << IsaName(static_cast<Isa>(isa)) << " " << RopeKName(rope) << " step " << step;
  }
  SetIsa(saved);
}

// h2o has no fixed mask; its deferred keys must still equal its cached keys.
TEST_P(ArchModes, H2oDeferredEqualsCached) {
  const Model& m = LoadModelCached(ModelPath(GetParam()));
  const std::vector<int32_t> prompt = Prompt(100, m.config().n_vocab, 5);
  for (KvPositions positions : {KvPositions::kOriginal, KvPositions::kCompact}) {
    std::vector<float> cached =
        AllLogits(m, Kv("h2o", 32, 0, RopeK::kCached, positions), prompt, 1);
    std::vector<float> deferred =
        AllLogits(m, Kv("h2o", 32, 0, RopeK::kDeferred, positions), prompt, 1);
    EXPECT_LT(MaxAbsDiff(cached, deferred), 1e-4) << KvPositionsName(positions);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ArchModes,
                         ::testing::Values("qwen2", "qwen2-partial", "llama3", "llama3-keys"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace rotor::testing
