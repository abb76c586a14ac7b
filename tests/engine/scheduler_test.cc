// Batched generation: every sequence's output equals its output alone,
// whatever else is in the batch, joins or leaves.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "../kv/kv_test_util.h"

namespace rotor {
namespace {

std::unique_ptr<Engine> MakeEngine(const std::string& path, int n_ctx = 512) {
  EngineOptions o;
  o.model_path = path;
  o.n_threads = 2;
  o.n_ctx = n_ctx;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return std::move(*e);
}

struct Job {
  std::vector<int32_t> prompt;
  GenerateOptions options;
};

// Runs jobs through one scheduler; `add_at[i]` is the step at which job i is
// added, `cancel_at` cancels job k at a step. Returns each job's tokens.
std::vector<std::vector<int32_t>> RunBatch(Engine& e, const std::vector<Job>& jobs,
                                           const std::vector<int>& add_at, int max_seqs,
                                           int cancel_job = -1, int cancel_step = -1,
                                           int prefill_step = 16) {
  Scheduler::Options so;
  so.max_seqs = max_seqs;
  so.prefill_step = prefill_step;
  Scheduler s(e, so);
  std::vector<std::vector<int32_t>> out(jobs.size());
  std::map<SeqId, size_t> owner;
  std::vector<SeqId> ids(jobs.size(), -1);
  for (int step = 0;; ++step) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (add_at[j] != step) continue;
      auto id = s.Add(SeqRequest{"", jobs[j].prompt, jobs[j].options}, [&, j](const SeqEvent& ev) {
        if (!ev.finished) out[j].push_back(ev.token);
      });
      EXPECT_TRUE(id.ok()) << id.message();
      ids[j] = *id;
    }
    if (step == cancel_step) s.Cancel(ids[cancel_job]);
    bool more = false;
    for (int a : add_at) more |= a > step;
    if (s.Idle() && !more) break;
    Status st = s.Step();
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) break;
  }
  return out;
}

std::vector<Job> MixedJobs(int n_vocab) {
  std::vector<Job> jobs;
  const int lengths[] = {1, 5, 37, 300, 90, 120};
  const int n_predict[] = {40, 25, 60, 33, 30, 28};
  const std::string policies[] = {"full", "sink", "h2o", "sink", "snapkv", "tova"};
  const RopeK ropes[] = {RopeK::kCached, RopeK::kDeferred, RopeK::kCached,
                         RopeK::kCached, RopeK::kDeferred, RopeK::kCached};
  for (int i = 0; i < 6; ++i) {
    Job j;
    j.prompt = testing::Prompt(lengths[i], n_vocab, 100 + i);
    j.options.sampling.temperature = 0;
    j.options.n_predict = n_predict[i];
    j.options.ignore_eos = true;
    j.options.kv = testing::Kv(policies[i], policies[i] == "full" ? 0 : 64, 4, ropes[i]);
    jobs.push_back(j);
  }
  return jobs;
}

class Batching : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Path() { return GetParam() == "gqa" ? testing::GqaModelPath() : testing::kStories; }
};

TEST_P(Batching, GreedyBatchEqualsEachAlone) {
  auto e = MakeEngine(Path());
  std::vector<Job> jobs = MixedJobs(e->model().config().n_vocab);
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) alone.push_back(RunBatch(*e, {j}, {0}, 1)[0]);
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(static_cast<int>(alone[i].size()), jobs[i].options.n_predict);
  EXPECT_EQ(RunBatch(*e, jobs, {0, 0, 0, 0, 0, 0}, 6), alone);
  // Joining mid-run, and fewer slots than sequences (some wait in the queue).
  EXPECT_EQ(RunBatch(*e, jobs, {0, 3, 10, 11, 4, 7}, 6), alone);
  EXPECT_EQ(RunBatch(*e, jobs, {0, 0, 0, 0, 0, 0}, 2), alone);
}

