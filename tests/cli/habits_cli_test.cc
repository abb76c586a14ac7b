// More llama.cpp habits (after compat_cli_test.cc): escape sequences in the
// command line's texts, -f's trailing newline, repeated options (the last
// wins), -b / -ub on every command with a prefill step, perplexity -c 0, and
// llama-server / llama-perplexity spellings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

// A namespace of its own: the unity build joins this file with compat_cli_test.cc.
namespace rotor::testing::habits {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CliResult Generate(const std::string& prompt, std::vector<std::string> extra,
                   const std::string& n = "8") {
  std::vector<std::string> args = {"generate", "-m", BundledModel(), "-p", prompt, "-n", n,
                                   "--temp",   "0",  "-t",           "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunRotor(args);
}

// A text of a few hundred tokens for perplexity.
std::string Story(const TempDir& dir) {
  std::string words;
  for (int i = 0; i < 60; ++i)
    words += "Once upon a time, the cat sat on the mat and then it ran. ";
  return WriteFile(dir, "story.txt", words);
}

// The "[prompt N tokens" count of a chat footer.
int PromptTokens(const std::string& err) {
  const size_t at = err.find("[prompt ");
  return at == std::string::npos ? -1 : std::stoi(err.substr(at + 8));
}

TEST(HabitsCliTest, EscapesInThePromptAsLlamaCpp) {
  // -n 0: the output is the prompt as it was read, then a newline.
  const CliResult all = Generate(R"(a\tb\x41\q\\n\'\"\x4g\)", {}, "0");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, "a\tbA\\q\\n'\"\\x4g\\\n");  // unknown ones stay as written
  const std::string real = "Once upon a time\nthere";
  const CliResult base = Generate(real, {"--no-escape"});
  ASSERT_EQ(base.exit_code, 0) << base.err;
  for (std::vector<std::string> flags :
       {std::vector<std::string>{}, {"-e"}, {"--escape"}, {"--no-escape", "-e"}}) {
    const CliResult r = Generate(R"(Once upon a time\nthere)", flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, base.out) << (flags.empty() ? "default" : flags.back());
  }
  for (std::vector<std::string> flags :
       {std::vector<std::string>{"--no-escape"}, {"-e", "--no-escape"}}) {
    const CliResult literal = Generate(R"(Once upon a time\nthere)", flags);
    ASSERT_EQ(literal.exit_code, 0) << literal.err;
    EXPECT_EQ(literal.out.rfind(R"(Once upon a time\nthere)", 0), 0u) << literal.out;
  }
}

TEST(HabitsCliTest, ReversePromptNewlineStopsAtTheFirstNewline) {
  const CliResult base = Generate("Once upon a time", {}, "80");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const size_t nl = base.out.find('\n');
  ASSERT_LT(nl + 1, base.out.size()) << "no newline in the generated text: " << base.out;
  const CliResult r = Generate("Once upon a time", {"-r", R"(\n)"}, "80");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, base.out.substr(0, nl) + "\n");
  EXPECT_THAT(r.err, HasSubstr("finish: stop"));
  const CliResult literal = Generate("Once upon a time", {"-r", R"(\n)", "--no-escape"}, "80");
  EXPECT_EQ(literal.out, base.out);  // a backslash and an n never come
}

TEST(HabitsCliTest, PromptFileLosesOneTrailingNewlineAndIsEscaped) {
  TempDir dir;
  const CliResult p = Generate("Once upon a time", {});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto from_file = [&](const std::string& text, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "generate", "-m", BundledModel(), "-f", WriteFile(dir, "p.txt", text), "-n", "8",
        "--temp",   "0",  "-t",           "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunRotor(args);
  };
  const CliResult f = from_file("Once upon a time\n");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, p.out);
  EXPECT_THAT(f.err, HasSubstr("prompt 5 tokens"));
  // Only one newline goes; a file's escapes are processed as -p's.
  const CliResult two = from_file("Once upon a time\n\n");
  EXPECT_EQ(two.out.rfind("Once upon a time\n", 0), 0u) << two.out;
  EXPECT_NE(two.out, p.out);
  const CliResult esc = from_file("Once upon a time\\nthere\n");
  EXPECT_EQ(esc.out, Generate("Once upon a time\nthere", {"--no-escape"}).out);
  const CliResult raw = from_file("Once upon a time\\nthere\n", {"--no-escape"});
  EXPECT_EQ(raw.out.rfind("Once upon a time\\nthere", 0), 0u) << raw.out;
}

