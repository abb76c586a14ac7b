// Prefill tiles (attention.cc TaskRunner, FoldTileAvx2): a token's attention
// is the same, bit for bit, whatever tile it is folded in and however its
// sequence is cut into ubatches; and near the one-token folds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "base/cpu.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "attend_util.h"
#include "kv_test_util.h"

namespace rotor {
namespace {

constexpr int kHeads = 8, kHeadsKv = 2, kDim = 64;

// Outputs [n, kHeads, kDim] of tokens [0, n) of random q/k/v, attended in
// ubatches of the given sizes over a cache that starts with `depth` tokens,
// by tiles of at most max_tile tokens (0: no tiles).
std::vector<float> Attend(const KvConfig& base, KvTypes types, int depth,
                          const std::vector<int>& ubatches, int max_tile) {
  const int q_dim = kHeads * kDim, kv_dim = kHeadsKv * kDim;
  ops::RopeConfig rope{kDim, kDim};
  KvShape shape{1, kHeadsKv, kDim, 1024, rope};
  KvConfig cfg = base;
  cfg.types = types;
  auto cache = std::move(KvCache::Create(shape, cfg)).value();
  ThreadPool pool(2);
  AttentionScratch scratch(2, kHeads, kHeadsKv, kDim);
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

const KvTypes kTypes[] = {{KvType::kF32, KvType::kF32},
                          {KvType::kF16, KvType::kF16},
                          {KvType::kQ8_0, KvType::kQ8_0},
                          {KvType::kQ4_0, KvType::kQ5_0}};

TEST(AttentionTile, SameBitsInAnyTileAndAnyCut) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "tiles run on AVX2 and AVX-512 machines";
  for (const KvTypes& t : kTypes) {
    SCOPED_TRACE(KvTypesName(t));
    const KvConfig full = testing::Kv("full", 0);
    const std::vector<float> want = Attend(full, t, 300, {70}, AttentionScratch::kTileTokens);
    for (int max_tile : {1, 7}) EXPECT_EQ(Attend(full, t, 300, {70}, max_tile), want) << max_tile;
    // A prefix hit or another chunk size: the same tokens in other ubatches.
    EXPECT_EQ(Attend(full, t, 300, {30, 40}, AttentionScratch::kTileTokens), want);
    EXPECT_EQ(Attend(full, t, 300, {4, 9, 57}, 5), want);
    // Tokens that see different cells (a window) or two passes (sinks at a
    // shifted distance: compact positions): the tile size still changes
    // nothing.
    for (const KvConfig& cfg : {testing::Kv("window", 100),
                                testing::Kv("sink", 128, 4, RopeK::kCached, KvPositions::kCompact)}) {
      const std::vector<float> w = Attend(cfg, t, 300, {70}, AttentionScratch::kTileTokens);
      EXPECT_EQ(Attend(cfg, t, 300, {70}, 1), w);
      EXPECT_EQ(Attend(cfg, t, 300, {70}, 6), w);
    }
  }
}

// Against the one-token folds (max_tile 0): float keys within rounding,
// block-type keys within the difference of their integer scoring.
TEST(AttentionTile, NearTheOneTokenFolds) {
  for (const KvTypes& t : kTypes) {
    SCOPED_TRACE(KvTypesName(t));
    const KvConfig full = testing::Kv("full", 0);
    const std::vector<float> tiled = Attend(full, t, 300, {70}, AttentionScratch::kTileTokens);
    const std::vector<float> alone = Attend(full, t, 300, {70}, 0);
    double diff = 0, scale = 0;
    for (size_t e = 0; e < tiled.size(); ++e) {
      diff = std::max(diff, std::fabs(static_cast<double>(tiled[e]) - alone[e]));
      scale = std::max(scale, std::fabs(static_cast<double>(alone[e])));
    }
    const bool blocks = KvTypeQuantized(t.k);
    EXPECT_LE(diff / scale, blocks ? 0.05 : 1e-5);
    std::printf("%-10s tiles against one-token folds: %.3g relative\n", KvTypesName(t).c_str(),
                diff / scale);
  }
}

}  // namespace
}  // namespace rotor