// The same with every K/V type: each job's cache of another type (and two
// rotated), all in one batch.
TEST_P(Batching, GreedyBatchEqualsEachAloneWithEveryKvType) {
  auto e = MakeEngine(Path());
  std::vector<Job> jobs = MixedJobs(e->model().config().n_vocab);
  const KvTypes types[] = {{KvType::kBF16, KvType::kBF16}, {KvType::kQ8_0, KvType::kQ8_0},
                           {KvType::kQ4_0, KvType::kQ4_0}, {KvType::kQ5_0, KvType::kQ5_0},
                           {KvType::kQ8_0, KvType::kQ4_0}, {KvType::kF32, KvType::kQ8_0}};
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].options.kv.types = types[i];
    jobs[i].options.kv.rotate = i == 2 || i == 3;
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) alone.push_back(RunBatch(*e, {j}, {0}, 1)[0]);
  EXPECT_EQ(RunBatch(*e, jobs, {0, 0, 0, 0, 0, 0}, 6), alone);
  EXPECT_EQ(RunBatch(*e, jobs, {0, 3, 10, 11, 4, 7}, 6), alone);
}

TEST_P(Batching, CancellingOneLeavesOthersUnchanged) {
  auto e = MakeEngine(Path());
  std::vector<Job> jobs = MixedJobs(e->model().config().n_vocab);
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) alone.push_back(RunBatch(*e, {j}, {0}, 1)[0]);
  std::vector<std::vector<int32_t>> got = RunBatch(*e, jobs, {0, 0, 0, 0, 0, 0}, 6, 2, 8);
  for (size_t i : {0u, 1u, 3u, 4u, 5u}) EXPECT_EQ(got[i], alone[i]) << i;
  EXPECT_LT(got[2].size(), alone[2].size());
  EXPECT_EQ(got[2], std::vector<int32_t>(alone[2].begin(), alone[2].begin() + got[2].size()));
}

TEST_P(Batching, SeededSamplingIndependentOfBatch) {
  auto e = MakeEngine(Path());
  std::vector<Job> jobs = MixedJobs(e->model().config().n_vocab);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].options.sampling.temperature = 0.9f;
    jobs[i].options.sampling.seed = 42 + i;
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) alone.push_back(RunBatch(*e, {j}, {0}, 1)[0]);
  EXPECT_EQ(RunBatch(*e, jobs, {0, 2, 0, 5, 1, 3}, 3), alone);
}

INSTANTIATE_TEST_SUITE_P(Models, Batching, ::testing::Values("stories260K", "gqa"));

TEST(Scheduler, KvBudgetMakesSequencesWaitNotFail) {
  // Three sink caches of 64 cells (4 blocks each, set aside when they join)
  // under a budget of 8 blocks: two run, the third waits, all finish.
  KvConfig kv = testing::Kv("sink", 64);
  EngineOptions eo{.model_path = testing::kStories, .n_threads = 2, .n_ctx = 512};
  {
    auto probe = MakeEngine(testing::kStories);
    eo.kv_memory_bytes = 8 * static_cast<int64_t>(probe->kv_pool().BlockBytes(kv.types));
  }
  auto e = std::move(Engine::Create(eo)).value();
  Scheduler::Options so;
  so.max_seqs = 4;
  Scheduler s(*e, so);
  int finished = 0;
  for (int i = 0; i < 3; ++i) {
    GenerateOptions o;
    o.kv = kv;
    o.n_predict = 5;
    o.sampling.temperature = 0;
    ASSERT_TRUE(s.Add(SeqRequest{"Once upon a time", {}, o}, [&](const SeqEvent& ev) {
                   finished += ev.finished;
                 }).ok());
  }
  ASSERT_TRUE(s.Step().ok());
  EXPECT_EQ(s.n_running(), 2u);
  EXPECT_EQ(s.n_waiting(), 1u);
  EXPECT_LE(e->kv_pool().stats().bytes + e->kv_pool().stats().reserved_bytes,
            eo.kv_memory_bytes);
  while (!s.Idle()) ASSERT_TRUE(s.Step().ok());
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(e->kv_pool().stats().blocks_used, 0);
  EXPECT_EQ(e->kv_pool().stats().reserved_bytes, 0);
}