TEST(HabitsCliTest, ChatEscapesTheSystemPrompt) {
  TempDir dir;
  const std::string input = WriteFile(dir, "in.txt", "Hi\n");
  auto chat = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"chat", "-m", BundledModel(), "--temp", "0",
                                     "-n",   "8",  "-t",           "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunRotor(args, input);
  };
  const CliResult real = chat({"-sys", "Be\nbrief.", "--no-escape"});
  ASSERT_EQ(real.exit_code, 0) << real.err;
  const CliResult escaped = chat({"-sys", R"(Be\nbrief.)"});
  ASSERT_EQ(escaped.exit_code, 0) << escaped.err;
  EXPECT_EQ(PromptTokens(escaped.err), PromptTokens(real.err));
  EXPECT_EQ(escaped.out, real.out);
  const CliResult literal = chat({"-sys", R"(Be\nbrief.)", "--no-escape"});
  EXPECT_NE(PromptTokens(literal.err), PromptTokens(real.err)) << literal.err;
}

TEST(HabitsCliTest, ARepeatedOptionTakesTheLastValue) {
  const CliResult last = Generate("Once upon a time", {"-n", "3"}, "8");
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(last.out, Generate("Once upon a time", {}, "3").out);
  EXPECT_THAT(last.err, HasSubstr("generated 3 tokens"));
  const CliResult kv = Generate("Once upon a time", {"--kv", "sink", "--kv", "full"});
  ASSERT_EQ(kv.exit_code, 0) << kv.err;  // --kv-size would be needed for sink
  const CliResult reps = RunRotor({"bench", "-m", BundledModel(), "-p", "8", "-n", "0", "-t", "1",
                                   "-r", "3", "-r", "1", "-o", "json"});
  ASSERT_EQ(reps.exit_code, 0) << reps.err;
  EXPECT_EQ(nlohmann::json::parse(reps.out)[0]["samples_ns"].size(), 1u);
  // Lists keep every value, repeated or comma-separated.
  const CliResult lists = RunRotor({"bench", "-m", BundledModel(), "-p", "8", "-p", "16,4", "-n",
                                    "0", "-t", "1", "-r", "1", "-o", "json"});
  ASSERT_EQ(lists.exit_code, 0) << lists.err;
  const nlohmann::json rows = nlohmann::json::parse(lists.out);
  ASSERT_EQ(rows.size(), 3u) << lists.out;
  EXPECT_EQ(rows[2]["n_prompt"], 4);
}

