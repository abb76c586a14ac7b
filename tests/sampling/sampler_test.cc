#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <vector>

// Counts heap allocations, to check that Sample() makes none. (GCC cannot tell
// that these replacements pair malloc with free.)
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace rotor {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Everything off but temperature: plain softmax sampling.
SamplingParams Plain(float temperature, uint64_t seed = 1234) {
  return {.temperature = temperature,
          .top_k = 0,
          .top_p = 1.0f,
          .min_p = 0.0f,
          .repeat_penalty = 1.0f,
          .repeat_last_n = 64,
          .seed = seed};
}

SamplingParams Greedy() { return Plain(0.0f); }

std::vector<float> RandomLogits(int n, uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::map<int32_t, int> Histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.Sample(logits)];
  return h;
}

std::set<int32_t> Keys(const std::map<int32_t, int>& h) {
  std::set<int32_t> k;
  for (const auto& [id, count] : h) k.insert(id);
  return k;
}

// Four "real" tokens with probabilities 0.5 (id 2), 0.3 (id 0), 0.15 (id 3) and
// 0.05 (id 1), then `padding` tokens of negligible total mass (1e-6), so both the
// top-k path (top_k = n_vocab - 1) and the full path can be run on them.
std::vector<float> FourTokens(int padding = 96) {
  std::vector<float> v(4 + padding, std::log(1e-6f / std::max(padding, 1)));
  v[2] = std::log(0.5f);
  v[0] = std::log(0.3f);
  v[3] = std::log(0.15f);
  v[1] = std::log(0.05f);
  return v;
}

// Pearson's chi-square statistic of observed counts against probabilities.
double ChiSquare(const std::map<int32_t, int>& h, const std::vector<double>& probs, int draws) {
  double chi2 = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    auto it = h.find(static_cast<int32_t>(i));
    const double observed = it == h.end() ? 0 : it->second;
    const double expected = probs[i] * draws;
    chi2 += (observed - expected) * (observed - expected) / expected;
  }
  return chi2;
}

