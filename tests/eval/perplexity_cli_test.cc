// rotor perplexity end to end: llama-perplexity's output format, the KL base
// workflow, the stream's CSV and plot, and the errors a user can run into.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../cli/run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

const std::string kText = ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt";

CliResult Ppl(std::vector<std::string> args) {
  args.insert(args.begin(), {"perplexity", "-m", BundledModel(), "-t", "2"});
  return RunRotor(args);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The second line of a chunk run: "Final estimate: PPL = X +/- Y".
double FinalPpl(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("Final estimate: PPL = ([0-9.]+)"))) << out;
  return m.empty() ? 0 : std::stod(m[1]);
}

TEST(PerplexityCli, PrintsLikeLlamaPerplexity) {
  CliResult r = Ppl({"-f", kText, "-c", "128", "--chunks", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              MatchesRegex("\\[1\\][0-9]+\\.[0-9]{4},\\[2\\][0-9]+\\.[0-9]{4},"
                           "\\[3\\][0-9]+\\.[0-9]{4},\n"
                           "Final estimate: PPL = [0-9]+\\.[0-9]{4} \\+/- [0-9]+\\.[0-9]{5}\n"));
  EXPECT_THAT(r.err, HasSubstr("3 chunks of 128 tokens"));
  EXPECT_GT(FinalPpl(r.out), 1.0);
  EXPECT_LT(FinalPpl(r.out), 20.0);  // stories260K on its own kind of text
}

TEST(PerplexityCli, SeveralPoliciesInOneCommand) {
  CliResult r = Ppl({"-f", kText, "-c", "128", "--chunks", "2", "--kv", "full,sink,window",
                     "--kv-size", "32,64", "--kv-positions", "original,compact"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* label : {"kv full:", "kv sink-32-original:", "kv sink-64-compact:",
                            "kv window-32-compact:", "| window-64-original | 64 |"})
    EXPECT_THAT(r.out, HasSubstr(label));
  EXPECT_THAT(r.out, Not(HasSubstr("full-")));
}

TEST(PerplexityCli, KlBaseWorkflow) {
  TempDir dir;
  const std::string base = dir.File("full.kld");
  // The base and the runs compared with it in f32 (the f16 default is the
  // divergence measured below).
  CliResult w = Ppl({"-f", kText, "-c", "128", "--chunks", "4", "--kl-base", base, "--kv-type", "f32"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_THAT(w.err, HasSubstr("wrote the KL base"));
  ASSERT_TRUE(std::filesystem::exists(base));

  // Chunks default to the base's; the policy is compared with it.
  CliResult s =
      Ppl({"-f", kText, "-c", "128", "--kl-base", base, "--kv", "sink", "--kv-size", "32", "--kv-type", "f32"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("[4]"));
  EXPECT_THAT(s.out, Not(HasSubstr("[5]")));
  EXPECT_THAT(s.out, HasSubstr("Mean    KLD:"));
  EXPECT_THAT(s.out, HasSubstr("99.0%   KLD:"));
  EXPECT_THAT(s.out, HasSubstr("Same top p:"));
  EXPECT_THAT(s.out, Not(HasSubstr("Same top p: 100.000")));

  CliResult self = Ppl({"-f", kText, "-c", "128", "--kl-base", base, "--kl-read", "--kv-type", "f32"});
  ASSERT_EQ(self.exit_code, 0) << self.err;
  EXPECT_THAT(self.out, HasSubstr("Mean    KLD:   0.000000"));
  EXPECT_THAT(self.out, HasSubstr("Same top p: 100.000 ±  0.000 %"));
  EXPECT_EQ(FinalPpl(self.out), FinalPpl(w.out));

  // The f16 cache against the f32 base: a small divergence, not none, and the
  // same top token everywhere on this text.
  CliResult f16 = Ppl({"-f", kText, "-c", "128", "--kl-base", base, "--kl-read", "--kv-type", "f16"});
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  EXPECT_THAT(f16.out, HasSubstr("f32 K/V"));  // the base's description
  std::smatch max_kld;
  ASSERT_TRUE(std::regex_search(f16.out, max_kld, std::regex("Maximum KLD: +([0-9.]+)"))) << f16.out;
  EXPECT_GT(std::stod(max_kld[1]), 0.0);
  EXPECT_LT(std::stod(max_kld[1]), 1e-3);
  EXPECT_THAT(f16.out, HasSubstr("Same top p: 100.000"));

  CliResult ctx =
      Ppl({"-f", kText, "-c", "64", "--kl-base", base, "--kv", "window", "--kv-size", "32"});
  EXPECT_NE(ctx.exit_code, 0);
  EXPECT_THAT(ctx.err, HasSubstr("-c 128"));

  const std::string other = dir.File("other.txt");
  std::ofstream(other) << Slurp(kText).substr(3000);
  CliResult text =
      Ppl({"-f", other, "-c", "128", "--kl-base", base, "--kv", "window", "--kv-size", "32"});
  EXPECT_NE(text.exit_code, 0);
  EXPECT_THAT(text.err, HasSubstr("different text"));

  CliResult model = RunRotor({"perplexity", "-m", ROTOR_TESTDATA_DIR "/stories260K-F16.gguf", "-f",
                              kText, "-c", "128", "--kl-base", base, "--kv", "window"});
  EXPECT_NE(model.exit_code, 0);
  EXPECT_THAT(model.err, HasSubstr("different model"));

  CliResult missing =
      Ppl({"-f", kText, "-c", "128", "--kl-base", dir.File("none.kld"), "--kv", "h2o"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("none.kld"));
  EXPECT_THAT(missing.err, HasSubstr("--kv full"));
}

TEST(PerplexityCli, StreamWritesTableCsvAndPlot) {
  TempDir dir;
  const std::string csv = dir.File("s.csv"), svg = dir.File("s.svg");
  CliResult r = Ppl({"-f", kText, "--stream", "600", "--window", "200", "--kv", "full,sink",
                     "--kv-size", "64", "--kv-positions", "compact", "--csv", csv, "--plot", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| positions | full | sink-64-compact |"));
  EXPECT_THAT(r.out, HasSubstr("| 400-599 |"));
  EXPECT_THAT(r.out, HasSubstr("| all |"));
  const std::string table = Slurp(csv);
  EXPECT_EQ(
      table.rfind(
          "run,policy,kv_size,kv_keep,positions,rope_k,window_start,window_end,tokens,ppl\n", 0),
      0u);
  EXPECT_THAT(table, HasSubstr("full,full,600,0,original,cached,0,200,199,"));
  EXPECT_THAT(table, HasSubstr("sink-64-compact,sink,64,4,compact,cached,400,600,200,"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 1 + 2 * 3);
  const std::string plot = Slurp(svg);
  EXPECT_EQ(plot.rfind("<svg ", 0), 0u);
  EXPECT_THAT(plot, HasSubstr("sink-64-compact"));
}

TEST(PerplexityCli, StreamDrawsPng) {
  TempDir dir;
  const std::string png = dir.File("s.png");
  CliResult r =
      Ppl({"-f", kText, "--stream", "300", "--window", "100", "--kv", "full", "--plot", png});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bytes = Slurp(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(PerplexityCli, Errors) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> want;  // substrings of stderr
  };
  const std::string tiny = dir.File("tiny.txt");
  std::ofstream(tiny) << "Once upon a time, there was a cat.";
  const std::vector<Case> cases = {
      {{"-f", dir.File("no-such.txt")}, {"no-such.txt"}},
      {{"-f", tiny}, {"fewer than one chunk"}},
      {{"-f", kText, "-c", "1024"}, {"-c 1024", "trained"}},
      {{"-f", kText, "-c", "128", "--kv", "sink", "--kv-size", "256"}, {"--kv-size 256"}},
      {{"-f", kText, "--kv", "lru"}, {"--kv"}},
      {{"-f", kText, "--csv", dir.File("x.csv")}, {"--csv", "--stream"}},
      {{"-f", kText, "--stream", "600", "--kl-base", dir.File("b")}, {"--stream", "--kl-base"}},
      {{"-f", kText, "--stream", "600", "--chunks", "2"}, {"--stream", "--chunks"}},
      {{"-f", kText, "--kl-read"}, {"--kl-read", "--kl-base"}},
      {{"-f", kText, "--stream", "600", "--plot", dir.File("x.gif")}, {"x.gif", ".svg or .png"}},
      {{"-f", kText, "--stream", "100000"}, {"--stream 100000", "tokens"}},
      {{"-f", kText, "--stream", "600", "-c", "256"}, {"-c 600"}},
      {{"-f", kText, "--stream", "600", "--window", "0"}, {"--window"}},
      // Output paths are checked before the run (they failed after it).
      {{"-f", kText, "--stream", "600", "--csv", dir.File("none/x.csv")},
       {"--csv: cannot create", "none' does not exist"}},
      {{"-f", kText, "--stream", "600", "--plot", dir.File("none/x.svg")},
       {"--plot: cannot create", "none' does not exist"}},
      {{"-f", kText, "--stream", "600", "--csv", dir.path().string()}, {"is a directory"}},
      {{"-f", kText, "-c", "2"}, {"-c 2 is too small"}},
  };
  for (const Case& c : cases) {
    CliResult r = Ppl(c.args);
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_NE(r.exit_code, 0) << joined;
    for (const std::string& w : c.want) EXPECT_THAT(r.err, HasSubstr(w)) << joined;
  }
}

}  // namespace
}  // namespace rotor::testing