TEST(Scheduler, AllocationFailureEndsOnlyTheSequenceThatNeededIt) {
  // The pool's memory fails (as an mmap refused under an address-space limit
  // does) once 5 blocks exist: the long prompt needs its 5th block at the 5th
  // step and ends with an out-of-memory error; the short one, in the same
  // steps, gives the tokens it gives alone.
  auto e = MakeEngine(testing::kStories);
  const int n_vocab = e->model().config().n_vocab;
  std::vector<Job> jobs(2);
  for (int i = 0; i < 2; ++i) {
    jobs[i].prompt = testing::Prompt(i == 0 ? 10 : 300, n_vocab, 7 + i);
    jobs[i].options.sampling.temperature = 0;
    jobs[i].options.n_predict = 20;
    jobs[i].options.ignore_eos = true;
    jobs[i].options.cache_prompt = false;  // freed blocks go back to the free list
  }
  const std::vector<std::vector<int32_t>> alone = RunBatch(*e, {jobs[0]}, {0}, 1);
  ASSERT_EQ(alone[0].size(), 20u);

  auto f = MakeEngine(testing::kStories);
  f->kv_pool().set_memory_fault_after(5);
  Scheduler::Options so;
  so.max_seqs = 2;
  so.prefill_step = 16;
  Scheduler s(*f, so);
  std::vector<std::vector<int32_t>> out(2);
  std::vector<GenerateResult> results(2);
  for (int j = 0; j < 2; ++j)
    ASSERT_TRUE(s.Add(SeqRequest{"", jobs[j].prompt, jobs[j].options}, [&, j](const SeqEvent& ev) {
                   if (!ev.finished && ev.token >= 0) out[j].push_back(ev.token);
                   if (ev.finished) results[j] = *ev.result;
                 }).ok());
  while (!s.Idle()) ASSERT_TRUE(s.Step().ok());
  EXPECT_EQ(results[1].finish, FinishReason::kError);
  EXPECT_TRUE(results[1].out_of_memory);
  EXPECT_NE(results[1].error.find("out of memory taking K/V blocks"), std::string::npos)
      << results[1].error;
  EXPECT_TRUE(out[1].empty());
  EXPECT_EQ(results[0].finish, FinishReason::kLength) << results[0].error;
  EXPECT_EQ(out[0], alone[0]);
  EXPECT_EQ(f->kv_pool().stats().blocks_used, 0);
  EXPECT_LE(f->kv_pool().stats().blocks, 5);

  // A sequence admitted after the failure runs: the server goes on.
  f->kv_pool().set_memory_fault_after(-1);
  const std::vector<std::vector<int32_t>> again = RunBatch(*f, {jobs[0]}, {0}, 1);
  EXPECT_EQ(again[0], alone[0]);
}

}  // namespace
}  // namespace rotor

namespace rotor {
namespace {

// Runs a prompt through the runner in chunks of 8; the logits of its last token.
std::vector<float> PrefillLast(Runner& runner, KvCache* cache, const std::vector<int32_t>& p) {
  Feed feed = Feed::Prompt(cache, p);
  Status s = runner.Run(feed);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  return std::vector<float>(feed.rows, feed.rows + runner.model().config().n_vocab);
}

// `steps` decode steps of one token for each of `caches` in one pass; each
// sequence's logits equal, bit for bit, one step of its copy in `alone`.
void ExpectDecodeStepsEqualAlone(Forward& fwd, const std::vector<KvCache*>& caches,
                                 const std::vector<std::unique_ptr<KvCache>>& alone, int n_vocab,
                                 int steps) {
  const int n = static_cast<int>(caches.size());
  std::vector<float> logits(n * n_vocab), one(n_vocab);
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(7 + 43 * i + step);  // 7, 50, 93, ...
    ASSERT_TRUE(fwd.Decode(caches, tokens, logits.data()).ok());
    for (int i = 0; i < n; ++i) {
      SeqInput in{alone[i].get(), std::span<const int32_t>(&tokens[i], 1)};
      ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), one.data()).ok());
      for (int v = 0; v < n_vocab; ++v)
        ASSERT_EQ(logits[i * n_vocab + v], one[v]) << "seq " << i << " step " << step;
    }
  }
}