TEST(SamplerTest, GreedyPicksArgmax) {
  for (int n : {1, 7, 33, 4099, 150000}) {
    Sampler s(Greedy(), n);
    for (uint32_t trial = 0; trial < 5; ++trial) {
      std::vector<float> logits = RandomLogits(n, trial * 7919 + n);
      EXPECT_EQ(s.Sample(logits), Argmax(logits)) << "n=" << n << " trial=" << trial;
    }
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  Sampler s(Greedy(), 10);
  std::vector<float> logits(10, 0.0f);
  EXPECT_EQ(s.Sample(logits), 0);
  logits[9] = 3.0f;
  logits[5] = 3.0f;
  logits[7] = 3.0f;
  EXPECT_EQ(s.Sample(logits), 5);
  logits[8] = kInf;
  logits[6] = kInf;
  EXPECT_EQ(s.Sample(logits), 6);
}

TEST(SamplerTest, NonFiniteLogits) {
  // NaN is never picked; +inf always wins; all -inf / NaN falls back to the lowest id.
  std::vector<float> logits = {kNaN, 1.0f, kNaN, 2.0f, kNaN};
  Sampler greedy(Greedy(), 5);
  EXPECT_EQ(greedy.Sample(logits), 3);
  for (int top_k : {0, 2}) {
    SamplingParams p = Plain(1.0f);
    p.top_k = top_k;
    Sampler s(p, 5);
    EXPECT_EQ(Keys(Histogram(s, logits, 500)), (std::set<int32_t>{1, 3})) << "top_k=" << top_k;
    std::vector<float> inf_logits = {0.0f, kInf, 5.0f, kNaN, -kInf};
    EXPECT_EQ(Keys(Histogram(s, inf_logits, 100)), (std::set<int32_t>{1}));
    std::vector<float> dead = {kNaN, -kInf, -kInf, kNaN, -kInf};
    EXPECT_EQ(s.Sample(dead), 1);
    EXPECT_EQ(greedy.Sample(dead), 1);
  }
  std::vector<float> all_nan(5, kNaN);
  EXPECT_EQ(greedy.Sample(all_nan), 0);
}

TEST(SamplerTest, TopK1EqualsGreedy) {
  const int n = 5000;
  SamplingParams p = Plain(1.5f, 99);
  p.top_k = 1;
  Sampler top1(p, n);
  Sampler greedy(Greedy(), n);
  for (uint32_t trial = 0; trial < 50; ++trial) {
    std::vector<float> logits = RandomLogits(n, trial);
    if (trial % 5 == 0) logits[n - 1] = logits[trial] = 100.0f;  // a tie
    EXPECT_EQ(top1.Sample(logits), greedy.Sample(logits)) << "trial=" << trial;
  }
}

TEST(SamplerTest, SameSeedSameTokens) {
  const int n = 2000;
  for (int top_k : {0, 40}) {
    SamplingParams p{.temperature = 1.0f,
                     .top_k = top_k,
                     .top_p = 0.9f,
                     .min_p = 0.01f,
                     .repeat_penalty = 1.3f,
                     .repeat_last_n = 16,
                     .seed = 42};
    Sampler a(p, n), b(p, n);
    for (uint32_t step = 0; step < 200; ++step) {
      std::vector<float> logits = RandomLogits(n, step, 1.0f);
      int32_t ta = a.Sample(logits), tb = b.Sample(logits);
      ASSERT_EQ(ta, tb) << "top_k=" << top_k << " step=" << step;
      a.Accept(ta);
      b.Accept(tb);
    }
  }
}

TEST(SamplerTest, InterleavedSequencesMatchSolo) {
  // Two sequences sampled alternately (as in a batch) get what each gets alone.
  const int n = 512;
  auto params = [](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.repeat_penalty = 1.2f;
    p.seed = seed;
    return p;
  };
  auto run = [&](Sampler& s, uint32_t salt, int step) {
    int32_t t = s.Sample(RandomLogits(n, salt * 100000 + step, 1.0f));
    s.Accept(t);
    return t;
  };
  std::vector<int32_t> solo_a, solo_b, mixed_a, mixed_b;
  {
    Sampler a(params(7), n), b(params(8), n);
    for (int i = 0; i < 100; ++i) solo_a.push_back(run(a, 1, i));
    for (int i = 0; i < 100; ++i) solo_b.push_back(run(b, 2, i));
  }
  Sampler a(params(7), n), b(params(8), n);
  for (int i = 0; i < 100; ++i) {
    mixed_b.push_back(run(b, 2, i));
    mixed_a.push_back(run(a, 1, i));
  }
  EXPECT_EQ(solo_a, mixed_a);
  EXPECT_EQ(solo_b, mixed_b);
}

TEST(SamplerTest, ResetReproduces) {
  const int n = 300;
  SamplingParams p = Plain(1.0f, 5);
  p.repeat_penalty = 1.5f;
  Sampler s(p, n);
  auto run = [&] {
    std::vector<int32_t> out;
    for (uint32_t i = 0; i < 50; ++i) {
      out.push_back(s.Sample(RandomLogits(n, i, 1.0f)));
      s.Accept(out.back());
    }
    return out;
  };
  std::vector<int32_t> first = run();
  s.Reset();
  EXPECT_EQ(run(), first);
}

TEST(SamplerTest, DifferentSeedsDifferentTokens) {
  // A flat distribution over 1000 tokens: two seeds agree on ~0.1% of draws.
  const int n = 1000;
  std::vector<float> flat(n, 0.0f);
  Sampler a(Plain(1.0f, 1), n), b(Plain(1.0f, 2), n);
  int same = 0;
  for (int i = 0; i < 500; ++i) same += a.Sample(flat) == b.Sample(flat);
  EXPECT_LT(same, 10);
}

TEST(SamplerTest, RandomSeedIsReportedAndReproducible) {
  const int n = 1000;
  std::vector<float> flat(n, 0.0f);
  Sampler r1(Plain(1.0f, kRandomSeed), n), r2(Plain(1.0f, kRandomSeed), n);
  EXPECT_NE(r1.seed(), kRandomSeed);
  EXPECT_NE(r1.seed(), r2.seed());
  Sampler replay(Plain(1.0f, r1.seed()), n);
  EXPECT_EQ(replay.seed(), r1.seed());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(r1.Sample(flat), replay.Sample(flat));
  Sampler fixed(Plain(1.0f, 77), n);
  EXPECT_EQ(fixed.seed(), 77u);
}

TEST(SamplerTest, TopKKeepsTheKBest) {
  const int n = 1000;
  std::vector<float> logits(n, 0.0f);
  logits[500] = 1.0f;
  logits[10] = 1.0f;
  logits[999] = 0.9f;
  logits[3] = 0.5f;
  SamplingParams p = Plain(1.0f);
  p.top_k = 3;
  Sampler s(p, n);
  EXPECT_EQ(Keys(Histogram(s, logits, 3000)), (std::set<int32_t>{10, 500, 999}));
  // Ties at the cut go to the lowest ids.
  std::vector<float> flat(n, 0.0f);
  EXPECT_EQ(Keys(Histogram(s, flat, 3000)), (std::set<int32_t>{0, 1, 2}));
}

// Runs on both selection paths: full (top_k = 0) and top-k (k = n_vocab - 1).
class FilterTest : public ::testing::TestWithParam<bool> {
 protected:
  Sampler Make(float top_p, float min_p) {
    std::vector<float> logits = FourTokens();
    SamplingParams p = Plain(1.0f, 2024);
    p.top_k = GetParam() ? static_cast<int>(logits.size()) - 1 : 0;
    p.top_p = top_p;
    p.min_p = min_p;
    return Sampler(p, static_cast<int32_t>(logits.size()));
  }
  std::set<int32_t> Kept(float top_p, float min_p) {
    Sampler s = Make(top_p, min_p);
    return Keys(Histogram(s, FourTokens(), 4000));
  }
};

TEST_P(FilterTest, TopPKeepsSmallestSetReachingP) {
  EXPECT_EQ(Kept(0.0f, 0.0f), (std::set<int32_t>{2}));
  EXPECT_EQ(Kept(0.45f, 0.0f), (std::set<int32_t>{2}));
  EXPECT_EQ(Kept(0.55f, 0.0f), (std::set<int32_t>{2, 0}));
  EXPECT_EQ(Kept(0.75f, 0.0f), (std::set<int32_t>{2, 0}));
  EXPECT_EQ(Kept(0.85f, 0.0f), (std::set<int32_t>{2, 0, 3}));
  EXPECT_EQ(Kept(0.99f, 0.0f), (std::set<int32_t>{2, 0, 3, 1}));
}

TEST_P(FilterTest, TopPRenormalises) {
  // top_p = 0.75 keeps {0.5, 0.3}: drawn 5:3.
  Sampler s = Make(0.75f, 0.0f);
  const int draws = 20000;
  std::map<int32_t, int> h = Histogram(s, FourTokens(), draws);
  EXPECT_NEAR(h[2] / double(draws), 0.625, 0.02);
  EXPECT_NEAR(h[0] / double(draws), 0.375, 0.02);
}

TEST_P(FilterTest, MinPRemovesTokensBelowFractionOfMax) {
  EXPECT_EQ(Kept(1.0f, 0.05f), (std::set<int32_t>{2, 0, 3, 1}));  // cut at 0.025
  EXPECT_EQ(Kept(1.0f, 0.2f), (std::set<int32_t>{2, 0, 3}));      // cut at 0.1
  EXPECT_EQ(Kept(1.0f, 0.35f), (std::set<int32_t>{2, 0}));        // cut at 0.175
  EXPECT_EQ(Kept(1.0f, 1.0f), (std::set<int32_t>{2}));
}

TEST_P(FilterTest, TopPAndMinPCombine) {
  EXPECT_EQ(Kept(0.99f, 0.35f), (std::set<int32_t>{2, 0}));
  EXPECT_EQ(Kept(0.55f, 0.2f), (std::set<int32_t>{2, 0}));
}

INSTANTIATE_TEST_SUITE_P(Paths, FilterTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "TopK" : "Full"; });

