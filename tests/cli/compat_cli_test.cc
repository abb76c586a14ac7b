// llama.cpp users' spellings (argv_compat.h): each accepted and doing what it
// says (or printing its note), the "did you mean" errors, help text, the
// version; tokenize -f, detokenize, info -m; the trained-context warning, the
// template/vocabulary check and bench's file-type labels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

// Greedy generation on the bundled model with extra arguments.
CliResult Generate(std::vector<std::string> extra, const std::string& n = "24") {
  std::vector<std::string> args = {"generate", "-m", BundledModel(), "-p", "Once upon a time",
                                   "-n",       n,    "--temp",       "0",  "-t",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunRotor(args);
}

// The "[prompt N tokens" count of a chat footer.
int PromptTokens(const std::string& err) {
  const size_t at = err.find("[prompt ");
  if (at == std::string::npos) return -1;
  return std::stoi(err.substr(at + 8));
}

TEST(CompatCliTest, NglIsAcceptedWithANote) {
  const CliResult base = Generate({});
  ASSERT_EQ(base.exit_code, 0) << base.err;
  for (const char* flag : {"-ngl", "--n-gpu-layers"}) {
    const CliResult r = Generate({flag, "99"});
    ASSERT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("rotor runs on the CPU")) << flag;
    EXPECT_EQ(r.out, base.out) << flag;
  }
  // Before the old behaviour: "-ngl 99" read as "-n gl 99".
  const CliResult bench = RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "4", "-r", "1",
                                    "-t", "1", "-ngl", "99", "-fa", "1"});
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_THAT(bench.err, HasSubstr("rotor runs on the CPU"));
}

