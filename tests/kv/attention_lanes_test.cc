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
};

// Outputs [kPrompt + kDecode, n_head, kDim] of random q/k/v: a prompt in
// one ubatch, then decode steps of one token, on two threads.
std::vector<float> Attend(const KvConfig& base, KvTypes types, Heads heads, Mode mode) {
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
  ThreadPool pool(2);
  AttentionScratch scratch(2, heads.n_head, heads.n_head_kv, kDim);
  scratch.set_group_lanes(mode.group);
  scratch.set_lane_split_cells(mode.split_cells);
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
    const int m = at == 0 ? kPrompt : 1;
    KvPlan p;
    EXPECT_TRUE(cache->Plan(m, &p).ok());
    EXPECT_TRUE(cache->Prepare(p).ok());
    testing::AttendOneLayer(pool, scratch, table, *cache, p, heads.n_head, heads.n_head_kv, kDim,
                            q.data() + at * q_dim, k.data() + at * kv_dim, v.data() + at * kv_dim,
                            out.data() + at * q_dim, mode.isa,
                            mode.parallel_commit ? &pool : nullptr);
    at += m;
  }
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

}  // namespace
}  // namespace rotor::attention_lanes_test