TEST(SamplerTest, FullVocabularyDrawDistribution) {
  // 1000 tokens in four classes of weight 1:2:3:4, drawn with nothing cut (the
  // dense draw, which skips whole blocks of the vocabulary).
  const int n = 1000, draws = 20000;
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[i] = std::log(1.0f + i % 4);
  Sampler s(Plain(1.0f, 4242), n);
  std::map<int32_t, int> by_class;
  for (const auto& [id, count] : Histogram(s, logits, draws)) by_class[id % 4] += count;
  EXPECT_LT(ChiSquare(by_class, {0.1, 0.2, 0.3, 0.4}, draws), 25.0);  // 3 dof
}

TEST(SamplerTest, TopPWithHeavyTail) {
  // One token with q = 1 and 50k tail tokens with q = 2^-17 each (mass ~0.38):
  // the nucleus for top_p = 0.9 needs the top token and the first ~32k of the
  // tail (ties go to lower ids), far below the 2^-8 and 2^-16 shortcuts.
  const int n = 50001, draws = 2000;
  std::vector<float> logits(n, -17.0f * std::log(2.0f));
  logits[n / 2] = 0.0f;
  const double tail_q = std::exp2(-17.0), total = 1.0 + (n - 1) * tail_q;
  const double needed = (0.9 * total - 1.0) / tail_q;  // tail tokens in the nucleus
  SamplingParams p = Plain(1.0f, 77);
  p.top_p = 0.9f;
  Sampler s(p, n);
  std::map<int32_t, int> h = Histogram(s, logits, draws);
  int32_t max_rank = 0;  // the highest tail rank drawn; rank = id, skipping the top token
  for (const auto& [id, count] : h) {
    if (id != n / 2) max_rank = std::max(max_rank, id < n / 2 ? id : id - 1);
  }
  // Float summation of 50k equal terms may move the boundary by a few tokens.
  EXPECT_LE(max_rank, needed * 1.001 + 1);
  EXPECT_GE(max_rank, needed * 0.97);  // ~390 tail draws: P(below) ~ 1e-5
  EXPECT_NEAR(h[n / 2] / double(draws), 1.0 / (1.0 + needed * tail_q), 0.03);
}

