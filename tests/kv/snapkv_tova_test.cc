// snapkv and tova on hand-made attention patterns (toy_cache.h: token j's
// score is x_j / sqrt(2) for every query): exactly which tokens survive; and
// on a GQA model, the budget of every lane at every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "kv_test_util.h"
#include "model/forward.h"
#include "toy_cache.h"

namespace rotor::testing {
namespace {

using Tokens = std::set<TextIndex>;

Tokens Range(TextIndex from, TextIndex to) {
  Tokens s;
  for (TextIndex i = from; i < to; ++i) s.insert(i);
  return s;
}

Tokens Union(Tokens a, const Tokens& b) {
  a.insert(b.begin(), b.end());
  return a;
}

// ---- tova: after token t attends, a layer holding size + 1 tokens drops the
// one t's query weighs least (ties: the oldest; t itself may go).

// What tova promises, computed from the pattern alone: the weights of one
// query are increasing in x_j, so the victim is the lowest x (oldest on ties).
std::vector<Tokens> TovaExpected(const std::vector<float>& x, int size) {
  std::vector<Tokens> after;
  Tokens held;
  for (TextIndex t = 0; t < static_cast<TextIndex>(x.size()); ++t) {
    held.insert(t);
    if (static_cast<int>(held.size()) > size) {
      TextIndex victim = *held.begin();
      for (TextIndex j : held)
        if (x[j] < x[victim]) victim = j;
      held.erase(victim);
    }
    after.push_back(held);
  }
  return after;
}

// The tokens held after every ubatch of `step` tokens.
std::vector<Tokens> RunTova(const std::vector<float>& x, int size, int step) {
  std::vector<Tokens> after;
  RunToy(Kv("tova", size), x, step, 0, [&](const KvCache& c) {
    EXPECT_LE(c.cells().used(0), size);
    after.push_back(Held(c));
  });
  return after;
}

TEST(Tova, DropsTheLowestWeightOfTheCurrentQuery) {
  // size 4: t = 4 drops 3 (x = -1), t = 5 drops 1 (0), t = 6 and t = 7 drop
  // themselves (the lowest of their step), t = 8 drops 4 (2).
  const std::vector<float> x = {5, 0, 3, -1, 2, 4, 1, -2, 6};
  const std::vector<Tokens> want = {{0},          {0, 1},       {0, 1, 2},
                                    {0, 1, 2, 3}, {0, 1, 2, 4}, {0, 2, 4, 5},
                                    {0, 2, 4, 5}, {0, 2, 4, 5}, {0, 2, 5, 8}};
  EXPECT_EQ(TovaExpected(x, 4), want);  // the rule as stated
  EXPECT_EQ(RunTova(x, 4, 1), want);
  for (int step : {2, 3, 9}) EXPECT_EQ(RunTova(x, 4, step).back(), want.back()) << step;
}

TEST(Tova, TiesDropTheOldest) {
  // Equal scores: every step drops the oldest, a window of the last 3.
  const std::vector<float> flat(8, 0.f);
  for (int step : {1, 3, 8}) EXPECT_EQ(RunTova(flat, 3, step).back(), Range(5, 8)) << step;
  // t = 3: 1 and 2 tie lowest, 1 goes; t = 4: 2 and 4 tie, 2 goes.
  const std::vector<float> x = {1, 0, 0, 1, 0};
  EXPECT_EQ(RunTova(x, 3, 1).back(), (Tokens{0, 3, 4}));
  EXPECT_EQ(RunTova(x, 3, 5).back(), (Tokens{0, 3, 4}));
}

// Random patterns: after every token the held tokens are the rule's, and the
// prefill step changes nothing.
TEST(Tova, RandomPatternsFollowTheRuleAtEveryStep) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(40);
    for (float& v : x) v = dist(rng);
    const int size = 2 + trial % 7;
    const std::vector<Tokens> want = TovaExpected(x, size);
    EXPECT_EQ(RunTova(x, size, 1), want) << "trial " << trial;
    for (int step : {4, 40}) EXPECT_EQ(RunTova(x, size, step).back(), want.back()) << trial;
  }
}

// ---- snapkv: a prompt of P tokens with window W, compressed at its end to
// the size - W earlier tokens with the largest pooled score (the window
// queries' weights summed over neighbours j-3..j+3 among those tokens) and
// the window; generation then evicts the oldest token not selected.

std::vector<Tokens> RunSnapKv(const std::vector<float>& x, int size, int window, int step,
                              int64_t prompt) {
  std::vector<Tokens> after;
  RunToy(Kv("snapkv", size, 0, RopeK::kCached, KvPositions::kOriginal, -1, window), x, step, prompt,
         [&](const KvCache& c) { after.push_back(Held(c)); });
  return after;
}

