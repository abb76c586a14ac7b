// Prefill tiles (attention.cc TaskRunner, FoldTileAvx2): a token's attention
// is the same, bit for bit, whatever tile it is folded in and however its
// sequence is cut into ubatches; and near the one-token folds. Under cached
// and deferred RoPE (deferred keys are rotated in the tile, relative to each
// block's first key: TaskRunner::RotateTile).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attend_util.h"
#include "attention/attention.h"
#include "base/cpu.h"
#include "kv/kv_cache.h"
#include "kv/kv_key_offsets.h"
#include "kv/kv_quant.h"
#include "kv_test_util.h"
#include "sanitizers/sweep.h"

namespace rotor {
namespace {

constexpr int kHeads = 8, kHeadsKv = 2, kDim = 64;

// Outputs [n, kHeads, kDim] of tokens [0, n) of random q/k/v, attended in
// ubatches of the given sizes over a cache that starts with `depth` tokens,
// by tiles of at most max_tile tokens (0: no tiles); per-lane policies'
// tokens that evict in replayed tiles with this limit (negative: token by
// token; AttentionScratch::set_replay_limit).
std::vector<float> Attend(const KvConfig& base, KvTypes types, int depth,
                          const std::vector<int>& ubatches, int max_tile,
                          float replay_limit = 0.5f) {
  const int q_dim = kHeads * kDim, kv_dim = kHeadsKv * kDim;
  ops::RopeConfig rope{kDim, kDim};
  const KvKeyOffsets offsets([] { return testing::RandomKeyOffsetValues(kHeadsKv * kDim); }, 1,
                             kHeadsKv * kDim);
  KvShape shape{1, kHeadsKv, kDim, 1024, rope};
  shape.k_offsets = &offsets;
  KvConfig cfg = base;
  cfg.types = types;
  auto cache = std::move(KvCache::Create(shape, cfg)).value();
  ThreadPool pool(2);
  AttentionScratch scratch(2, kHeads, kHeadsKv, kDim);
  scratch.set_replay_limit(replay_limit);
  RopeDistanceTable table(rope, 1024);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  // [depth + n] tokens' q, k, v: the same for every cut.
  int n = 0;
  for (int m : ubatches) n += m;
  std::vector<float> q((depth + n) * q_dim), k((depth + n) * kv_dim), v(k.size());
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = 2 * dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<float> out((depth + n) * q_dim);  // [depth + n, kHeads, kDim]
  std::vector<int> cut = {depth};
  cut.insert(cut.end(), ubatches.begin(), ubatches.end());
  int at = 0;
  for (size_t u = 0; u < cut.size(); ++u) {
    const int m = cut[u];
    scratch.set_max_tile(u == 0 ? AttentionScratch::kTileTokens : max_tile);
    KvPlan p;
    EXPECT_TRUE(cache->Plan(m, &p).ok());
    EXPECT_TRUE(cache->Prepare(p).ok());
    testing::AttendOneLayer(pool, scratch, table, *cache, p, kHeads, kHeadsKv, kDim,
                            q.data() + at * q_dim, k.data() + at * kv_dim, v.data() + at * kv_dim,
                            out.data() + at * q_dim, ActiveIsa());
    at += m;
  }
  return std::vector<float>(out.begin() + depth * q_dim, out.end());
}

using testing::MaxRelDiff;
const auto& kTypes = testing::kAttendTypes;

TEST(AttentionTile, SameBitsInAnyTileAndAnyCut) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "tiles run on AVX2 and AVX-512 machines";
  for (const RopeK rk : {RopeK::kCached, RopeK::kDeferred})
    for (const KvTypes& t : kTypes) {
      SCOPED_TRACE(KvTypesName(t) + (rk == RopeK::kDeferred ? " deferred" : " cached"));
      const KvConfig full = testing::Kv("full", 0, 4, rk);
      const std::vector<float> want = Attend(full, t, 300, {70}, AttentionScratch::kTileTokens);
      for (int max_tile : {1, 7}) EXPECT_EQ(Attend(full, t, 300, {70}, max_tile), want) << max_tile;
      // A prefix hit or another chunk size: the same tokens in other ubatches.
      EXPECT_EQ(Attend(full, t, 300, {30, 40}, AttentionScratch::kTileTokens), want);
      EXPECT_EQ(Attend(full, t, 300, {4, 9, 57}, 5), want);
      // Tokens that see different cells (a window) or sinks at a shifted
      // distance (compact positions: two passes when cached, other rows per
      // token when deferred): the tile size still changes nothing.
      for (const KvConfig& cfg : {testing::Kv("window", 100, 4, rk),
                                  testing::Kv("sink", 128, 4, rk, KvPositions::kCompact)}) {
        const std::vector<float> w = Attend(cfg, t, 300, {70}, AttentionScratch::kTileTokens);
        EXPECT_EQ(Attend(cfg, t, 300, {70}, 1), w);
        EXPECT_EQ(Attend(cfg, t, 300, {70}, 6), w);
      }
    }
}

// Against the one-token folds (max_tile 0): float keys within rounding,
// block-type keys within the difference of their integer scoring (cached:
// the quantized query's integer products; deferred: pair products with the
// query's int16 factors). Deferred tiles rotate keys and queries by rows
// relative to each block's first key, the one-token folds each key by its
// distance, so float keys differ by that rounding too. Under a window and
// sinks at shifted distances too (deferred: each token's own rows).
TEST(AttentionTile, NearTheOneTokenFolds) {
  for (const RopeK rk : {RopeK::kCached, RopeK::kDeferred})
    for (const KvConfig& cfg : {testing::Kv("full", 0, 4, rk), testing::Kv("window", 100, 4, rk),
                                testing::Kv("sink", 128, 4, rk, KvPositions::kCompact)})
      for (const KvTypes& t : kTypes) {
        const std::string name =
            KvTypesName(t) + (rk == RopeK::kDeferred ? " deferred " : " cached ") + cfg.policy;
        SCOPED_TRACE(name);
        const double diff = MaxRelDiff(Attend(cfg, t, 300, {70}, AttentionScratch::kTileTokens),
                                       Attend(cfg, t, 300, {70}, 0));
        EXPECT_LE(diff, KvTypeQuantized(t.k) ? 0.05 : 1e-5);
        std::printf("%-28s tiles against one-token folds: %.3g relative\n", name.c_str(), diff);
      }
}

// Per-lane policies (h2o, tova, snapkv) fold the tokens a lane takes without
// evicting in tiles too (attention_lanes.cc, RunLaneTile), and the rest in
// replayed tiles (attention_lane_replay.cc) or token by token. Sizes of 340
// over 300 tokens: the prompt's first 40 tokens run in tiles, its last 30
// evict, steered by the weights the tiles gave. Token by token, a token's
// attention is the same bits in any tile and at any ubatch cut...
const KvConfig kLanePolicies[] = {
    testing::Kv("h2o", 340, 0, RopeK::kCached, KvPositions::kCompact),
    testing::Kv("tova", 340, 0, RopeK::kCached, KvPositions::kCompact),
    testing::Kv("snapkv", 340, 0, RopeK::kCached, KvPositions::kCompact, -1, 8),
    testing::Kv("h2o", 340, 0, RopeK::kDeferred, KvPositions::kCompact),
    testing::Kv("tova", 340, 0, RopeK::kDeferred, KvPositions::kOriginal),
};

// Runs check(policy, types, name) for the lane policies x K/V types; under
// the sanitizers every third pair, every policy and type still run.
template <class Check>
void ForEachLaneCase(Check check) {
  testing::Sweep sweep(3);
  for (int c = 0; c < std::ssize(kLanePolicies); ++c)
    for (int k = 0; k < std::ssize(kTypes); ++k) {
      if (!sweep.Next({c, k})) continue;
      const KvConfig& cfg = kLanePolicies[c];
      const std::string name = KvTypesName(kTypes[k]) + " " + std::string(RopeKName(cfg.rope_k)) +
                               " " + cfg.policy;
      SCOPED_TRACE(name);
      check(cfg, kTypes[k], name);
    }
  EXPECT_TRUE(sweep.EveryValueRan());
}

TEST(AttentionTile, LanePoliciesSameBitsInAnyTileAndAnyCut) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "tiles run on AVX2 and AVX-512 machines";
  ForEachLaneCase([](const KvConfig& cfg, const KvTypes& t, const std::string&) {
    const int tile = AttentionScratch::kTileTokens;
    const std::vector<float> want = Attend(cfg, t, 300, {70}, tile, -1.f);
    for (int max_tile : {1, 7})
      EXPECT_EQ(Attend(cfg, t, 300, {70}, max_tile, -1.f), want) << max_tile;
    EXPECT_EQ(Attend(cfg, t, 300, {30, 40}, tile, -1.f), want);
    // Cuts inside the run (compact positions renumber at each cut once
    // tokens are evicted); runs of 4 tokens or more (kMinLaneRun).
    EXPECT_EQ(Attend(cfg, t, 300, {4, 26, 40}, 5, -1.f), want);
  });
}