TEST(CompatCliTest, FlashAttentionTakesOnOffAuto) {
  const CliResult base = Generate({});
  for (std::vector<std::string> fa :
       {std::vector<std::string>{"-fa"}, {"-fa", "on"}, {"-fa", "auto"}, {"--flash-attn", "on"}}) {
    const CliResult r = Generate(fa);
    ASSERT_EQ(r.exit_code, 0) << fa.back() << ": " << r.err;
    EXPECT_EQ(r.out, base.out);
    EXPECT_THAT(r.err, Not(HasSubstr("-fa")));  // on: what rotor does anyway
  }
  const CliResult off = Generate({"-fa", "off"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_THAT(off.err, HasSubstr("always"));
  EXPECT_EQ(off.out, base.out);
  const CliResult bad = Generate({"-fa", "sometimes"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("'sometimes' is not one of on, off, auto"));
}

TEST(CompatCliTest, ReversePromptStopsAtTheString) {
  const CliResult base = Generate({}, "48");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const size_t dot = base.out.find('.');
  ASSERT_NE(dot, std::string::npos) << base.out;
  for (const char* flag : {"-r", "--reverse-prompt"}) {
    const CliResult r = Generate({flag, "."}, "48");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, base.out.substr(0, dot) + "\n") << flag;
    EXPECT_THAT(r.err, HasSubstr("finish: stop"));
  }
}

TEST(CompatCliTest, BatchAndUbatchSetThePrefillStep) {
  const CliResult base = Generate({});
  for (std::vector<std::string> b : {std::vector<std::string>{"-b", "3"},
                                     {"--batch-size", "3"},
                                     {"-ub", "3"},
                                     {"--ubatch-size", "3"},
                                     {"-b", "64", "-ub", "3"}}) {
    const CliResult r = Generate([&] {
      std::vector<std::string> v = b;
      v.push_back("-v");
      return v;
    }());
    ASSERT_EQ(r.exit_code, 0) << b[0] << ": " << r.err;
    EXPECT_EQ(r.out, base.out) << b[0];  // chunked prefill gives the same text
    EXPECT_THAT(r.err, HasSubstr("prefill step 3")) << b[0];
  }
  const CliResult capped = Generate({"-b", "7", "-v"});
  EXPECT_THAT(capped.err, HasSubstr("prefill step 7"));
  const CliResult bad = Generate({"-b", "0"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--batch-size"));
}

TEST(CompatCliTest, KeepIsTheSinkCount) {
  const CliResult r =
      Generate({"--kv", "sink", "--kv-size", "32", "--keep", "2", "--ignore-eos"}, "64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const CliResult same =
      Generate({"--kv", "sink", "--kv-size", "32", "--kv-keep", "2", "--ignore-eos"}, "64");
  EXPECT_EQ(r.out, same.out);
  const CliResult other =
      Generate({"--kv", "sink", "--kv-size", "32", "--kv-keep", "8", "--ignore-eos"}, "64");
  EXPECT_NE(r.out, other.out);  // the option is not ignored
  const CliResult full = Generate({"--keep", "4"});
  EXPECT_NE(full.exit_code, 0);
  EXPECT_THAT(full.err, HasSubstr("is not used by --kv full"));
}

TEST(CompatCliTest, MlockAndNoMmap) {
  const CliResult base = Generate({});
  const CliResult lock = Generate({"--mlock", "-v"});
  ASSERT_EQ(lock.exit_code, 0) << lock.err;
  EXPECT_EQ(lock.out, base.out);
  // Either locked, or llama.cpp's warning naming RLIMIT_MEMLOCK.
  EXPECT_TRUE(lock.err.find("mapped, locked") != std::string::npos ||
              lock.err.find("RLIMIT_MEMLOCK") != std::string::npos)
      << lock.err;
  const CliResult read = Generate({"--no-mmap", "-v"});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(read.out, base.out);
  EXPECT_THAT(read.err, HasSubstr("read into memory"));
  const CliResult mapped = Generate({"-v"});
  EXPECT_THAT(mapped.err, HasSubstr("bytes mapped"));
}

TEST(CompatCliTest, VerboseAndVersion) {
  for (const char* flag : {"-v", "--verbose"}) {
    const CliResult r = Generate({flag});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("trained context 512")) << flag;
  }
  const CliResult quiet = Generate({});
  EXPECT_THAT(quiet.err, Not(HasSubstr("trained context")));
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--version"}, {"generate", "--version"}, {"-v", "--version"}}) {
    const CliResult r = RunRotor(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("rotor 0.", 0), 0u) << r.out;
    EXPECT_THAT(r.out, HasSubstr("built with"));
  }
}

TEST(CompatCliTest, PresenceAndFrequencyPenaltiesChangeGreedyText) {
  const CliResult base = Generate({}, "64");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  for (const char* flag : {"--presence-penalty", "--frequency-penalty"}) {
    const CliResult r = Generate({flag, "1.5"}, "64");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out, base.out) << flag;
    const CliResult off = Generate({flag, "0"}, "64");
    EXPECT_EQ(off.out, base.out) << flag;
  }
}

TEST(CompatCliTest, SystemPromptAndConversation) {
  TempDir dir;
  const std::string input = WriteFile(dir, "in.txt", "Hi\n");
  auto chat = [&](std::vector<std::string> extra, const std::string& cmd = "chat") {
    std::vector<std::string> args = {cmd,  "-m", BundledModel(), "--temp", "0",
                                     "-n", "8",  "-t",           "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunRotor(args, input);
  };
  const CliResult plain = chat({});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const int base = PromptTokens(plain.err);
  ASSERT_GT(base, 0) << plain.err;
  for (const char* flag : {"-sys", "--system-prompt", "--system"}) {
    const CliResult r = chat({flag, "Be brief."});
    ASSERT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_GT(PromptTokens(r.err), base) << flag;  // the system line is in the prompt
  }
  // -cnv on chat: what it does anyway.
  const CliResult cnv = chat({"-cnv"});
  ASSERT_EQ(cnv.exit_code, 0) << cnv.err;
  EXPECT_EQ(cnv.out, plain.out);
  // generate -cnv: llama-cli's conversation mode, which is rotor chat; -p is the system prompt.
  const CliResult gen = chat({"-cnv"}, "generate");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_THAT(gen.err, HasSubstr("conversation mode is `rotor chat`"));
  EXPECT_EQ(gen.out, plain.out);
  const CliResult gen_sys = chat({"-cnv", "-p", "Be brief."}, "generate");
  ASSERT_EQ(gen_sys.exit_code, 0) << gen_sys.err;
  EXPECT_EQ(PromptTokens(gen_sys.err), PromptTokens(chat({"-sys", "Be brief."}).err));
  const CliResult gen_sys2 = chat({"-sys", "Be brief."}, "generate");
  ASSERT_EQ(gen_sys2.exit_code, 0) << gen_sys2.err;
  EXPECT_EQ(gen_sys2.out, gen_sys.out);
  // -no-cnv: generate is never a conversation.
  const CliResult no_cnv = Generate({"-no-cnv"});
  ASSERT_EQ(no_cnv.exit_code, 0) << no_cnv.err;
  EXPECT_EQ(no_cnv.out, Generate({}).out);
}

TEST(CompatCliTest, ParallelAsNp) {
  TempDir dir;
  const std::string prompts = WriteFile(dir, "p.txt", "Once upon a time\nThe dog\n");
  const CliResult r = RunRotor({"generate", "-m", BundledModel(), "--prompts", prompts, "-np", "2",
                                "-n", "8", "--temp", "0", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST(CompatCliTest, SingleDashLongNamesAndAttachedValues) {
  const CliResult base = Generate({});
  const CliResult dash = RunRotor({"generate", "-m", BundledModel(), "-p", "Once upon a time", "-n",
                                   "24", "-temp", "0", "-t", "1"});
  ASSERT_EQ(dash.exit_code, 0) << dash.err;
  EXPECT_EQ(dash.out, base.out);
  const CliResult attached = RunRotor(
      {"generate", "-m", BundledModel(), "-p", "Once upon a time", "-n24", "--temp", "0", "-t1"});
  ASSERT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_EQ(attached.out, base.out);
  // A value that looks like an option stays a value.
  const CliResult value = RunRotor(
      {"generate", "-m", BundledModel(), "-p", "-ngl", "-n", "4", "--temp", "0", "-t", "1"});
  ASSERT_EQ(value.exit_code, 0) << value.err;
  EXPECT_EQ(value.out.rfind("-ngl", 0), 0u) << value.out;
}

TEST(CompatCliTest, UnknownOptionsSayWhatTheyMeant) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {{"generate", "-ngx", "5"}, {"unknown option '-ngx'", "did you mean -ngl"}},
      {{"generate", "--kv-siz", "5"}, {"unknown option '--kv-siz'", "--kv-size"}},
      {{"generate", "--temperature", "0"}, {"unknown option '--temperature'", "--temp"}},
      {{"generate", "-ctx", "5"}, {"unknown option '-ctx'"}},
      {{"generate", "--mirostat", "2"}, {"--mirostat is llama.cpp's", "no such stage"}},
      {{"generate", "-hf", "x/y"}, {"-hf is llama.cpp's", "local GGUF files"}},
      {{"bench", "--numa", "distribute"}, {"--numa is llama.cpp's", "numactl"}},
      {{"bench", "--prio", "2"}, {"--prio is llama.cpp's", "nice or chrt"}},
      {{"generate", "-C", "0x3"}, {"-C is llama.cpp's", "taskset"}},
      {{"generate", "-i"}, {"-i is llama.cpp's", "rotor chat"}},
      {{"chat", "-no-cnv"}, {"unknown option '-no-cnv'"}},
      {{"genrate", "-p", "x"}, {"unknown command 'genrate'", "did you mean generate"}},
      {{"-m", "x.gguf", "-p", "hi"}, {"'-m' before the command"}},
  };
  for (const Case& c : cases) {
    const CliResult r = RunRotor(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args[1];
    for (const std::string& w : c.want) EXPECT_THAT(r.err, HasSubstr(w)) << c.args[1];
  }
}

TEST(CompatCliTest, HelpShowsNoParserInternals) {
  std::vector<std::vector<std::string>> helps = {{"--help"}};
  for (const char* cmd : {"generate", "chat", "serve", "bench", "perplexity", "tokenize",
                          "detokenize", "info", "synth", "quantize"})
    helps.push_back({cmd, "--help"});
  for (const auto& args : helps) {
    const CliResult r = RunRotor(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << r.err;
    EXPECT_FALSE(r.out.empty()) << args[0];
    // CLI11's internals: a choice map ({full->0,...}), a flag's stored value ({false}).
    for (const char* internal : {"->", "{false}", "{true}", ":{"})
      EXPECT_THAT(r.out, Not(HasSubstr(internal))) << args[0] << ":\n" << r.out;
  }
  const CliResult gen = RunRotor({"generate", "--help"});
  for (const char* name :
       {"--n-gpu-layers", "--flash-attn", "--reverse-prompt", "--batch-size", "--ubatch-size",
        "--keep", "--mlock", "--no-mmap", "--presence-penalty", "--frequency-penalty"})
    EXPECT_THAT(gen.out, HasSubstr(name));
  EXPECT_THAT(RunRotor({"--help"}).out, HasSubstr("--version"));
}

TEST(CompatCliTest, TokenizeFileDetokenizeAndInfoModel) {
  TempDir dir;
  const std::string text = WriteFile(dir, "t.txt", "Once upon a time");
  const CliResult p = RunRotor({"tokenize", "-m", BundledModel(), "-p", "Once upon a time"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const CliResult f = RunRotor({"tokenize", "-m", BundledModel(), "-f", text});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, p.out);
  const CliResult none = RunRotor({"tokenize", "-m", BundledModel()});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_THAT(none.err, HasSubstr("-p TEXT or -f FILE"));

  // detokenize: tokenize's output back to the text, from a file or arguments.
  const std::string ids = WriteFile(dir, "ids.txt", p.out);
  const CliResult back = RunRotor({"detokenize", "-m", BundledModel(), "-f", ids});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, "Once upon a time\n");
  std::string list = p.out.substr(1, p.out.find(']') - 1);  // "1, 403, ..."
  std::vector<std::string> args = {"detokenize", "-m", BundledModel()};
  for (size_t at = 0; at < list.size();) {
    size_t end = list.find(", ", at);
    if (end == std::string::npos) end = list.size();
    args.push_back(list.substr(at, end - at));
    at = end + 2;
  }
  const CliResult from_args = RunRotor(args);
  ASSERT_EQ(from_args.exit_code, 0) << from_args.err;
  EXPECT_EQ(from_args.out, "Once upon a time\n");
  const CliResult special = RunRotor({"detokenize", "-m", BundledModel(), "--special", "1", "2"});
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out, "<s></s>\n");
  const CliResult range = RunRotor({"detokenize", "-m", BundledModel(), "1", "999999"});
  EXPECT_NE(range.exit_code, 0);
  EXPECT_THAT(range.err, HasSubstr("token id 999999 is out of range [0, 512)"));
  const CliResult word = RunRotor({"detokenize", "-m", BundledModel(), "1", "x"});
  EXPECT_NE(word.exit_code, 0);
  EXPECT_THAT(word.err, HasSubstr("'x' is not a token id"));
  // Lists with an empty item or an unpaired bracket were read as if whole.
  for (const auto& [list_text, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"1,,2", "an empty item before the comma at character 3"},
           {"1,", "an empty item after the last comma"},
           {"[1, 2", "'[1, 2' has a bracket without its pair"},
           {"1 2]", "has a bracket without its pair"}}) {
    const CliResult bad = RunRotor({"detokenize", "-m", BundledModel(), list_text});
    EXPECT_NE(bad.exit_code, 0) << list_text;
    EXPECT_THAT(bad.err, HasSubstr(message)) << list_text;
  }
  const CliResult spaced = RunRotor({"detokenize", "-m", BundledModel(), " [ 1 , 403 ] "});
  ASSERT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_EQ(spaced.out, "Once\n");

  const CliResult info_pos = RunRotor({"info", BundledModel()});
  ASSERT_EQ(info_pos.exit_code, 0) << info_pos.err;
  for (const char* flag : {"-m", "--model"}) {
    const CliResult info = RunRotor({"info", flag, BundledModel()});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_EQ(info.out, info_pos.out);
  }
}

// Original positions past the trained context (512 for the bundled model) are
// warned about; the evicting policies' default (compact) is not.
TEST(CompatCliTest, WarnsWhenOriginalPositionsPassTheTrainedContext) {
  const std::vector<std::string> sink = {"--kv", "sink", "--kv-size", "64", "--ignore-eos"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = sink;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  const CliResult orig = Generate(with({"--kv-positions", "original"}), "600");
  ASSERT_EQ(orig.exit_code, 0) << orig.err;
  EXPECT_THAT(orig.err, HasSubstr("warning: --kv sink with --kv-positions original"));
  EXPECT_THAT(orig.err, HasSubstr("512"));
  const CliResult short_run = Generate(with({"--kv-positions", "original"}), "100");
  EXPECT_THAT(short_run.err, Not(HasSubstr("warning")));  // stays inside 512
  const CliResult compact = Generate(sink, "600");
  ASSERT_EQ(compact.exit_code, 0) << compact.err;
  EXPECT_THAT(compact.err, Not(HasSubstr("warning")));
  const CliResult window = Generate({"--kv", "window", "--kv-size", "64", "--ignore-eos"}, "600");
  EXPECT_THAT(window.err, Not(HasSubstr("warning")));  // a window's distances stay below 64
  const CliResult full = Generate({"-c", "1024", "--ignore-eos"}, "600");
  EXPECT_THAT(full.err, HasSubstr("warning: the context of 1024 tokens is larger than the 512"));
  // chat: a conversation has no end.
  TempDir dir;
  const std::string input = WriteFile(dir, "in.txt", "Hi\n");
  const CliResult chat = RunRotor({"chat", "-m", BundledModel(), "--kv", "h2o", "--kv-size", "64",
                                   "--kv-positions", "original", "-n", "4", "-t", "1"},
                                  input);
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_THAT(chat.err, HasSubstr("warning: --kv h2o with --kv-positions original"));
}

TEST(CompatCliTest, TemplateWhoseTokensTheVocabularyLacksIsAnError) {
  TempDir dir;
  const std::string input = WriteFile(dir, "in.txt", "Hi\n");
  const CliResult chatml =
      RunRotor({"chat", "-m", BundledModel(), "--chat-template", "chatml", "-n", "4"}, input);
  EXPECT_NE(chatml.exit_code, 0);
  EXPECT_THAT(chatml.err, HasSubstr("chat template chatml"));
  EXPECT_THAT(chatml.err, HasSubstr("<|im_start|>, <|im_end|>"));
  const CliResult llama3 =
      RunRotor({"chat", "-m", BundledModel(), "--chat-template", "llama3", "-n", "4"}, input);
  EXPECT_NE(llama3.exit_code, 0);
  EXPECT_THAT(llama3.err, HasSubstr("<|start_header_id|>, <|end_header_id|>, <|eot_id|>"));
  // The bundled vocabulary has </s>: llama2's markup is fine.
  const CliResult llama2 =
      RunRotor({"chat", "-m", BundledModel(), "--chat-template", "llama2", "-n", "4"}, input);
  EXPECT_EQ(llama2.exit_code, 0) << llama2.err;
}

TEST(CompatCliTest, BenchLabelsFileTypesAsLlamaCpp) {
  TempDir dir;
  struct Case {
    const char* type;
    const char* label;
  };
  for (const Case& c : {Case{"Q4_K_M", "Q4_K - Medium"}, Case{"q8_0", "Q8_0"},
                        Case{"Q3_K_S", "Q3_K - Small"}, Case{"f16", "F16"}}) {
    const std::string model = dir.File(std::string(c.type) + ".gguf");
    // One small layer of K-quant-sized rows and a byte vocabulary: the label
    // depends only on the file type (with a 32,000-token vocabulary Q3_K_S's
    // synth took about 4 s under ASan, 0.65 s this way).
    const CliResult synth =
        RunRotor({"synth", "--shape", "stories15m", "--layers", "1", "--dim", "256", "--ffn", "256",
                  "--heads", "4", "--no-vocab-file", "--type", c.type, "-o", model, "-t", "2"});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const CliResult bench =
        RunRotor({"bench", "-m", model, "-p", "0", "-n", "2", "-r", "1", "-t", "1", "-o", "json"});
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    const nlohmann::json rows = nlohmann::json::parse(bench.out);
    ASSERT_FALSE(rows.empty()) << bench.out;
    EXPECT_THAT(rows[0]["model_type"].get<std::string>(), EndsWith(std::string(" ") + c.label))
        << c.type;
  }
}

// bench shows the positions an evicting policy ran with (compact by default).
TEST(CompatCliTest, BenchShowsThePositions) {
  const CliResult r =
      RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--kv",
                "sink", "--kv-size", "32", "--kv-positions", "original,compact", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0]["kv_positions"], "original");
  EXPECT_EQ(rows[1]["kv_positions"], "compact");
  const CliResult md = RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "2", "-r", "1",
                                 "-t", "1", "--kv", "sink", "--kv-size", "32"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("| positions |"));
  EXPECT_THAT(md.out, HasSubstr("| compact |"));
}

}  // namespace
}  // namespace rotor::testing