TEST(HabitsCliTest, BatchAndUbatchOnBenchServeAndPerplexity) {
  for (std::vector<std::string> b : {std::vector<std::string>{"-ub", "8"},
                                     {"--ubatch-size", "8"},
                                     {"-b", "8"},
                                     {"--batch-size", "8"},
                                     {"--prefill-step", "8"}}) {
    std::vector<std::string> args = {"bench", "-m", BundledModel(), "-p", "16", "-n",  "0",
                                     "-t",    "1",  "-r",           "1",  "-o", "json"};
    args.insert(args.end(), b.begin(), b.end());
    const CliResult r = RunRotor(args);
    ASSERT_EQ(r.exit_code, 0) << b[0] << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)[0]["prefill_step"], 8) << b[0];
  }
  const CliResult caps = RunRotor({"bench", "-m", BundledModel(), "-p", "16", "-n", "0", "-t", "1",
                                   "-r", "1", "-b", "4,8", "-ub", "6", "-o", "json"});
  ASSERT_EQ(caps.exit_code, 0) << caps.err;
  const nlohmann::json rows = nlohmann::json::parse(caps.out);
  ASSERT_EQ(rows.size(), 2u) << caps.out;
  EXPECT_EQ(rows[0]["prefill_step"], 4);
  EXPECT_EQ(rows[1]["prefill_step"], 6);
  TempDir dir;
  const std::string text = Story(dir);
  for (std::vector<std::string> b :
       {std::vector<std::string>{"-b", "32"}, {"-ub", "32"}, {"-b", "64", "-ub", "32"}}) {
    std::vector<std::string> args = {"perplexity", "-m",           BundledModel(), "-f", text,
                                     "-c",         "128",          "--chunks",     "1",  "-t",
                                     "1",          "--no-progress"};
    args.insert(args.end(), b.begin(), b.end());
    const CliResult r = RunRotor(args);
    ASSERT_EQ(r.exit_code, 0) << b[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("32 tokens per forward pass")) << b[0];
  }
  // serve takes them (the error is the port's, found after every option was read).
  const CliResult serve =
      RunRotor({"serve", "-m", BundledModel(), "-ub", "8", "-b", "16", "--port", "99999"});
  EXPECT_NE(serve.exit_code, 0);
  EXPECT_THAT(serve.err, HasSubstr("--port"));
  EXPECT_THAT(serve.err, Not(HasSubstr("unknown option")));
  const CliResult zero = RunRotor({"serve", "-m", BundledModel(), "-b", "0"});
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_THAT(zero.err, HasSubstr("--batch-size"));
}