TEST(SnapKv, KeepsTheLargestPooledScoresAndTheWindow) {
  // Prompt of 20 tokens, window 4 (16..19), size 10: 6 of the 16 earlier
  // tokens are kept. Token 0 (x = 8) lifts the pooled scores of 0..3, token
  // 15 (x = 6) those of 12..15; of these 12 and 13 have the most neighbours
  // (six and five more, each adding its score of ~1). Pooling keeps 12 and
  // 13, whose own scores are the lowest; 15's is not enough on its own.
  std::vector<float> x(26, 0.f);
  x[0] = 8, x[15] = 6;
  x[21] = 10;  // generation: not scored, evicted in turn as any other
  const Tokens selected = {0, 1, 2, 3, 12, 13};
  for (int step : {1, 3, 7, 20, 26}) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const std::vector<Tokens> after = RunSnapKv(x, 10, 4, step, 20);
    if (step == 1) {
      for (int t = 0; t < 19; ++t) EXPECT_EQ(after[t], Range(0, t + 1)) << t;  // the prompt, whole
      EXPECT_EQ(after[19], Union(selected, Range(16, 20)));
      // Each generated token evicts the oldest unselected one: the window first.
      for (int t = 20; t < 26; ++t) EXPECT_EQ(after[t], Union(selected, Range(t - 3, t + 1))) << t;
    }
    if (step == 20) {
      EXPECT_EQ(after[0], Union(selected, Range(16, 20)));
    }
    EXPECT_EQ(after.back(), Union(selected, Range(22, 26)));
  }
}

TEST(SnapKv, EqualPooledScoresKeepTheOlder) {
  // Equal scores: the candidates with six neighbours (3..12) pool the same
  // sum, exactly; the older six of them are kept.
  const std::vector<float> flat(20, 0.f);
  for (int step : {1, 6, 20})
    EXPECT_EQ(RunSnapKv(flat, 10, 4, step, 20).back(), Union(Range(3, 9), Range(16, 20))) << step;
}

TEST(SnapKv, ShortPromptKeepsEveryTokenThenEvictsTheUnselected) {
  // Prompt 8, window 4, size 10: the 4 earlier tokens all fit and are
  // selected; generation fills the cache, then evicts the window and then its
  // own oldest tokens, never a selected one.
  std::vector<float> x(16, 0.f);
  x[5] = -5;
  for (int step : {1, 5, 16}) {
    const std::vector<Tokens> after = RunSnapKv(x, 10, 4, step, 8);
    EXPECT_EQ(after.back(), Union(Range(0, 4), Range(10, 16))) << step;
  }
  const std::vector<Tokens> one = RunSnapKv(x, 10, 4, 1, 8);
  EXPECT_EQ(one[9], Range(0, 10));
  EXPECT_EQ(one[10], Union(Range(0, 4), Range(5, 11)));
}

// A second prompt after generation: its candidates are every token held
// before its window, earlier selections included, and pooling runs over
// neighbouring candidates (adjacent in text order), not text indices.
TEST(SnapKv, SecondPromptPoolsOverNeighbouringCandidates) {
  std::vector<float> x(38, 0.f);
  // Prompt 1 (0..19, window 16..19): 0 is heavy, pooling lifts 0..3; of the
  // equal rest the older 4 and 5 complete the 6. Generation 20..23 then
  // evicts the window.
  x[0] = 8;
  // Prompt 2 (24..33, window 30..33). Candidates in text order: 0..5, 20..29;
  // 20 (x = 12) is the 7th, so candidates 4th..10th (3, 4, 5, 20..23) pool
  // it; 23 also pools 26 (x = -3) and drops out. Text neighbours of 20 would
  // have been 17..23 instead.
  x[20] = 12, x[26] = -3;
  for (int step : {1, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<Tokens> after;
    RunToy(Kv("snapkv", 10, 0, RopeK::kCached, KvPositions::kOriginal, -1, 4), x, step, 20,
           [&](KvCache& c) {
             after.push_back(Held(c));
             if (c.n_seen() == 24) {
               Status s = c.ExpectPrompt(10);
               EXPECT_TRUE(s.ok()) << s.message();
             }
           });
    ASSERT_EQ(after.size(), static_cast<size_t>((38 + step - 1) / step));
    EXPECT_EQ(after[24 / step - 1], Union(Range(0, 6), Range(20, 24)));
    if (step == 1) {
      EXPECT_EQ(after[33], Union(Tokens{3, 4, 5, 20, 21, 22}, Range(30, 34)));
    }
    EXPECT_EQ(after.back(), Union(Tokens{3, 4, 5, 20, 21, 22}, Range(34, 38)));
  }
}

TEST(SnapKv, WithoutAPromptKeepsTheMostRecent) {
  std::vector<float> x(30);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 5);
  for (int step : {1, 4, 30}) EXPECT_EQ(RunSnapKv(x, 8, 4, step, 0).back(), Range(22, 30)) << step;
}

// ---- Every lane within its budget at every step, on a GQA model (2 layers,
// 2 kv heads): tova's lanes are layers, snapkv's (layer, kv head) pairs.