// The explicit decode step: one token for each of three sequences in one pass
// gives each sequence the logits it gets alone, bit for bit, on the f32 test
// model (its products add in one order for every m: ops/kernels.h), with
// f32 and block-type caches side by side.
TEST(ForwardDecode, BatchOfSequencesEqualsEachAlone) {
  const Model& m = testing::LoadModelCached(testing::GqaModelPath());
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  Forward fwd(m, pool, 64, 256);
  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .n_ctx = 256});
  std::vector<std::unique_ptr<KvCache>> batch, alone;
  KvConfig sink = testing::Kv("sink", 16), h2o = testing::Kv("h2o", 16);
  sink.types = KvTypes{KvType::kQ4_0, KvType::kQ8_0};
  h2o.types = KvTypes{KvType::kQ5_0, KvType::kF16};
  const KvConfig kvs[] = {KvConfig{.types = {KvType::kF32, KvType::kF32}}, sink, h2o};
  for (const KvConfig& kv : kvs) {
    batch.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
    alone.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
  }
  std::vector<float> logits(3 * n_vocab);
  for (int i = 0; i < 3; ++i) {  // prompts of different lengths
    std::vector<int32_t> p = testing::Prompt(5 + 11 * i, n_vocab, i);
    ASSERT_FALSE(PrefillLast(runner, batch[i].get(), p).empty());
    ASSERT_FALSE(PrefillLast(runner, alone[i].get(), p).empty());
  }
  std::vector<KvCache*> caches = {batch[0].get(), batch[1].get(), batch[2].get()};
  ExpectDecodeStepsEqualAlone(fwd, caches, alone, n_vocab, 20);
  EXPECT_FALSE(fwd.Decode(caches, std::vector<int32_t>{1, 2}, logits.data()).ok());
}

// A decode step of three sequences, and one sequence's decode token beside
// another's prompt chunk, give each sequence the logits it gets alone.
void ExpectKQuantStepsEqualAlone(const Model& m) {
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  Forward fwd(m, pool, 64, 256);
  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .n_ctx = 256});
  const KvConfig kv{.types = {KvType::kF16, KvType::kF16}};
  std::vector<std::unique_ptr<KvCache>> batch, alone;
  for (int i = 0; i < 4; ++i) {
    batch.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
    alone.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
  }
  for (int i = 0; i < 3; ++i) {  // prompts of 5, 16 and 27 tokens
    std::vector<int32_t> p = testing::Prompt(5 + 11 * i, n_vocab, i);
    ASSERT_FALSE(PrefillLast(runner, batch[i].get(), p).empty());
    ASSERT_FALSE(PrefillLast(runner, alone[i].get(), p).empty());
  }
  std::vector<KvCache*> caches = {batch[0].get(), batch[1].get(), batch[2].get()};
  ExpectDecodeStepsEqualAlone(fwd, caches, alone, n_vocab, 12);
  std::vector<float> one(n_vocab);
  // A decode token beside a 20-token prompt chunk (a sequence joining).
  const std::vector<int32_t> prompt = testing::Prompt(20, n_vocab, 9);
  const int32_t token = 33;
  const SeqInput mixed[] = {
      SeqInput{batch[0].get(), std::span<const int32_t>(&token, 1)},
      SeqInput{batch[3].get(), prompt, LogitsWanted::kLast, /*prompt=*/true}};
  std::vector<float> two(2 * n_vocab);
  ASSERT_TRUE(fwd.Run(mixed, two.data()).ok());
  SeqInput in{alone[0].get(), std::span<const int32_t>(&token, 1)};
  ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), one.data()).ok());
  const std::vector<float> joined = PrefillLast(runner, alone[3].get(), prompt);
  for (int v = 0; v < n_vocab; ++v) {
    ASSERT_EQ(two[v], one[v]) << "the decode token beside a prompt";
    ASSERT_EQ(two[n_vocab + v], joined[v]) << "the prompt beside a decode token";
  }
}