TEST(HabitsCliTest, BenchPromptThenGeneration) {
  const CliResult r = RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "0", "-pg", "16,4",
                                "-pg", "8,2", "-d", "0,8", "-t", "1", "-r", "1", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_EQ(rows[0]["test"], "pp16+tg4");
  EXPECT_EQ(rows[0]["n_prompt"], 16);
  EXPECT_EQ(rows[0]["n_gen"], 4);
  EXPECT_EQ(rows[1]["test"], "pp8+tg2");
  EXPECT_EQ(rows[3]["test"], "pp8+tg2 @ d8");
  // t/s counts the prompt's and the generated tokens.
  const double ns = rows[0]["avg_ns"].get<double>();
  EXPECT_NEAR(rows[0]["avg_ts"].get<double>(), 20 * 1e9 / ns, 1e-6 * 20 * 1e9 / ns);
  const CliResult md = RunRotor(
      {"bench", "-m", BundledModel(), "-pg", "16,4", "-p", "16", "-n", "4", "-t", "1", "-r", "1"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  for (const char* test : {"| pp16 |", "| tg4 |", "| pp16+tg4 |"})
    EXPECT_THAT(md.out, HasSubstr(test));
  for (const char* bad : {"16", "16,x", "16,4,2", "16,-1"}) {
    const CliResult e = RunRotor({"bench", "-m", BundledModel(), "-pg", bad, "-t", "1"});
    EXPECT_NE(e.exit_code, 0) << bad;
    EXPECT_THAT(e.err, HasSubstr("is not PP,TG")) << bad;
  }
}

// llama-bench's ranges in bench's lists: FIRST-LAST, +STEP, *MULT.
TEST(HabitsCliTest, BenchListsTakeLlamaBenchRanges) {
  const CliResult r = RunRotor({"bench", "-m", BundledModel(), "-p", "4-16*2,3", "-n", "2-4+2",
                                "-t", "1-1", "-r", "1", "-o", "jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> tests;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    tests.push_back(nlohmann::json::parse(line)["test"]);
  EXPECT_EQ(tests, (std::vector<std::string>{"pp4", "pp8", "pp16", "pp3", "tg2", "tg4"})) << r.out;
  for (const char* bad : {"64-16", "4-x", "4-8/2", "4-8*1", "0-8*2", "1-100000"}) {
    const CliResult e = RunRotor({"bench", "-m", BundledModel(), "-p", bad, "-t", "1"});
    EXPECT_NE(e.exit_code, 0) << bad;
    EXPECT_THAT(e.err, HasSubstr(std::string("'") + bad + "'")) << bad;
  }
}

TEST(HabitsCliTest, PerplexityCtxZeroIsTheTrainedContext) {
  TempDir dir;
  const std::string model = dir.File("t1k.gguf");
  const CliResult synth =
      RunRotor({"synth", "--shape", "llama3-tiny", "--ctx", "1024", "-o", model, "-t", "1"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  std::string words;
  for (int i = 0; i < 300; ++i) words += "the cat sat on the mat and then it ran away ";
  const std::string text = WriteFile(dir, "t.txt", words);
  auto ppl = [&](const std::string& c) {
    std::vector<std::string> args = {"perplexity", "-m", model, "-f", text,
                                     "--chunks",   "1",  "-t",  "1",  "--no-progress"};
    if (!c.empty()) args.insert(args.end(), {"-c", c});
    return RunRotor(args);
  };
  const CliResult zero = ppl("0");
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  EXPECT_THAT(zero.err, HasSubstr("-c 0: chunks of the model's trained context, 1024 tokens"));
  EXPECT_THAT(zero.err, HasSubstr("1 chunks of 1024 tokens"));
  const CliResult none = ppl("");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.err, HasSubstr("1 chunks of 512 tokens"));  // llama-perplexity's default
}

TEST(HabitsCliTest, LlamaCppSpellingsOfServeAndChat) {
  // Accepted: what rotor serve always does, -a and -r (the port's error comes after parsing).
  for (std::vector<std::string> flag : {std::vector<std::string>{"--metrics"},
                                        {"-cb"},
                                        {"--cont-batching"},
                                        {"--jinja"},
                                        {"-a", "my-model"},
                                        {"--alias", "my-model"},
                                        {"-r", "STOP"},
                                        {"--reverse-prompt", "STOP"}}) {
    std::vector<std::string> args = {"serve", "-m", BundledModel(), "--port", "99999"};
    args.insert(args.end(), flag.begin(), flag.end());
    const CliResult r = RunRotor(args);
    EXPECT_THAT(r.err, HasSubstr("--port")) << flag[0];
    EXPECT_THAT(r.err, Not(HasSubstr("unknown option"))) << flag[0];
  }
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : {Case{{"serve", "--api-key", "k"}, "has no API-key check"},
                        Case{{"serve", "--api-key-file", "k.txt"}, "put it behind a proxy"},
                        Case{{"serve", "-nocb"}, "always batches continuously"},
                        Case{{"chat", "-p", "Hello"}, "reads each message from its input"},
                        Case{{"chat", "--prompt", "Hello"}, "-sys / --system"}}) {
    const CliResult r = RunRotor(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args[1];
    EXPECT_THAT(r.err, HasSubstr(c.want)) << c.args[1];
    EXPECT_THAT(r.err, Not(HasSubstr("did you mean"))) << c.args[1];
  }
  TempDir dir;
  const std::string input = WriteFile(dir, "in.txt", "Hi\n");
  const CliResult jinja =
      RunRotor({"chat", "-m", BundledModel(), "-n", "4", "-t", "1", "--jinja"}, input);
  EXPECT_EQ(jinja.exit_code, 0) << jinja.err;
}

// llama-perplexity's --kl-divergence-base FILE writes the base; with --kl-divergence it is read.
TEST(HabitsCliTest, PerplexityKlDivergenceSpellings) {
  TempDir dir;
  const std::string base = dir.File("base.kld");
  const std::vector<std::string> ppl = {
      "perplexity", "-m", BundledModel(), "-f", Story(dir),     "-c", "128",
      "--chunks",   "1",  "-t",           "1",  "--no-progress"};
  std::vector<std::string> write = ppl;
  write.insert(write.end(), {"--kl-divergence-base", base});
  const CliResult w = RunRotor(write);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_THAT(w.err, HasSubstr("wrote the KL base"));
  std::vector<std::string> read = write;
  read.push_back("--kl-divergence");
  const CliResult r = RunRotor(read);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KL divergence against"));
  EXPECT_THAT(r.err, Not(HasSubstr("wrote the KL base")));
}

}  // namespace
}  // namespace rotor::testing::habits