// Prefills `n_prompt` tokens in steps of `step`, then decodes `n_decode`
// greedily one by one; after every forward pass calls check(cache).
void RunChecked(const KvConfig& kv, int n_prompt, int step, int n_decode, int64_t announce,
                const std::function<void(const KvCache&)>& check) {
  const Model& m = LoadModelCached(ModelPath("gqa"));
  ThreadPool pool(2);
  Forward fwd(m, pool, step, 512);
  auto cache = std::move(KvCache::Create(m.config().kv_shape(512), kv)).value();
  const size_t bytes = cache->memory_bytes();
  if (announce > 0) {
    ASSERT_TRUE(cache->ExpectPrompt(announce).ok());
  }
  const std::vector<int32_t> prompt = Prompt(n_prompt, m.config().n_vocab, 21);
  std::vector<float> logits(m.config().n_vocab);
  for (int b = 0; b < n_prompt; b += step) {
    const int n = std::min(step, n_prompt - b);
    SeqInput in{cache.get(), std::span<const int32_t>(prompt).subspan(b, n)};
    ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), logits.data()).ok());
    check(*cache);
    ASSERT_EQ(cache->memory_bytes(), bytes);
  }
  for (int i = 0; i < n_decode; ++i) {
    const int32_t tok =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    SeqInput in{cache.get(), std::span<const int32_t>(&tok, 1)};
    ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), logits.data()).ok());
    check(*cache);
    ASSERT_EQ(cache->memory_bytes(), bytes);
  }
}

TEST(TovaBudget, EveryLayerHoldsAtMostSizeAtEveryStep) {
  const int size = 24;
  const Model& m = LoadModelCached(ModelPath("gqa"));
  for (RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
    for (int step : {1, 7, 64}) {
      SCOPED_TRACE(::testing::Message() << RopeKName(rope) << " step " << step);
      bool lanes_differ = false;
      RunChecked(Kv("tova", size, 0, rope), 100, step, 40, 0, [&](const KvCache& c) {
        ASSERT_EQ(c.n_lanes(), m.config().n_layer);
        const int64_t want = std::min<int64_t>(c.n_seen(), size);
        for (int lane = 0; lane < c.n_lanes(); ++lane) {
          ASSERT_EQ(c.cells().used(lane), want) << "lane " << lane << " after " << c.n_seen();
          const Tokens held = Held(c, lane);
          EXPECT_LT(*held.rbegin(), c.n_seen());
          if (held != Held(c, 0)) lanes_differ = true;
        }
      });
      EXPECT_TRUE(lanes_differ) << "each layer chooses by its own attention";
    }
  }
}

TEST(SnapKvBudget, EveryHeadHoldsAtMostSizeAtEveryStep) {
  const int size = 24, window = 8, n_prompt = 120;
  const Model& m = LoadModelCached(ModelPath("gqa"));
  for (RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
    for (int step : {1, 7, 64}) {
      SCOPED_TRACE(::testing::Message() << RopeKName(rope) << " step " << step);
      bool lanes_differ = false;
      int64_t prompt_blocks = 0;  // the most blocks held while the prompt was whole
      RunChecked(Kv("snapkv", size, 0, rope, KvPositions::kOriginal, -1, window), n_prompt, step,
                 40, n_prompt, [&](const KvCache& c) {
                   ASSERT_EQ(c.n_lanes(), m.config().n_layer * m.config().n_head_kv);
                   const TextIndex n = c.n_seen();
                   if (n < n_prompt) prompt_blocks = std::max(prompt_blocks, c.n_blocks_held());
                   // After the compression the kept tokens sit in cells
                   // 0..size-1 (KvCells::CompactLane) and the blocks above
                   // went back to the pool.
                   if (n >= n_prompt) {
                     EXPECT_LT(c.n_blocks_held(), prompt_blocks);
                   }
                   for (int lane = 0; lane < c.n_lanes(); ++lane) {
                     const Tokens held = Held(c, lane);
                     if (n < n_prompt) {  // the prompt is held whole until its end
                       ASSERT_EQ(held, Range(0, n)) << "lane " << lane;
                       continue;
                     }
                     ASSERT_EQ(c.cells().used(lane), size) << "lane " << lane << " after " << n;
                     ASSERT_EQ(c.cells().hi(lane), size) << "lane " << lane << " after " << n;
                     // size - window selected before the prompt's window, then the
                     // most recent window tokens.
                     Tokens before, recent;
                     for (TextIndex j : held) (j < n_prompt - window ? before : recent).insert(j);
                     EXPECT_EQ(before.size(), static_cast<size_t>(size - window))
                         << "lane " << lane;
                     EXPECT_EQ(recent, Range(n - window, n)) << "lane " << lane;
                     if (held != Held(c, 0)) lanes_differ = true;
                   }
                 });
      EXPECT_TRUE(lanes_differ) << "each kv head chooses by its own attention";
    }
  }
}

}  // namespace
}  // namespace rotor::testing
