// The KV option table through the command line: every option's range and
// choices, "not used by this policy", in generate, --prompts lines, bench and
// perplexity lists, each error naming the option as the caller wrote it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "kv/kv_config.h"
#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;

CliResult Generate(std::vector<std::string> kv) {
  std::vector<std::string> args = {"generate", "-m", BundledModel(), "-p", "Once",
                                   "-n",       "4",  "-t",           "1"};
  args.insert(args.end(), kv.begin(), kv.end());
  return RunRotor(args);
}

TEST(KvOptionsCliTest, EveryOptionOutOfRangeOrUnknownIsNamed) {
  for (const KvOptionSpec& spec : KvOptions()) {
    const std::string bad = spec.is_int ? std::to_string(spec.min - 1) : "nonsense";
    CliResult r = Generate({std::string(spec.flag), bad});
    EXPECT_NE(r.exit_code, 0) << spec.flag;
    EXPECT_THAT(r.err, HasSubstr(std::string(spec.flag) + " ")) << r.err;
    if (spec.is_int) {
      CliResult text = Generate({std::string(spec.flag), "12x"});
      EXPECT_NE(text.exit_code, 0);
      EXPECT_THAT(text.err, HasSubstr("is not an integer")) << text.err;
    } else {
      EXPECT_THAT(r.err, HasSubstr(KvChoicesText(spec.id))) << r.err;
    }
  }
}

TEST(KvOptionsCliTest, AnOptionThePolicyDoesNotUseIsAnError) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--kv", "window", "--kv-keep", "4"}, "--kv-keep is not used by --kv window"},
      {{"--kv", "full", "--kv-size", "64"}, "--kv-size is not used by --kv full"},
      {{"--kv", "sink", "--kv-recent", "8"}, "--kv-recent is not used by --kv sink"},
      {{"--kv", "h2o", "--kv-window", "8"}, "--kv-window is not used by --kv h2o"},
      {{"--kv", "tova", "--kv-keep", "2"}, "--kv-keep is not used by --kv tova"},
      {{"--kv-positions", "compact"}, "--kv-positions is not used by --kv full"},
      {{"--kv", "snapkv", "--kv-size", "16", "--kv-window", "16"},
       "--kv-window 16 must be smaller than --kv-size 16"},
      {{"--kv", "sink", "--kv-size", "8", "--kv-keep", "8"},
       "--kv-keep 8 must be smaller than --kv-size 8"},
      {{"--kv", "h2o", "--kv-size", "8", "--kv-recent", "8"},
       "--kv-recent 8 must be smaller than --kv-size 8"},
      {{"--kv", "sink", "--kv-size", "100000"}, "--kv-size 100000 is larger than the context"},
  };
  for (const Case& c : cases) {
    CliResult r = Generate(c.args);
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  // The defaults of an unused option are not "given": every policy runs bare.
  for (const std::string& policy : KvChoices(KvOpt::kPolicy)) {
    std::vector<std::string> args = {"--kv", policy};
    if (KvPolicyUses(policy, KvOpt::kSize)) args.insert(args.end(), {"--kv-size", "64"});
    CliResult r = Generate(args);
    EXPECT_EQ(r.exit_code, 0) << policy << ": " << r.err;
  }
}

TEST(KvOptionsCliTest, PromptsLinesNameTheJsonField) {
  TempDir dir;
  struct Case {
    std::string line;
    std::string message;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "kv": "window", "kv_keep": 4})", "kv_keep is not used by kv window"},
      {R"({"prompt": "a", "kv_size": -1})", "kv_size -1 is out of range"},
      {R"({"prompt": "a", "kv_size": "12"})", "kv_size must be an integer"},
      {R"({"prompt": "a", "kv": "lru"})", "kv 'lru' is not one of full, sink"},
      {R"({"prompt": "a", "kv": "snapkv", "kv_size": 8, "kv_window": 9})",
       "kv_window 9 must be smaller than kv_size 8"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.File("p.jsonl");
    std::ofstream(path) << R"({"prompt": "fine"})"
                        << "\n"
                        << c.line << "\n";
    CliResult r = RunRotor({"generate", "-m", BundledModel(), "--prompts", path, "-n", "2"});
    EXPECT_NE(r.exit_code, 0) << c.line;
    EXPECT_THAT(r.err, HasSubstr("line 2")) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << r.err;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--kv"))) << r.err;
  }
}

TEST(KvOptionsCliTest, BenchAndPerplexityListsUseTheTable) {
  const std::string text = ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt";
  CliResult bench = RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "4", "-r", "1",
                              "--kv", "full", "--kv-keep", "8"});
  EXPECT_NE(bench.exit_code, 0);
  EXPECT_THAT(bench.err, HasSubstr("--kv-keep is not used by --kv full"));
  CliResult bad = RunRotor(
      {"bench", "-m", BundledModel(), "-p", "0", "-n", "4", "-r", "1", "--kv", "sink,lru"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--kv 'lru' is not one of"));
  // Each policy takes the options it uses: full once, tova at both sizes.
  CliResult ok =
      RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "4", "-r", "1", "-t", "1", "--kv",
                "full,tova,snapkv", "--kv-size", "32,64", "--kv-window", "8", "-o", "jsonl"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  int rows = 0;
  for (size_t at = ok.out.find("\"kv\""); at != std::string::npos;
       at = ok.out.find("\"kv\"", at + 1))
    ++rows;
  EXPECT_EQ(rows, 5) << ok.out;
  CliResult ppl = RunRotor({"perplexity", "-m", BundledModel(), "-f", text, "-c", "64", "--chunks",
                            "1", "--kv", "sink", "--kv-window", "8"});
  EXPECT_NE(ppl.exit_code, 0);
  EXPECT_THAT(ppl.err, HasSubstr("--kv-window is not used by --kv sink"));
}

}  // namespace
}  // namespace rotor::testing