TEST(SamplerTest, TinyTemperatureIsGreedy) {
  SamplingParams p = Plain(1e-40f, 1);
  ASSERT_TRUE(ValidateSamplingParams(p).ok());
  Sampler s(p, 4099);
  for (uint32_t trial = 0; trial < 5; ++trial) {
    std::vector<float> logits = RandomLogits(4099, trial);
    EXPECT_EQ(s.Sample(logits), Argmax(logits));
  }
}

TEST(SamplerTest, SampleDoesNotAllocate) {
  const int n = 50000;
  std::vector<float> logits = RandomLogits(n, 3);
  SamplingParams top_k{.temperature = 0.9f, .repeat_penalty = 1.2f, .seed = 1};
  SamplingParams all = top_k, greedy = top_k, plain = Plain(1.0f);
  all.top_k = 0;
  greedy.temperature = 0;
  SamplingParams whole = all;
  whole.repeat_last_n = -1;
  for (const SamplingParams& p : {top_k, all, greedy, plain, whole}) {
    Sampler s(p, n);
    for (int i = 0; i < 64; ++i) s.Accept(i * 31);
    const int64_t before = g_allocations.load();
    for (int i = 0; i < 20; ++i) s.Sample(logits);
    EXPECT_EQ(g_allocations.load(), before);
  }
}

