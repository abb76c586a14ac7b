// The prompt runner: chunking with any step gives the same logits, chunks are
// cut from the prompt's start and its end whatever else shares the ubatch,
// a batch of feeds equals each alone, and a cache that refuses a feed says so
// before anything of it runs.
#include "engine/runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "../kv/kv_test_util.h"

namespace rotor {
namespace {

using ::testing::HasSubstr;

constexpr int kCtx = 256;

std::unique_ptr<KvCache> MakeCache(const Model& m, const KvConfig& kv, int n_ctx = kCtx) {
  auto c = KvCache::Create(m.config().kv_shape(n_ctx), kv);
  EXPECT_TRUE(c.ok()) << c.message();
  return c.ok() ? std::move(*c) : nullptr;
}

// Every row a feed's steps hand out, in order: [n_tokens - logits_from, n_vocab].
struct Ran {
  std::vector<float> rows;
  std::vector<std::pair<int64_t, int64_t>> steps;  // (rows_first, n_rows) of each step
};

Ran RunAll(Runner& runner, Feed& feed) {
  Ran r;
  const int n_vocab = runner.model().config().n_vocab;
  Status s = runner.Run(feed, [&](int64_t first, int64_t n, const float* rows) {
    r.steps.emplace_back(first, n);
    r.rows.insert(r.rows.end(), rows, rows + n * n_vocab);
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

class RunnerModels : public ::testing::TestWithParam<std::string> {
 protected:
  const Model& M() { return testing::LoadModelCached(testing::ModelPath(GetParam())); }
};

// Steps 1, 7, 64 and the whole text give the same logits, for a prompt alone
// and for a prompt followed by teacher-forced tokens (cut at the prompt's end).
TEST_P(RunnerModels, ChunkingWithAnyStepGivesTheSameLogits) {
  const Model& m = M();
  ThreadPool pool(2);
  const std::vector<int32_t> text = testing::Prompt(150, m.config().n_vocab, 11);
  for (const KvConfig& kv : {KvConfig{.types = {KvType::kF32, KvType::kF32}}, testing::Kv("sink", 48), testing::Kv("h2o", 48)}) {
    for (int64_t n_prompt : {int64_t{150}, int64_t{61}}) {
      SCOPED_TRACE(kv.policy + " prompt " + std::to_string(n_prompt));
      std::vector<float> whole;
      for (int step : {0, 1, 7, 64}) {
        Runner runner(m, pool, RunnerOptions{.prefill_step = step, .n_ctx = kCtx});
        auto cache = MakeCache(m, kv);
        Feed feed{.cache = cache.get(), .tokens = text, .n_prompt = n_prompt, .logits_from = 0};
        const Ran r = RunAll(runner, feed);
        ASSERT_EQ(r.rows.size(), text.size() * m.config().n_vocab);
        EXPECT_EQ(cache->n_seen(), 150);
        if (step == 0) {
          whole = r.rows;
          continue;
        }
        EXPECT_LT(testing::MaxAbsDiff(r.rows, whole), 1e-4) << "step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RunnerModels, ::testing::Values("stories260K", "gqa"));

const Model& Stories() { return testing::LoadModelCached(testing::kStories); }

// A prompt's tokens are computed the same however the prompt is cut: chunks
// of one token (a prefill step of 1, a prefix-cache hit that leaves the last
// token) take the prompt's path, not a decode step's one-token folds, whose
// rounding differs for block-type keys (a repeated request's text changed
// with q4_0 K/V). With packed q8_0 weights, with f32 weights (every token
// count's matmul adds in one order) and with packed K-quants (Q3_K_M) the
// logits are equal bit for bit, for every K/V type and both RoPE modes.
TEST(Runner, APromptsLogitsDoNotDependOnItsCut) {
  for (const char* model : {"gqa-q8_0", "gqa", "gqa256-Q3_K_M"}) {
    const Model& m = testing::LoadModelCached(testing::ModelPath(model));
    ThreadPool pool(2);
    const std::vector<int32_t> text = testing::Prompt(37, m.config().n_vocab, 5);
    const std::span<const int32_t> all(text);
    for (const KvType t : {KvType::kF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ5_0}) {
      for (const RopeK rope : {RopeK::kCached, RopeK::kDeferred}) {
        const KvConfig kv{.rope_k = rope, .types = {t, t}};
        SCOPED_TRACE(std::string(model) + " " + std::string(KvTypeName(t)) +
                     (rope == RopeK::kDeferred ? " deferred" : ""));
        std::vector<float> whole;
        for (const int step : {0, 1, 36}) {
          Runner runner(m, pool, RunnerOptions{.prefill_step = step, .n_ctx = kCtx});
          auto cache = MakeCache(m, kv);
          Feed feed = Feed::Prompt(cache.get(), text);
          const Ran r = RunAll(runner, feed);
          if (step == 0)
            whole = r.rows;
          else
            EXPECT_EQ(r.rows, whole) << "prefill step " << step;
        }
        // As a prefix-cache hit: the first 36 tokens, then the last as a prompt.
        Runner runner(m, pool, RunnerOptions{.n_ctx = kCtx});
        auto cache = MakeCache(m, kv);
        Feed head = Feed::Prompt(cache.get(), all.first(36));
        RunAll(runner, head);
        Feed tail = Feed::Prompt(cache.get(), all.subspan(36));
        EXPECT_EQ(RunAll(runner, tail).rows, whole) << "the last token alone";
      }
    }
  }
}

// The prompt in chunks of step from its start, then the rest from its end;
// rows from logits_from on only.
TEST(Runner, CutsChunksFromThePromptsStartAndEnd) {
  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = 4, .n_ctx = 64});
  auto cache = MakeCache(Stories(), KvConfig{.types = {KvType::kF32, KvType::kF32}}, 64);
  const std::vector<int32_t> text = testing::Prompt(25, Stories().config().n_vocab);
  Feed feed{.cache = cache.get(), .tokens = text, .n_prompt = 10, .logits_from = 6};
  const Ran r = RunAll(runner, feed);
  // Chunks [0,4) [4,8) [8,10) | [10,14) ... [22,25); rows from 6 on.
  const std::vector<std::pair<int64_t, int64_t>> want = {{6, 2},  {8, 2},  {10, 4},
                                                         {14, 4}, {18, 4}, {22, 3}};
  EXPECT_EQ(r.steps, want);
  EXPECT_EQ(feed.n_run, 25);
  EXPECT_TRUE(feed.done());

  // Feed::Prompt: one row, the last token's.
  cache->Clear();
  Feed prompt = Feed::Prompt(cache.get(), text);
  const Ran last = RunAll(runner, prompt);
  EXPECT_EQ(last.steps, (std::vector<std::pair<int64_t, int64_t>>{{24, 1}}));
}

// Feeds sharing ubatches (a decoding token beside prompt chunks) get the rows
// each gets alone, and each is cut as it is alone.
TEST(Runner, BatchedFeedsEqualEachAlone) {
  const Model& m = testing::LoadModelCached(testing::GqaModelPath());
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  const KvConfig kvs[] = {KvConfig{.types = {KvType::kF32, KvType::kF32}}, testing::Kv("sink", 16), testing::Kv("h2o", 16)};
  const int lengths[] = {1, 23, 40};
  std::vector<std::vector<int32_t>> texts;
  for (int i = 0; i < 3; ++i) texts.push_back(testing::Prompt(lengths[i], n_vocab, 20 + i));

  std::vector<std::vector<float>> alone;
  for (int i = 0; i < 3; ++i) {
    Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .n_ctx = kCtx});
    auto cache = MakeCache(m, kvs[i]);
    Feed feed = Feed::Prompt(cache.get(), texts[i]);
    ASSERT_TRUE(runner.Run(feed).ok());
    alone.emplace_back(feed.rows, feed.rows + n_vocab);
  }

  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .max_seqs = 3, .n_ctx = kCtx});
  EXPECT_EQ(runner.max_tokens(), 8 + 2);
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<Feed> feeds;
  for (int i = 0; i < 3; ++i) {
    caches.push_back(MakeCache(m, kvs[i]));
    feeds.push_back(Feed::Prompt(caches[i].get(), texts[i]));
  }
  std::vector<Feed*> ptrs = {&feeds[0], &feeds[1], &feeds[2]};
  std::vector<std::vector<float>> batched(3);
  int steps = 0;
  while (!(feeds[0].done() && feeds[1].done() && feeds[2].done())) {
    ASSERT_TRUE(runner.Step(ptrs).ok());
    ++steps;
    for (int i = 0; i < 3; ++i) {
      // Chunks start at multiples of 8, as alone.
      if (feeds[i].n_rows > 0) batched[i].assign(feeds[i].rows, feeds[i].rows + n_vocab);
      EXPECT_TRUE(feeds[i].n_run % 8 == 0 || feeds[i].done()) << i;
    }
  }
  // 8 + 2 tokens per ubatch: feed 1 and feed 2 cannot share one.
  EXPECT_EQ(steps, 3 + 5);
  for (int i = 0; i < 3; ++i) EXPECT_LT(testing::MaxAbsDiff(batched[i], alone[i]), 1e-4) << i;
}

// A cache that cannot take a feed refuses it before anything runs: the feed's
// status says why, the cache is as it was, and other feeds of the step run.
TEST(Runner, RefusedFeedsFailAloneAndRunNothing) {
  const Model& m = Stories();
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .max_seqs = 2, .n_ctx = 32});
  const std::vector<int32_t> long_text = testing::Prompt(40, n_vocab);
  const std::vector<int32_t> short_text = testing::Prompt(6, n_vocab);