// ...and with the evicting tokens in replayed tiles, near that in any tile
// and at any cut: a replayed token's output is its tile's fold corrected
// for the keys evicted since the tile began, so the rounding depends on
// where the tile began. The bound is the one-token folds' (below) for float
// keys; the same tokens were evicted (the decode after would part).
TEST(AttentionTile, LanePoliciesReplayedNearInAnyTileAndAnyCut) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "tiles run on AVX2 and AVX-512 machines";
  ForEachLaneCase([](const KvConfig& cfg, const KvTypes& t, const std::string& name) {
    const int tile = AttentionScratch::kTileTokens;
    const std::vector<float> want = Attend(cfg, t, 300, {70}, tile);
    double most = 0.0;
    for (int max_tile : {1, 7}) most = std::max(most, MaxRelDiff(Attend(cfg, t, 300, {70}, max_tile), want));
    most = std::max(most, MaxRelDiff(Attend(cfg, t, 300, {30, 40}, tile), want));
    most = std::max(most, MaxRelDiff(Attend(cfg, t, 300, {4, 26, 40}, 5), want));
    EXPECT_LE(most, KvTypeQuantized(t.k) ? 1e-4 : 1e-5);
    std::printf("%-28s replayed tiles at other tiles and cuts: %.3g relative\n", name.c_str(), most);
  });
}

// ...and near the token-by-token folds (max_tile 0), within the bounds of
// NearTheOneTokenFolds: the same tokens were evicted.
TEST(AttentionTile, LanePoliciesNearTheOneTokenFolds) {
  ForEachLaneCase([](const KvConfig& cfg, const KvTypes& t, const std::string& name) {
    const double diff = MaxRelDiff(Attend(cfg, t, 300, {70}, AttentionScratch::kTileTokens),
                                   Attend(cfg, t, 300, {70}, 0));
    EXPECT_LE(diff, KvTypeQuantized(t.k) ? 0.05 : 1e-5);
    // Not zero: the tiles ran (the bits test above would also pass token by
    // token), rounding otherwise than the one-token folds.
    if (BestIsa() >= Isa::kAvx2) {
      EXPECT_GT(diff, 0.0);
    }
    std::printf("%-28s lane tiles against token by token: %.3g relative\n", name.c_str(), diff);
  });
}

}  // namespace
}  // namespace rotor
