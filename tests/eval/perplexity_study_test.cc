// The study's expansion of KV lists into labelled runs, and its helpers; the
// reports themselves are checked end to end by perplexity_cli_test.
#include "eval/perplexity_study.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace rotor::eval {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<Engine> LoadEngine() {
  EngineOptions o;
  o.model_path = std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf";
  o.n_threads = 1;
  Result<std::unique_ptr<Engine>> e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(PerplexityStudyTest, ListsExpandToLabelledRunsFullOnce) {
  std::unique_ptr<Engine> engine = LoadEngine();
  ASSERT_NE(engine, nullptr);
  PerplexityArgs a;
  a.kv[KvOpt::kPolicy] = {"full", "sink"};
  a.kv[KvOpt::kSize] = {"64", "128"};
  Result<std::vector<PerplexityRun>> runs = ExpandPerplexityRuns(a, engine->model(), 256);
  ASSERT_TRUE(runs.ok()) << runs.message();
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ((*runs)[0].label, "full");
  EXPECT_EQ((*runs)[0].resolved.size, 256);  // the context
  EXPECT_THAT((*runs)[1].label, StartsWith("sink-64"));
  EXPECT_THAT((*runs)[2].label, StartsWith("sink-128"));
  EXPECT_EQ((*runs)[1].kv.size, 64);
  EXPECT_EQ((*runs)[2].resolved.size, 128);
}

TEST(PerplexityStudyTest, ErrorsNameTheFlagAndTheContext) {
  std::unique_ptr<Engine> engine = LoadEngine();
  ASSERT_NE(engine, nullptr);
  PerplexityArgs unused;
  unused.kv[KvOpt::kPolicy] = {"full"};
  unused.kv[KvOpt::kSize] = {"64"};
  Result<std::vector<PerplexityRun>> r = ExpandPerplexityRuns(unused, engine->model(), 256);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("--kv-size"));

  PerplexityArgs too_big;
  too_big.kv[KvOpt::kPolicy] = {"sink"};
  too_big.kv[KvOpt::kSize] = {"512"};
  r = ExpandPerplexityRuns(too_big, engine->model(), 256);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("-c 256"));
}

TEST(PerplexityStudyTest, FileNameIsTheLastComponent) {
  EXPECT_EQ(FileName("a/b/c.txt"), "c.txt");
  EXPECT_EQ(FileName("c.txt"), "c.txt");
  EXPECT_EQ(FileName("/x/"), "");
}

}  // namespace
}  // namespace rotor::eval