  // Full: 40 tokens in a context of 32.
  auto full = MakeCache(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, 32);
  Feed too_long = Feed::Prompt(full.get(), long_text);
  Status s = runner.Run(too_long);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("40 tokens do not fit: the context has room for 32 more"));
  EXPECT_EQ(too_long.status.message(), s.message());
  EXPECT_EQ(too_long.n_run, 0);
  EXPECT_EQ(full->n_seen(), 0);

  // snapkv holds a whole prompt: its ExpectPrompt refuses one longer than the context.
  KvConfig snap;
  ASSERT_TRUE(snap.Set(KvOpt::kPolicy, "snapkv").ok());
  ASSERT_TRUE(snap.SetInt(KvOpt::kSize, 16).ok());
  ASSERT_TRUE(snap.SetInt(KvOpt::kWindow, 4).ok());
  auto snapkv = MakeCache(m, snap, 32);
  auto other = MakeCache(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, 32);
  Feed refused = Feed::Prompt(snapkv.get(), long_text);
  Feed fine = Feed::Prompt(other.get(), short_text);
  Feed* both[] = {&refused, &fine};
  ASSERT_TRUE(runner.Step(both).ok());
  ASSERT_FALSE(refused.status.ok());
  EXPECT_THAT(refused.status.message(), HasSubstr("snapkv holds a whole prompt"));
  EXPECT_TRUE(refused.done());
  EXPECT_EQ(snapkv->n_seen(), 0);
  EXPECT_TRUE(fine.status.ok());
  EXPECT_TRUE(fine.done());
  EXPECT_EQ(fine.n_rows, 1);
  EXPECT_EQ(other->n_seen(), 6);