// K-quant rows run from their row-interleaved copies (one integer kernel for
// every token count) or, in a model loaded without them, as stored: there
// sampled tokens take the integer kernel and prompt text the f32 panels,
// whatever shares the pass (MatmulScratch::SetSampledRows). Either way each
// sequence's logits in a batch equal its logits alone, bit for bit (Q3_K_M:
// q3_K beside q4_K / q5_K / q6_K).
TEST(ForwardDecode, KQuantsBatchEqualsAlone) {
  for (const bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "packed" : "as stored");
    auto m = Model::Load(testing::ModelPath("gqa256-Q3_K_M"), packed);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_EQ((*m)->layer(0).wq.type, DType::kQ3_K);
    ASSERT_EQ((*m)->layer(0).wq.packed != nullptr, packed && ops::PackingHelps(DType::kQ3_K));
    ExpectKQuantStepsEqualAlone(**m);
  }
}

// With q8_0 / q4_0 and K-quant weights on AVX2 and AVX-512 (row-interleaved,
// one kernel for every m) and the batch's attention in one parallel region,
// a sequence's logits in a decode step of several sequences are bit for bit
// what it gets alone, f16 and f32 caches of every kind side by side.
class PackedDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedDecode, BatchEqualsAloneBitForBit) {
  Result<std::unique_ptr<Model>> loaded = Model::Load(testing::ModelPath(GetParam()));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const Model& m = **loaded;
  // AVX-512 and AVX2 pack every type here (the scalar ISA none).
  if (!ops::PackingHelps(m.layer(0).wq.type))
    GTEST_SKIP() << "no packed kernel for " << DTypeName(m.layer(0).wq.type) << " on this ISA";
  if (ops::PackingHelps(m.output().type)) {
    ASSERT_NE(m.output().packed, nullptr);
  }
  ASSERT_NE(m.layer(0).wq.packed, nullptr);
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  Forward fwd(m, pool, 64, 256);
  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .n_ctx = 256});
  std::vector<std::unique_ptr<KvCache>> batch, alone;
  KvConfig sink16 = testing::Kv("sink", 16), h2o16 = testing::Kv("h2o", 32);
  sink16.types = h2o16.types = KvTypes{KvType::kF16, KvType::kF16};  // f16 caches beside f32 ones in one step
  KvConfig tova16 = testing::Kv("tova", 16), snap24 = testing::Kv("snapkv", 24, 0, RopeK::kDeferred,
                                                                  KvPositions::kOriginal, -1, 8);
  tova16.types = snap24.types = KvTypes{KvType::kF16, KvType::kF16};
  // The block types and bf16 too, one of each beside the others.
  KvConfig full8 = KvConfig{.types = {KvType::kF32, KvType::kF32}}, sink4 = testing::Kv("sink", 16), win5 = testing::Kv("window", 24, 0, RopeK::kDeferred);
  KvConfig h2o_bf = testing::Kv("h2o", 32), tova_mixed = testing::Kv("tova", 16);
  full8.types = {KvType::kQ8_0, KvType::kQ8_0};
  sink4.types = {KvType::kQ4_0, KvType::kQ4_0};
  sink4.rotate = true;
  win5.types = {KvType::kQ5_0, KvType::kQ5_0};
  h2o_bf.types = {KvType::kBF16, KvType::kBF16};
  tova_mixed.types = {KvType::kQ8_0, KvType::kQ4_0};
  const KvConfig kvs[] = {KvConfig{.types = {KvType::kF32, KvType::kF32}}, testing::Kv("sink", 16),
                          testing::Kv("window", 24, 0, RopeK::kDeferred), sink16, h2o16,
                          tova16, snap24, full8, sink4, win5, h2o_bf, tova_mixed};
  constexpr int kSeqs = sizeof(kvs) / sizeof(kvs[0]);
  for (const KvConfig& kv : kvs) {
    batch.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
    alone.push_back(std::move(KvCache::Create(m.config().kv_shape(256), kv)).value());
  }
  std::vector<float> logits(kSeqs * n_vocab), one(n_vocab);
  for (int i = 0; i < kSeqs; ++i) {
    std::vector<int32_t> p = testing::Prompt(5 + 11 * i, n_vocab, i);
    ASSERT_EQ(PrefillLast(runner, batch[i].get(), p), PrefillLast(runner, alone[i].get(), p))
        << "prompt " << i;
  }
  std::vector<KvCache*> caches;
  for (auto& c : batch) caches.push_back(c.get());
  for (int step = 0; step < 30; ++step) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < kSeqs; ++i) tokens.push_back((7 + 43 * i + step) % n_vocab);
    ASSERT_TRUE(fwd.Decode(caches, tokens, logits.data()).ok());
    for (int i = 0; i < kSeqs; ++i) {
      SeqInput in{alone[i].get(), std::span<const int32_t>(&tokens[i], 1)};
      ASSERT_TRUE(fwd.Run(std::span<const SeqInput>(&in, 1), one.data()).ok());
      ASSERT_TRUE(std::equal(one.begin(), one.end(), logits.begin() + i * n_vocab))
          << "seq " << i << " step " << step;
    }
  }
}