TEST(SamplerTest, TemperatureShapesDistribution) {
  // Five tokens plus one that never wins, so top_k = 5 runs the top-k path.
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 2.0f, -1.0f, -1e9f};
  const int draws = 20000;
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    std::vector<double> probs(5);
    double z = 0;
    for (int i = 0; i < 5; ++i) z += probs[i] = std::exp(logits[i] / temperature);
    for (double& q : probs) q /= z;
    for (int top_k : {0, 5}) {
      SamplingParams p = Plain(temperature, 31337);
      p.top_k = top_k;
      Sampler s(p, static_cast<int32_t>(logits.size()));
      std::map<int32_t, int> h = Histogram(s, logits, draws);
      EXPECT_EQ(h.count(5), 0u);
      // 4 degrees of freedom: P(chi2 > 25) ~ 5e-5. The seed is fixed, so no flakes.
      EXPECT_LT(ChiSquare(h, probs, draws), 25.0) << "T=" << temperature << " top_k=" << top_k;
    }
  }
  // Hotter is flatter: the top token's share falls as temperature rises.
  Sampler cold(Plain(0.5f, 3), 6), hot(Plain(2.0f, 3), 6);
  EXPECT_GT(Histogram(cold, logits, draws)[3], Histogram(hot, logits, draws)[3] + 3000);
}

// The three ways a penalised token can reach the result: greedy, top-k path and
// full path (min_p = 1 keeps only the most likely token, so all are deterministic).
std::vector<SamplingParams> PenaltyModes(float penalty, int last_n) {
  SamplingParams greedy = Greedy(), top1 = Plain(1.0f), full = Plain(1.0f);
  top1.top_k = 1;
  full.min_p = 1.0f;
  std::vector<SamplingParams> modes = {greedy, top1, full};
  for (SamplingParams& p : modes) {
    p.repeat_penalty = penalty;
    p.repeat_last_n = last_n;
  }
  return modes;
}

TEST(SamplerTest, RepetitionPenaltyPositiveLogits) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 4.0f;
  logits[4] = 1.5f;
  for (const SamplingParams& p : PenaltyModes(2.0f, 64)) {
    Sampler s(p, 10);
    EXPECT_EQ(s.Sample(logits), 3);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // 4 / 2 = 2 > 1.5
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // penalised once, not twice
  }
  for (const SamplingParams& p : PenaltyModes(3.0f, 64)) {
    Sampler s(p, 10);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 4);  // 4 / 3 < 1.5
  }
}

TEST(SamplerTest, RepetitionPenaltyNegativeLogits) {
  std::vector<float> logits(10, -3.0f);
  logits[5] = -1.0f;
  logits[6] = -1.5f;
  for (const SamplingParams& p : PenaltyModes(2.0f, 64)) {
    Sampler s(p, 10);
    EXPECT_EQ(s.Sample(logits), 5);
    s.Accept(5);
    EXPECT_EQ(s.Sample(logits), 6);  // -1 * 2 = -2 < -1.5
  }
}

TEST(SamplerTest, RepetitionPenaltyBelowOneBoosts) {
  std::vector<float> logits(10, 0.0f);
  logits[7] = 1.8f;
  logits[2] = 1.0f;
  for (const SamplingParams& p : PenaltyModes(0.5f, 64)) {
    Sampler s(p, 10);
    EXPECT_EQ(s.Sample(logits), 7);
    s.Accept(2);
    EXPECT_EQ(s.Sample(logits), 2);  // 1 / 0.5 = 2 > 1.8
  }
}

