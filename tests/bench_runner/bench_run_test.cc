#include "bench_runner/bench_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace rotor::bench {
namespace {
namespace bench_run_test {

std::string Model() { return std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf"; }

TEST(BenchRunTest, StatsAreLlamaBenchs) {
  BenchResult r;
  r.samples_ns = {1'000'000'000, 2'000'000'000};
  const BenchStats s = ComputeStats(r, 100);
  EXPECT_DOUBLE_EQ(s.avg_ns, 1.5e9);
  EXPECT_NEAR(s.stddev_ns, std::sqrt(2 * 0.5e9 * 0.5e9), 1);  // sample stddev (n - 1)
  ASSERT_EQ(s.samples_ts.size(), 2u);
  EXPECT_DOUBLE_EQ(s.samples_ts[0], 100);
  EXPECT_DOUBLE_EQ(s.samples_ts[1], 50);
  EXPECT_DOUBLE_EQ(s.avg_ts, 75);  // t/s per sample, then averaged
  EXPECT_NEAR(s.stddev_ts, std::sqrt(2 * 25.0 * 25.0), 1e-9);
}

// tg: every step reads the weights once and does 2 FLOPs per matmul parameter;
// a deeper cache adds attention work and K/V bytes.
TEST(BenchRunTest, WorkGrowsWithTokensAndDepth) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  BenchCase c;
  c.test = BenchTest{.n_prompt = 0, .n_gen = 8, .n_depth = 0};
  const BenchWork w8 = EstimateWork(*m, c, 64);
  c.test.n_gen = 16;
  const BenchWork w16 = EstimateWork(*m, c, 64);
  EXPECT_GT(w8.flops, 8 * 2.0 * (m->layer_matmul_params + m->output_matmul_params) - 1);
  EXPECT_GT(w16.flops, w8.flops);
  EXPECT_GT(w16.bytes, w8.bytes);
  c.test.n_depth = 32;
  const BenchWork deep = EstimateWork(*m, c, 64);
  EXPECT_GT(deep.flops, w16.flops);
  EXPECT_GT(deep.bytes, w16.bytes);
}

TEST(BenchRunTest, RunsACaseAndReportsEveryRepetition) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  BenchCase c;
  c.threads = 1;
  c.n_ctx = 64;
  c.prefill_step = 8;
  c.test = BenchTest{.n_prompt = 0, .n_gen = 4, .n_depth = 16};
  int fills = 0, runs = 0;
  c.kv.policy = "sink";
  c.kv.size = 32;
  Result<BenchResult> r = RunBenchCase(*m, c, 3, 1234, [&](const char* phase, int) {
    fills += std::string(phase) == "fill";
    runs += std::string(phase) == "run";
  });
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->samples_ns.size(), 3u);
  for (int64_t ns : r->samples_ns) EXPECT_GT(ns, 0);
  EXPECT_EQ(r->kv.policy, "sink");
  EXPECT_EQ(r->kv.size, 32);
  EXPECT_GT(r->kv_bytes_per_token, 0);
  EXPECT_EQ(runs, 3);
  EXPECT_GE(fills, 3);
}

// Two cases alive at once on one pool, taking turns (as `rotor bench
// --interleave` runs them: fills, then steps): each keeps its own caches, so
// each fills and holds what it holds when run alone.
TEST(BenchRunTest, CasesTakeTurnsOnOnePool) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  BenchCase a;
  a.threads = 2;
  a.n_ctx = 64;
  a.prefill_step = 8;
  a.test = BenchTest{.n_prompt = 0, .n_gen = 4, .n_depth = 40};
  BenchCase b = a;
  b.kv.types = KvTypes{.k = KvType::kQ8_0, .v = KvType::kQ4_0};
  b.test.n_depth = 20;
  ThreadPool pool(2);
  std::vector<std::string> phases;
  auto log = [&](char who) {
    return [&phases, who](const char* phase, int rep) {
      phases.push_back(std::string(1, who) + ":" + phase + std::to_string(rep));
    };
  };
  Result<std::unique_ptr<BenchCaseRun>> ra =
      BenchCaseRun::Start(*m, a, 1234, pool, /*scoped_rss=*/false, log('a'));
  ASSERT_TRUE(ra.ok()) << ra.message();
  Result<std::unique_ptr<BenchCaseRun>> rb =
      BenchCaseRun::Start(*m, b, 1234, pool, /*scoped_rss=*/false, log('b'));
  ASSERT_TRUE(rb.ok()) << rb.message();
  for (int rep = 1; rep <= 2; ++rep) {
    if (rep == 1) {  // filled one after the other, then their tg steps in turn
      ASSERT_TRUE((*ra)->Fill(rep, log('a')).ok());
      ASSERT_TRUE((*rb)->Fill(rep, log('b')).ok());
      phases.push_back("steps");
      for (int step = 1; step <= 4; ++step) {  // tg4: four timed units each
        Result<bool> da = (*ra)->Step(), db = (*rb)->Step();
        ASSERT_TRUE(da.ok() && db.ok());
        EXPECT_EQ(*da, step == 4);
        EXPECT_EQ(*db, step == 4);
      }
    } else {
      ASSERT_TRUE((*ra)->Repetition(rep, log('a')).ok());
      ASSERT_TRUE((*rb)->Repetition(rep, log('b')).ok());
    }
  }
  EXPECT_THAT(phases, ::testing::ElementsAre("a:warm-up0", "b:warm-up0", "a:fill1", "b:fill1",
                                             "steps", "a:fill2", "a:run2", "b:fill2", "b:run2"));
  const BenchResult x = (*ra)->Finish(), y = (*rb)->Finish();
  EXPECT_EQ(x.samples_ns.size(), 2u);
  EXPECT_EQ(y.samples_ns.size(), 2u);
  EXPECT_FALSE(x.peak_rss_scoped);
  EXPECT_EQ(y.kv.types.k, KvType::kQ8_0);
  // The blocks each holds after its fill are those of the same case run alone.
  Result<BenchResult> alone_a = RunBenchCase(*m, a, 1, 1234, nullptr);
  Result<BenchResult> alone_b = RunBenchCase(*m, b, 1, 1234, nullptr);
  ASSERT_TRUE(alone_a.ok() && alone_b.ok());
  EXPECT_EQ(x.kv_blocks, alone_a->kv_blocks);
  EXPECT_EQ(y.kv_blocks, alone_b->kv_blocks);
  EXPECT_GT(x.kv_blocks, y.kv_blocks);  // 40 tokens of depth against 20
}

TEST(BenchRunTest, UnknownPolicyIsAnError) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  BenchCase c;
  c.n_ctx = 16;
  c.test = BenchTest{.n_prompt = 8, .n_gen = 0, .n_depth = 0};
  c.kv.policy = "no-such-policy";
  Result<BenchResult> r = RunBenchCase(*m, c, 1, 1, nullptr);
  EXPECT_FALSE(r.ok());
}

}  // namespace bench_run_test
}  // namespace
}  // namespace rotor::bench