// Model::PackMatrices splits each matrix's rows among a few threads: the
// packed bytes equal one PackWeight pass over the whole matrix.
TEST(PackedLoad, ThreadedPackingEqualsOnePass) {
  for (const char* name : {"gqa-q8_0", "gqa-q4_0"}) {
    Result<std::unique_ptr<Model>> packed = Model::Load(testing::ModelPath(name));
    Result<std::unique_ptr<Model>> rows = Model::Load(testing::ModelPath(name), false);
    ASSERT_TRUE(packed.ok()) << packed.message();
    ASSERT_TRUE(rows.ok()) << rows.message();
    if (!ops::PackingHelps((*rows)->layer(0).wq.type)) GTEST_SKIP() << "no packing on this ISA";
    auto check = [&](const ops::Weight& got, const ops::Weight& w, const std::string& what) {
      ASSERT_NE(got.packed, nullptr) << name << " " << what;
      AlignedBuffer<uint8_t> want(static_cast<size_t>(ops::PackedWeightBytes(w)));
      ops::PackWeight(w, want.data(), 0, w.n);
      ASSERT_EQ(std::memcmp(want.data(), got.packed, want.size()), 0) << name << " " << what;
    };
    check((*packed)->output(), (*rows)->output(), "output");
    for (int il = 0; il < (*rows)->config().n_layer; ++il) {
      const LayerWeights &p = (*packed)->layer(il), &r = (*rows)->layer(il);
      check(p.wq, r.wq, "wq");
      check(p.wk, r.wk, "wk");
      check(p.wv, r.wv, "wv");
      check(p.wo, r.wo, "wo");
      check(p.w_gate, r.w_gate, "w_gate");
      check(p.w_up, r.w_up, "w_up");
      check(p.w_down, r.w_down, "w_down");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedDecode,
                         ::testing::Values("gqa-q8_0", "gqa-q4_0", "gqa256-Q4_K_M", "gqa256-q5_K",
                                           "gqa256-Q3_K_M", "gqa256-Q2_K"));

}  // namespace
}  // namespace rotor
