#include "bench_runner/bench_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rotor::bench {
namespace {

using ::testing::HasSubstr;

std::string Model() { return std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf"; }

TEST(BenchConfigTest, ParsesTestNames) {
  Result<BenchTest> pp = ParseBenchTest("pp512");
  ASSERT_TRUE(pp.ok()) << pp.message();
  EXPECT_EQ(pp->n_prompt, 512);
  EXPECT_EQ(pp->n_gen, 0);
  EXPECT_EQ(pp->Name(), "pp512");
  for (const char* spec : {"tg128@d4096", "tg128 @ d4096"}) {
    Result<BenchTest> tg = ParseBenchTest(spec);
    ASSERT_TRUE(tg.ok()) << spec << ": " << tg.message();
    EXPECT_EQ(tg->n_gen, 128);
    EXPECT_EQ(tg->n_depth, 4096);
    EXPECT_EQ(tg->Tokens(), 4096 + 128);
    Result<BenchTest> again = ParseBenchTest(tg->Name());
    ASSERT_TRUE(again.ok()) << tg->Name();
    EXPECT_EQ(again->Tokens(), tg->Tokens());
  }
  for (const char* bad : {"", "xx12", "pp", "pp-3", "tg12@", "tg12@x9"})
    EXPECT_FALSE(ParseBenchTest(bad).ok()) << "'" << bad << "'";
}

TEST(BenchConfigTest, ContextIsWhatTheTestNeedsUnlessGiven) {
  const BenchTest t{.n_prompt = 0, .n_gen = 16, .n_depth = 100};
  Result<int> fit = ResolveContext(0, t, 0);
  ASSERT_TRUE(fit.ok()) << fit.message();
  EXPECT_EQ(*fit, 116);
  Result<int> at_least_kv = ResolveContext(0, t, 256);
  ASSERT_TRUE(at_least_kv.ok()) << at_least_kv.message();
  EXPECT_EQ(*at_least_kv, 256);
  Result<int> given = ResolveContext(512, t, 0);
  ASSERT_TRUE(given.ok()) << given.message();
  EXPECT_EQ(*given, 512);
  EXPECT_FALSE(ResolveContext(64, t, 0).ok());  // the test needs 116
}

TEST(BenchConfigTest, Formats) {
  EXPECT_EQ(*ParseBenchFormat("md"), BenchFormat::kMarkdown);
  EXPECT_EQ(*ParseBenchFormat("json"), BenchFormat::kJson);
  EXPECT_EQ(*ParseBenchFormat("jsonl"), BenchFormat::kJsonl);
  EXPECT_EQ(*ParseBenchFormat("csv"), BenchFormat::kCsv);
  EXPECT_EQ(*ParseBenchFormat("sql"), BenchFormat::kSql);
  Result<BenchFormat> bad = ParseBenchFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("xml"));
}

// full holds the whole context, so --kv-size does not multiply it; the order
// is kv > kv-size > test.
TEST(BenchConfigTest, ExpandsListsInOrderFullOnce) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  std::vector<BenchModel> models;
  models.push_back(std::move(*m));
  BenchArgs a;
  a.models = {Model()};
  a.n_prompt = {16};
  a.n_gen = {8};
  a.threads = {1};
  a.kv[KvOpt::kPolicy] = {"full", "sink"};
  a.kv[KvOpt::kSize] = {"32", "64"};
  Result<std::vector<BenchCase>> cases = ExpandBenchCases(a, models);
  ASSERT_TRUE(cases.ok()) << cases.message();
  ASSERT_EQ(cases->size(), 6u);
  const std::vector<std::pair<std::string, std::string>> want = {{"full", "pp16"}, {"full", "tg8"},
                                                                 {"sink", "pp16"}, {"sink", "tg8"},
                                                                 {"sink", "pp16"}, {"sink", "tg8"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*cases)[i].kv.policy, want[i].first) << i;
    EXPECT_EQ((*cases)[i].test.Name(), want[i].second) << i;
    EXPECT_GE((*cases)[i].n_ctx, (*cases)[i].test.Tokens()) << i;
  }
  EXPECT_EQ((*cases)[2].kv.size, 32);
  EXPECT_EQ((*cases)[4].kv.size, 64);
}

TEST(BenchConfigTest, ErrorsNameTheFlag) {
  Result<BenchModel> m = LoadBenchModel(Model());
  ASSERT_TRUE(m.ok()) << m.message();
  std::vector<BenchModel> models;
  models.push_back(std::move(*m));
  BenchArgs a;
  a.models = {Model()};
  a.threads = {1};
  a.kv[KvOpt::kPolicy] = {"full"};
  a.kv[KvOpt::kSize] = {"64"};  // no listed policy uses it
  Result<std::vector<BenchCase>> cases = ExpandBenchCases(a, models);
  ASSERT_FALSE(cases.ok());
  EXPECT_THAT(cases.message(), HasSubstr("--kv-size"));

  Result<BenchModel> missing = LoadBenchModel("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace rotor::bench
