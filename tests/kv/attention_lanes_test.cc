// Per-lane policies' token-by-token attention (attention_lanes.cc):
// - neighbouring lanes that see the same keys in a block fold it together
//   (LaneRange), and each head's output is the same, bit for bit, as when its
//   lane folds alone;
// - a token whose lanes reach many cells is folded in splits of the cells
//   (AttendLanesSplit), near the lane ranges over all cells, and the same
//   tokens are evicted;
// - keys re-rotated by compact positions under cached RoPE are the same
//   bytes whether the lanes' rotations run on the pool's threads or in turn;
// both while nothing is evicted and after (lanes then hold other tokens in
// the same cells), under cached and deferred RoPE, compact and original
// positions, every K/V type, with and without GQA.
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

namespace rotor::attention_lanes_test {
namespace {

constexpr int kDim = 64, kPrompt = 100, kDecode = 40;

struct Heads {
  int n_head, n_head_kv;
};

// How the lanes fold: together where they can (group), and in splits of
// split_cells cells (0: never).
struct Mode {
  bool group = true;
  int32_t split_cells = 0;
  Isa isa = BestIsa();
  bool parallel_commit = false;  // KvCache::Commit re-rotates keys on the pool's threads
  // Tokens that evict in a prompt: replayed tiles with this limit, or token
  // by token (negative); the prompt in ubatches of this many tokens.
  float replay_limit = 0.5f;
  int ubatch = kPrompt;
  // Or the first ubatches' sizes (across the prompt's end), then one token each.
  std::vector<int> cuts = {};
  int threads = 2;
};

// Outputs [kPrompt + kDecode, n_head, kDim] of random q/k/v: a prompt in
// one ubatch, then decode steps of one token, on two threads.
std::vector<float> Attend(const KvConfig& base, KvTypes types, Heads heads, Mode mode,
                          AttentionScratch::LaneBuffers* counts = nullptr) {
  const int q_dim = heads.n_head * kDim, kv_dim = heads.n_head_kv * kDim;
  ops::RopeConfig rope{kDim, kDim};
  const KvKeyOffsets offsets([&] { return testing::RandomKeyOffsetValues(kv_dim); }, 1, kv_dim);
  KvShape shape{1, heads.n_head_kv, kDim, 512, rope};
  shape.k_offsets = &offsets;
  KvConfig cfg = base;
  cfg.types = types;
  auto cache = std::move(KvCache::Create(shape, cfg)).value();
  if (cfg.policy == "snapkv") {
    EXPECT_TRUE(cache->ExpectPrompt(kPrompt).ok());
  }
  ThreadPool pool(mode.threads);
  AttentionScratch scratch(mode.threads, heads.n_head, heads.n_head_kv, kDim);
  scratch.set_group_lanes(mode.group);
  scratch.set_lane_split_cells(mode.split_cells);
  scratch.set_replay_limit(mode.replay_limit);
  RopeDistanceTable table(rope, 512);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  const int n = kPrompt + kDecode;
  std::vector<float> q(n * q_dim), k(n * kv_dim), v(k.size());
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = 2 * dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<float> out(n * q_dim);  // [n, n_head, kDim]
  for (int at = 0; at < n;) {
    int m = at < kPrompt ? std::min(mode.ubatch, kPrompt - at) : 1, first = 0;
    for (const int c : mode.cuts) {
      if (at == first) m = c;
      first += c;
    }
    if (at < first && m > first - at) m = first - at;
    KvPlan p;
    EXPECT_TRUE(cache->Plan(m, &p).ok());
    EXPECT_TRUE(cache->Prepare(p).ok());
    testing::AttendOneLayer(pool, scratch, table, *cache, p, heads.n_head, heads.n_head_kv, kDim,
                            q.data() + at * q_dim, k.data() + at * kv_dim, v.data() + at * kv_dim,
                            out.data() + at * q_dim, mode.isa,
                            mode.parallel_commit ? &pool : nullptr);
    at += m;
  }
  if (counts != nullptr) *counts = scratch.ReplayCounts();
  return out;
}

using testing::MaxRelDiff;
const auto& kTypes = testing::kAttendTypes;

// h2o and tova hold 120 cells: the prompt's tokens fit (folded in tiles),
// the decode steps evict from the 21st on. snapkv compresses the announced
// prompt to its 80 cells at its end, then evicts at every step.
const KvConfig kPolicies[] = {
    testing::Kv("h2o", 120, 0, RopeK::kCached, KvPositions::kCompact),
    testing::Kv("h2o", 120, 0, RopeK::kDeferred, KvPositions::kOriginal),
    testing::Kv("snapkv", 80, 0, RopeK::kCached, KvPositions::kCompact, -1, 8),
    testing::Kv("snapkv", 80, 0, RopeK::kDeferred, KvPositions::kCompact, -1, 8),
    testing::Kv("tova", 120, 0, RopeK::kCached, KvPositions::kCompact),
    testing::Kv("tova", 120, 0, RopeK::kDeferred, KvPositions::kOriginal),
};
const Heads kHeads[] = {{8, 8}, {16, 4}};

// Runs check(policy, types, heads, isa) for the policies x K/V types x head
// shapes x the ISAs given (the best one, or each the machine runs); under the
// sanitizers every third case (every seventh with every ISA: a stride that
// shares no factor with the loops' sizes), every value still run.
template <class Check>
void ForEachCase(bool every_isa, Check check) {
  testing::Sweep sweep(every_isa ? 7 : 3);
  const int isas = every_isa ? static_cast<int>(BestIsa()) + 1 : 1;
  for (int c = 0; c < std::ssize(kPolicies); ++c)
    for (int t = 0; t < std::ssize(kTypes); ++t)
      for (int h = 0; h < std::ssize(kHeads); ++h)
        for (int i = 0; i < isas; ++i) {
          if (!sweep.Next({c, t, h, i})) continue;
          const Isa isa = every_isa ? static_cast<Isa>(i) : BestIsa();
          const KvConfig& cfg = kPolicies[c];
          const std::string name =
              KvTypesName(kTypes[t]) + " " + std::string(RopeKName(cfg.rope_k)) + " " + cfg.policy +
              " " + std::to_string(kHeads[h].n_head) + "/" + std::to_string(kHeads[h].n_head_kv) +
              " " + std::string(IsaName(isa));
          SCOPED_TRACE(name);
          check(cfg, kTypes[t], kHeads[h], isa, name);
        }
  EXPECT_TRUE(sweep.EveryValueRan());
}

TEST(AttentionLanes, LanesFoldedTogetherGiveTheBitsOfEachAlone) {
  ForEachCase(true,
              [](const KvConfig& cfg, const KvTypes& t, Heads heads, Isa isa, const std::string&) {
                EXPECT_EQ(Attend(cfg, t, heads, {.group = true, .isa = isa}),
                          Attend(cfg, t, heads, {.group = false, .isa = isa}));
              });
}

// Compact positions under cached RoPE (the first policies of each kind
// here) re-rotate kept keys at every eviction: on two threads, lane by lane,
// the outputs (so the keys) are the same bits as in turn.
TEST(AttentionLanes, KeysReRotatedOnThreadsGiveTheSameBits) {
  ForEachCase(false, [](const KvConfig& cfg, const KvTypes& t, Heads heads, Isa,
                        const std::string&) {
    EXPECT_EQ(Attend(cfg, t, heads, {.parallel_commit = true}), Attend(cfg, t, heads, {}));
  });
}

// Splits of 16 cells against none (whole blocks of 64 but the last: at 120
// cells, h2o's and tova's, [0, 64) and [64, 120); at 80, snapkv's after its
// compression moved its tokens into cells 0..79, [0, 64) and [64, 80)): within rounding
// of the merged softmax states (float keys) or of the keys' integer
// scoring (the same as the ranges': block types' bound is the float one's
// too), so the same tokens were evicted.
TEST(AttentionLanes, SplitsOfTheCellsNearTheLaneRanges) {
  ForEachCase(
      false, [](const KvConfig& cfg, const KvTypes& t, Heads heads, Isa, const std::string& name) {
        const std::vector<float> ranges = Attend(cfg, t, heads, {.split_cells = 0});
        const double diff = MaxRelDiff(Attend(cfg, t, heads, {.split_cells = 16}), ranges);
        EXPECT_LE(diff, 1e-5);
        EXPECT_GT(diff, 0.0);  // the splits ran, and merged
        std::printf("%-34s splits against lane ranges: %.3g relative\n", name.c_str(), diff);
      });
}


// A prompt longer than the cache: h2o (40 cells, 32 recent) and tova (40)
// evict at every token past the 40th. Those tokens fold in tiles and are
// replayed through the hooks, each corrected for the keys evicted within its
// tile (attention_lane_replay.cc): near token by token (the same tokens
// evicted, or the decode steps after would part), on two threads as on
// one, in one ubatch and in ubatches of 37 (tiles that start with cells of
// earlier ubatches and of the same one). With a limit of 0 every corrected
// token is folded again alone instead, which is the token-by-token fold.
// ISAs without the tile folds run token by token.
TEST(AttentionLanes, EvictingPromptsReplayedNearTokenByToken) {
  const KvConfig policies[] = {
      testing::Kv("h2o", 40, 0, RopeK::kCached, KvPositions::kCompact),
      testing::Kv("h2o", 40, 0, RopeK::kDeferred, KvPositions::kCompact),
      testing::Kv("tova", 40, 0, RopeK::kDeferred, KvPositions::kCompact),
      testing::Kv("tova", 40, 0, RopeK::kCached, KvPositions::kOriginal),
  };
  testing::Sweep sweep(3);
  for (int c = 0; c < std::ssize(policies); ++c)
    for (int t = 0; t < std::ssize(kTypes); ++t)
      for (int h = 0; h < std::ssize(kHeads); ++h)
        for (const int ubatch : {kPrompt, 37}) {
          if (!sweep.Next({c, t, h, ubatch == kPrompt ? 0 : 1})) continue;
          const KvConfig& cfg = policies[c];
          const std::string name = KvTypesName(kTypes[t]) + " " +
                                   std::string(RopeKName(cfg.rope_k)) + " " + cfg.policy + " " +
                                   std::to_string(kHeads[h].n_head) + "/" +
                                   std::to_string(kHeads[h].n_head_kv) + " ubatch " +
                                   std::to_string(ubatch);
          SCOPED_TRACE(name);
          AttentionScratch::LaneBuffers replayed, alone, by_token;
          const std::vector<float> tokens =
              Attend(cfg, kTypes[t], kHeads[h], {.replay_limit = -1.f, .ubatch = ubatch}, &by_token);
          const std::vector<float> tiles =
              Attend(cfg, kTypes[t], kHeads[h], {.ubatch = ubatch}, &replayed);
          const std::vector<float> again =
              Attend(cfg, kTypes[t], kHeads[h], {.replay_limit = 0.f, .ubatch = ubatch}, &alone);
          EXPECT_EQ(by_token.replayed, 0);
          // On one thread: h2o's lanes in turn, tova's heads in one piece
          // (on two, its kv heads are split into a piece per thread): the
          // same bits.
          EXPECT_EQ(Attend(cfg, kTypes[t], kHeads[h], {.ubatch = ubatch, .threads = 1}), tiles);
          const double diff = MaxRelDiff(tiles, tokens), diff0 = MaxRelDiff(again, tokens);
          EXPECT_LE(diff, 1e-4);
          EXPECT_LE(diff0, 1e-4);
          if (BestIsa() == Isa::kScalar) {
            EXPECT_EQ(replayed.replayed, 0);
            continue;
          }
          // 60 tokens of the prompt evict, in every lane (h2o: one per kv
          // head); in ubatches of 37, the 3 of the second before them too
          // (fewer than a tile run's least).
          const int lanes = cfg.policy == "h2o" ? kHeads[h].n_head_kv : 1;
          EXPECT_EQ(replayed.replayed, (kPrompt - 40 + (ubatch == kPrompt ? 0 : 3)) * lanes);
          EXPECT_GT(replayed.corrected, 0);  // both ways ran
          EXPECT_GT(replayed.alone, 0);
          EXPECT_EQ(alone.replayed, replayed.replayed);
          EXPECT_EQ(alone.corrected, 0);
          EXPECT_GE(alone.alone, replayed.corrected);
          std::printf("%-40s replayed %lld (corrected %lld, alone %lld): %.3g; all alone %.3g\n",
                      name.c_str(), static_cast<long long>(replayed.replayed),
                      static_cast<long long>(replayed.corrected),
                      static_cast<long long>(replayed.alone), diff, diff0);
        }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// snapkv compresses its announced prompt at the prompt's last token
// (AfterToken), evicting many keys at once. With the prompt's last 2 tokens
// and 40 more in one ubatch, those 42 are replayed: the tokens after the
// compression find their lane changed in many cells (LaneReplay::Track
// compares every cell) and most of the tile's probability gone, and are
// folded again alone; the rest corrected. Near token by token.
TEST(AttentionLanes, CompressionInsideAReplayedTile) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "tiles run on AVX2 and AVX-512 machines";
  for (const RopeK rk : {RopeK::kCached, RopeK::kDeferred})
    for (const KvTypes& t : kTypes) {
      const KvConfig cfg = testing::Kv("snapkv", 80, 0, rk, KvPositions::kCompact, -1, 8);
      SCOPED_TRACE(KvTypesName(t) + " " + std::string(RopeKName(rk)));
      AttentionScratch::LaneBuffers replayed;
      const Mode cut = {.cuts = {kPrompt - 2, kDecode + 2}};
      Mode by_token = cut;
      by_token.replay_limit = -1.f;
      const double diff = MaxRelDiff(Attend(cfg, t, {8, 8}, cut, &replayed),
                                     Attend(cfg, t, {8, 8}, by_token));
      EXPECT_LE(diff, 1e-4);
      EXPECT_EQ(replayed.replayed, (kDecode + 2) * 8);  // 8 lanes
      EXPECT_GT(replayed.alone, 0);
      EXPECT_GT(replayed.corrected, 0);
    }
}

}  // namespace
}  // namespace rotor::attention_lanes_test