TEST(SamplerTest, RepetitionPenaltyWindow) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 4.0f;
  logits[4] = 1.5f;
  for (const SamplingParams& p : PenaltyModes(3.0f, 2)) {
    Sampler s(p, 10);
    s.Accept(3);
    s.Accept(8);
    EXPECT_EQ(s.Sample(logits), 4);
    s.Accept(9);  // 3 leaves the window of 2
    EXPECT_EQ(s.Sample(logits), 3);
    s.Accept(3);
    s.Accept(3);
    s.Accept(1);  // 3 is still in the window once
    EXPECT_EQ(s.Sample(logits), 4);
    s.Reset();
    EXPECT_EQ(s.Sample(logits), 3);
  }
  for (const SamplingParams& p : PenaltyModes(3.0f, -1)) {
    Sampler s(p, 10);
    s.Accept(3);
    for (int i = 0; i < 1000; ++i) s.Accept(i % 2 == 0 ? 8 : 9);
    EXPECT_EQ(s.Sample(logits), 4);  // the whole history counts
    s.Reset();
    EXPECT_EQ(s.Sample(logits), 3);
  }
  for (const SamplingParams& p : PenaltyModes(3.0f, 0)) {  // window 0 = off
    Sampler s(p, 10);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);
  }
  for (const SamplingParams& p : PenaltyModes(1.0f, 64)) {  // penalty 1 = off
    Sampler s(p, 10);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);
  }
}

TEST(SamplerTest, RepetitionPenaltyShiftsDistribution) {
  // logits 0 and log(2) at penalty 2: token 1's logit halves, so its odds go 2:1 -> sqrt(2):1.
  std::vector<float> logits = {0.0f, std::log(2.0f)};
  SamplingParams p = Plain(1.0f, 8);
  p.repeat_penalty = 2.0f;
  Sampler s(p, 2);
  s.Accept(1);
  const int draws = 20000;
  std::map<int32_t, int> h = Histogram(s, logits, draws);
  EXPECT_NEAR(h[1] / double(draws), std::sqrt(2.0) / (1 + std::sqrt(2.0)), 0.015);
}

// Presence and frequency penalties (llama.cpp's, after the repetition
// penalty): logit - count * frequency - presence, with count the token's
// occurrences in the window.
std::vector<SamplingParams> PresenceModes(float presence, float frequency, int last_n) {
  std::vector<SamplingParams> modes = PenaltyModes(1.0f, last_n);
  for (SamplingParams& p : modes) {
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
  }
  return modes;
}

TEST(SamplerTest, PresencePenaltySubtractsOncePerToken) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 2.0f;
  logits[4] = 1.5f;
  for (const SamplingParams& p : PresenceModes(0.4f, 0.0f, 64)) {
    Sampler s(p, 10);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // 2 - 0.4 = 1.6 > 1.5
    s.Accept(3);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // however often: still 1.6
  }
  for (const SamplingParams& p : PresenceModes(0.6f, 0.0f, 64)) {
    Sampler s(p, 10);
    EXPECT_EQ(s.Sample(logits), 3);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 4);  // 2 - 0.6 = 1.4 < 1.5
  }
  for (const SamplingParams& p : PresenceModes(-1.0f, 0.0f, 64)) {  // negative: encourages
    Sampler s(p, 10);
    s.Accept(4);
    EXPECT_EQ(s.Sample(logits), 4);  // 1.5 + 1 > 2
  }
}

TEST(SamplerTest, FrequencyPenaltyCountsOccurrencesInTheWindow) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 2.0f;
  logits[4] = 1.5f;
  for (const SamplingParams& p : PresenceModes(0.0f, 0.2f, 4)) {
    Sampler s(p, 10);
    s.Accept(3);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // 2 - 2 * 0.2 = 1.6 > 1.5
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 4);  // 2 - 3 * 0.2 = 1.4
    s.Accept(8);
    s.Accept(8);
    s.Accept(8);  // the window of 4 now holds 3 once
    EXPECT_EQ(s.Sample(logits), 3);  // 1.8
  }
  for (const SamplingParams& p : PresenceModes(0.0f, 0.2f, -1)) {  // the whole history
    Sampler s(p, 10);
    for (int i = 0; i < 3; ++i) s.Accept(3);
    for (int i = 0; i < 100; ++i) s.Accept(8);
    EXPECT_EQ(s.Sample(logits), 4);  // 3 occurrences: 1.4
    s.Reset();
    EXPECT_EQ(s.Sample(logits), 3);
  }
  for (const SamplingParams& p : PresenceModes(0.0f, 0.2f, 0)) {  // window 0 = off
    Sampler s(p, 10);
    for (int i = 0; i < 5; ++i) s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);
  }
}