  // Told of the prompt, snapkv holds it and compresses it to its size at its end.
  Feed told = Feed::Prompt(snapkv.get(), std::span<const int32_t>(long_text).first(30));
  ASSERT_TRUE(runner.Run(told).ok());
  EXPECT_EQ(snapkv->n_used(), 16);
}

TEST(Runner, FitsAnswersFromTheCacheOrItsConfig) {
  const Model& m = Stories();
  const KvShape shape = m.config().kv_shape(16);
  auto full = ResolveKvConfig(KvConfig{.types = {KvType::kF32, KvType::kF32}}, shape);
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(FitsNewCache(*full, shape, 16).ok());
  Status s = FitsNewCache(*full, shape, 17);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "the prompt has 17 tokens, more than the context size 16");
  auto sink = ResolveKvConfig(testing::Kv("sink", 8), shape);
  ASSERT_TRUE(sink.ok());
  EXPECT_TRUE(FitsNewCache(*sink, shape, 1000).ok());

  auto cache = MakeCache(m, KvConfig{.types = {KvType::kF32, KvType::kF32}}, 16);
  EXPECT_TRUE(FitsCache(*cache, 16).ok());
  EXPECT_FALSE(FitsCache(*cache, 17).ok());
  auto ring = MakeCache(m, testing::Kv("sink", 8), 16);
  EXPECT_TRUE(FitsCache(*ring, 1 << 20).ok());
}

}  // namespace
}  // namespace rotor