TEST(SamplerTest, PenaltiesCombineInLlamaCppOrder) {
  // Repetition first (4 / 2 = 2), then - 2 * 0.25 - 0.1 = 1.4 < 1.45.
  std::vector<float> logits(10, 0.0f);
  logits[3] = 4.0f;
  logits[4] = 1.45f;
  for (SamplingParams p : PresenceModes(0.1f, 0.25f, 64)) {
    p.repeat_penalty = 2.0f;
    Sampler s(p, 10);
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 3);  // 2 - 0.25 - 0.1 = 1.65
    s.Accept(3);
    EXPECT_EQ(s.Sample(logits), 4);
  }
}

TEST(SamplerTest, PresencePenaltyShiftsDistribution) {
  // logits 0 and 0: a presence penalty of log(2) on token 1 makes the odds 2:1.
  std::vector<float> logits = {0.0f, 0.0f};
  SamplingParams p = Plain(1.0f, 8);
  p.presence_penalty = std::log(2.0f);
  Sampler s(p, 2);
  s.Accept(1);
  const int draws = 20000;
  std::map<int32_t, int> h = Histogram(s, logits, draws);
  EXPECT_NEAR(h[0] / double(draws), 2.0 / 3.0, 0.015);
}

TEST(SamplerTest, LargeVocabularyMatchesReferenceFilter) {
  // 150k logits, top-k off, top-p over a flat-ish distribution: the partial sort
  // has to grow many times. Every draw must lie in the reference nucleus.
  const int n = 150000;
  std::vector<float> logits = RandomLogits(n, 11, 0.5f);
  const float top_p = 0.3f, temperature = 0.7f;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> q(n);
  double z = 0;
  for (int i = 0; i < n; ++i) z += q[i] = std::exp((logits[i] - logits[order[0]]) / temperature);
  std::set<int32_t> nucleus;
  double cum = 0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cum += q[id];
    if (cum >= top_p * z) break;
  }
  ASSERT_GT(nucleus.size(), 1000u);
  SamplingParams p = Plain(temperature, 9);
  p.top_p = top_p;
  Sampler s(p, n);
  std::map<int32_t, int> h = Histogram(s, logits, 300);
  int outside = 0;
  for (const auto& [id, count] : h) outside += nucleus.count(id) == 0;
  // Ties of summation order could move the boundary token only.
  EXPECT_LE(outside, 1);
}

TEST(SamplerTest, DefaultParamsLargeVocabulary) {
  const int n = 150000;
  std::vector<float> logits = RandomLogits(n, 5);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::set<int32_t> top40(order.begin(), order.begin() + 40);
  SamplingParams p;
  p.seed = 3;
  p.temperature = 3.0f;
  Sampler s(p, n);
  for (const auto& [id, count] : Histogram(s, logits, 500)) EXPECT_EQ(top40.count(id), 1u) << id;
}

TEST(SamplingParamsTest, Validation) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  EXPECT_TRUE(ValidateSamplingParams(Greedy()).ok());
  auto error = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    Status s = ValidateSamplingParams(p);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  EXPECT_EQ(error([](SamplingParams& p) { p.top_p = 1.5f; }),
            "sampling: top_p 1.5 out of range [0, 1]");
  EXPECT_EQ(error([](SamplingParams& p) { p.top_p = -0.5f; }),
            "sampling: top_p -0.5 out of range [0, 1]");
  EXPECT_EQ(error([](SamplingParams& p) { p.min_p = 2.0f; }),
            "sampling: min_p 2 out of range [0, 1]");
  EXPECT_EQ(error([](SamplingParams& p) { p.temperature = -1.0f; }),
            "sampling: temperature -1 out of range [0, inf) (0 = greedy)");
  EXPECT_EQ(error([](SamplingParams& p) { p.top_k = -1; }),
            "sampling: top_k -1 must be >= 0 (0 = off)");
  EXPECT_EQ(error([](SamplingParams& p) { p.repeat_penalty = 0.0f; }),
            "sampling: repeat_penalty 0 must be > 0 (1 = off)");
  EXPECT_EQ(error([](SamplingParams& p) { p.repeat_last_n = -2; }),
            "sampling: repeat_last_n -2 must be >= -1 (0 = off, -1 = whole history)");
  EXPECT_NE(error([](SamplingParams& p) { p.temperature = kNaN; }).find("temperature nan"),
            std::string::npos);
  EXPECT_NE(error([](SamplingParams& p) { p.temperature = kInf; }).find("temperature inf"),
            std::string::npos);
  EXPECT_NE(error([](SamplingParams& p) { p.top_p = kNaN; }).find("top_p nan"), std::string::npos);
  EXPECT_NE(error([](SamplingParams& p) { p.repeat_penalty = -1.0f; }).find("repeat_penalty"),
            std::string::npos);
  EXPECT_EQ(error([](SamplingParams& p) { p.presence_penalty = kInf; }),
            "sampling: presence_penalty inf must be a finite number (0 = off)");
  EXPECT_EQ(error([](SamplingParams& p) { p.frequency_penalty = kNaN; }),
            "sampling: frequency_penalty nan must be a finite number (0 = off)");
}

TEST(SamplerDeathTest, InvalidParamsAbort) {
  SamplingParams p;
  p.top_p = 2.0f;
  EXPECT_DEATH(Sampler(p, 10), "top_p 2 out of range");
}

TEST(SamplerTest, LogitBiasBansAndForces) {
  constexpr int32_t kVocab = 300;
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = dist(gen);
  const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                            logits.begin());
  const int32_t worst = static_cast<int32_t>(std::min_element(logits.begin(), logits.end()) -
                                             logits.begin());
  for (int top_k : {0, 40}) {
    for (float temperature : {0.0f, 1.0f, 5.0f}) {
      SamplingParams p;
      p.temperature = temperature;
      p.top_k = top_k;
      p.top_p = 1.0f;
      p.min_p = 0.0f;
      p.seed = 3;
      p.logit_bias = {{best, -100.0f}};
      Sampler banned(p, kVocab);
      for (int i = 0; i < 500; ++i) ASSERT_NE(banned.Sample(logits), best);
      p.logit_bias = {{worst, 100.0f}, {best, -3.0f}};
      Sampler forced(p, kVocab);
      for (int i = 0; i < 200; ++i) ASSERT_EQ(forced.Sample(logits), worst);
    }
  }
  // A moderate bias moves the argmax: +10 on the runner-up over the best.
  std::vector<float> two(kVocab, 0.0f);
  two[5] = 2.0f;
  two[9] = 1.0f;
  SamplingParams g;
  g.temperature = 0;
  g.logit_bias = {{9, 1.5f}};
  EXPECT_EQ(Sampler(g, kVocab).Sample(two), 9);
  g.logit_bias = {{9, 0.5f}};
  EXPECT_EQ(Sampler(g, kVocab).Sample(two), 5);
  // Without a bias nothing changes (the same draws as before).
  SamplingParams plain;
  plain.seed = 11;
  SamplingParams zero = plain;
  zero.logit_bias = {{1, 0.0f}};
  Sampler a(plain, kVocab), b(zero, kVocab);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Sample(logits), b.Sample(logits));
}

TEST(SamplerTest, LogitBiasIsValidated) {
  SamplingParams p;
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.logit_bias = {{1, 100.5f}};
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.logit_bias = {{1, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p.logit_bias = {{1, -100.0f}, {2, 100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

}  // namespace
}  // namespace rotor
