// rotor synth + generate end to end, and the errors of rotor generate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(GenerateCliTest, SynthModelReloadsAndGenerates) {
  TempDir dir;
  const std::string model = dir.File("s15m-2l-q8_0.gguf");
  CliResult synth = RunRotor({"synth", "-o", model, "--shape", "stories15m", "--layers", "2",
                              "--type", "q8_0", "--vocab-file", LlamaVocab(), "-t", "2"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  ASSERT_TRUE(std::filesystem::exists(model));

  CliResult gen = RunRotor({"generate", "-m", model, "-p", "Once upon a time", "-n", "16", "--temp",
                            "0", "--ignore-eos", "-t", "2"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out.rfind("Once upon a time", 0), 0u) << gen.out;
  EXPECT_GT(gen.out.size(), std::string("Once upon a time\n").size()) << gen.out;
  EXPECT_THAT(gen.err, HasSubstr("generated 16 tokens"));
}

// Without --vocab-file, synth finds the bundled Llama-2 vocabulary from any
// working directory (ctest runs this one in the build tree).
TEST(GenerateCliTest, SynthFindsTheBundledVocabularyFromAnyDirectory) {
  TempDir dir;
  const std::string model = dir.File("s15m-1l.gguf");
  CliResult synth =
      RunRotor({"synth", "-o", model, "--shape", "stories15m", "--layers", "1", "-t", "2"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  CliResult info = RunRotor({"info", model});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("[32000 x string]"));
  CliResult tok = RunRotor({"tokenize", "-m", model, "-p", "Once upon a time"});
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_THAT(tok.out, HasSubstr("[1, 9038, 2501, 263, 931]"));  // as llama.cpp's Llama-2 vocab
}

TEST(GenerateCliTest, MissingModelNamesThePath) {
  const std::string path = "/nonexistent-dir/no-such-model.gguf";
  CliResult r = RunRotor({"generate", "-m", path, "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(path));
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(GenerateCliTest, UnknownFlag) {
  CliResult r = RunRotor({"generate", "-m", BundledModel(), "--no-such-flag"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
}

// -s -1 draws a random seed, as llama.cpp's does (it was taken as 2^64 - 1,
// a fixed seed); a seed that is not an integer in [0, 2^64 - 1] is an error
// (values past 2^64 were saturated).
TEST(GenerateCliTest, SeedMinusOneIsRandomAndBadSeedsAreErrors) {
  for (const char* bad : {"-2", "18446744073709551616", "99999999999999999999999", "1.5", "x"}) {
    CliResult r = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "-n", "2", "-s", bad});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_THAT(r.err, HasSubstr(std::string("--seed: '") + bad + "' is not an integer")) << bad;
  }
  auto run = [](const char* seed) {
    CliResult r = RunRotor({"generate", "-m", BundledModel(), "-p", "Once upon a time", "-n", "32",
                            "--temp", "1.5", "-t", "1", "-s", seed});
    EXPECT_EQ(r.exit_code, 0) << seed << ": " << r.err;
    return r.out;
  };
  EXPECT_EQ(run("18446744073709551615"), run("18446744073709551615"));  // fixed
  // 32 tokens at temperature 1.5: three random seeds all alike would be a
  // fixed seed (chance aside, far below one in a million).
  const std::string a = run("-1"), b = run("-1"), c = run("-1");
  EXPECT_FALSE(a == b && b == c) << a;
}

TEST(GenerateCliTest, KvTypeF16AndBadKvType) {
  CliResult r = RunRotor({"generate", "-m", BundledModel(), "-p", "Once upon a time", "-n", "24",
                          "--temp", "0", "--kv-type", "f16", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << r.out;
  CliResult bad = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--kv-type", "q4"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--kv-type"));
  EXPECT_THAT(bad.err, HasSubstr("q4"));
}

TEST(GenerateCliTest, GrammarAndJsonSchemaConstrainTheOutput) {
  const std::string prompt = "Once upon a time";
  CliResult g = RunRotor({"generate", "-m", BundledModel(), "-p", prompt, "-n", "64", "-s", "3",
                          "--grammar", R"(root ::= " The " ("cat" | "dog") " was " [a-z]{1,9} ".")"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_THAT(g.out, ::testing::MatchesRegex(prompt + " The (cat|dog) was [a-z]+\\.\n?"));
  TempDir dir;
  {
    std::ofstream(dir.File("schema.json"))
        << R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})";
  }
  CliResult j = RunRotor({"generate", "-m", BundledModel(), "-p", prompt, "-n", "100", "-s", "4",
                          "--json-schema-file", dir.File("schema.json")});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  ASSERT_EQ(j.out.rfind(prompt, 0), 0u) << j.out;
  const nlohmann::json v = nlohmann::json::parse(j.out.substr(prompt.size()), nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << j.out;
  EXPECT_TRUE(v["n"].is_number_integer()) << j.out;

  CliResult bad = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--grammar",
                            "root ::= \"a\" | b"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--grammar: grammar: line 1, column 16: undefined rule 'b'"));
  CliResult schema = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "-j",
                               R"({"type": "number", "minimum": 1})"});
  EXPECT_NE(schema.exit_code, 0);
  EXPECT_THAT(schema.err, HasSubstr("--json-schema: json schema: at #: unsupported keyword 'minimum'"));
  CliResult both = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--grammar",
                             "root ::= \"a\"", "-j", "{}"});
  EXPECT_NE(both.exit_code, 0);
  CliResult missing = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--grammar-file",
                                dir.File("nope.gbnf")});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("nope.gbnf"));

  // --prompts lines carry their own.
  {
    std::ofstream(dir.File("p.jsonl"))
        << R"({"prompt": "A", "grammar": "root ::= \"yes\" | \"no\"", "seed": 1})" << "\n"
        << R"({"prompt": "B", "json_schema": {"enum": [1, 2]}, "seed": 2})" << "\n"
        // Properties in the schema's order, not the alphabet's.
        << R"({"prompt": "C", "n_predict": 64, "json_schema": {"type": "object", "properties": )"
        << R"({"zeta": {"enum": [1]}, "alpha": {"enum": [2]}}, "required": ["zeta", "alpha"]}})"
        << "\n";
    std::ofstream(dir.File("bad.jsonl")) << R"({"prompt": "A", "grammar": "root ::= ("})" << "\n";
  }
  CliResult p = RunRotor({"generate", "-m", BundledModel(), "--prompts", dir.File("p.jsonl")});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::istringstream lines(p.out);
  std::map<int, std::string> texts;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    texts[r["id"].get<int>()] = r["text"];
  }
  EXPECT_TRUE(texts[0] == "yes" || texts[0] == "no") << p.out;
  EXPECT_TRUE(texts[1] == "1" || texts[1] == "2") << p.out;
  const nlohmann::ordered_json object = nlohmann::ordered_json::parse(texts[2], nullptr, false);
  ASSERT_TRUE(object.is_object()) << p.out;
  EXPECT_EQ(object.dump(), R"({"zeta":1,"alpha":2})") << p.out;
  CliResult pb = RunRotor({"generate", "-m", BundledModel(), "--prompts", dir.File("bad.jsonl")});
  EXPECT_NE(pb.exit_code, 0);
  EXPECT_THAT(pb.err, HasSubstr("--prompts line 1: grammar: grammar: line 1"));
  // A field of the wrong type or range is named with what is wrong with it.
  const std::pair<const char*, const char*> bad_lines[] = {
      {R"({"prompt": "z", "n_predict": "5"})", R"(field "n_predict": must be an integer, not a string)"},
      {R"({"prompt": "z", "n_predict": 99999999999})",
       R"(field "n_predict": 99999999999 is out of range [-1, 2147483647])"},
      {R"({"prompt": "z", "n_predict": 5.5})", R"(field "n_predict": must be an integer, not 5.5)"},
      {R"({"prompt": "z", "stop": 5})", R"(field "stop": must be a string or an array of strings)"},
      {R"({"prompt": "z", "seed": -2})", R"(field "seed": must be an integer in [0, 2^64 - 1])"},
      {R"({"prompt": "z", "seed": 1.5})", R"(field "seed": must be an integer in [0, 2^64 - 1])"},
      {R"({"prompt": 5})", R"(field "prompt" must be a string, not 5)"},
      {R"({"prompt": "z", "temperature": 1e309})", "not valid JSON: number overflow"},
  };
  for (const auto& [line, message] : bad_lines) {
    std::ofstream(dir.File("bad.jsonl")) << line << "\n";
    CliResult r = RunRotor({"generate", "-m", BundledModel(), "--prompts", dir.File("bad.jsonl")});
    EXPECT_NE(r.exit_code, 0) << line;
    EXPECT_THAT(r.err, HasSubstr(std::string("--prompts line 1: ") + message)) << line;
  }
}

// --prompts FILE --parallel P: plain and JSONL lines with their own options,
// one JSON line per prompt; greedy text the same as each prompt alone.
TEST(GenerateCliTest, PromptsFileInParallelEqualsEachAlone) {
  TempDir dir;
  const std::string file = dir.File("prompts.txt");
  {
    std::ofstream out(file);
    out << "Once upon a time\n"
        << R"({"prompt": "Lily had a dog", "n_predict": 12, "kv": "sink", "kv_size": 24, "kv_type": "f16"})"
        << "\n"
        << R"({"prompt": "The sun", "n_predict": 20, "rope_k": "deferred", "kv_type": "f32"})"
        << "\n";
  }
  CliResult r = RunRotor({"generate", "-m", BundledModel(), "--prompts", file, "--parallel", "3",
                          "-n", "16", "--temp", "0", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, Json> by_id;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const Json j = Json::parse(line);
    by_id[j["id"].get<int>()] = j;
  }
  ASSERT_EQ(by_id.size(), 3u) << r.out;
  EXPECT_EQ(by_id[0]["tokens"].size(), 16u);
  EXPECT_EQ(by_id[1]["tokens"].size(), 12u);
  EXPECT_EQ(by_id[2]["tokens"].size(), 20u);
  const std::vector<std::vector<std::string>> alone = {
      {"-p", "Once upon a time", "-n", "16"},
      {"-p", "Lily had a dog", "-n", "12", "--kv", "sink", "--kv-size", "24", "--kv-type", "f16"},
      {"-p", "The sun", "-n", "20", "--rope-k", "deferred"}};
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args = {"generate", "-m", BundledModel(), "--temp", "0", "-t", "2"};
    args.insert(args.end(), alone[i].begin(), alone[i].end());
    CliResult one = RunRotor(args);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(alone[i][1] + by_id[i]["text"].get<std::string>() + "\n", one.out) << "prompt " << i;
  }
  std::ofstream(file) << R"({"prompt": "x", "kv_type": "q4_1"})"
                      << "\n";
  CliResult bad = RunRotor({"generate", "-m", BundledModel(), "--prompts", file});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("line 1"));
  EXPECT_THAT(bad.err, HasSubstr("q4_1"));
}

// Prompts that start alike share their K/V blocks (one computes, the others
// wait for it and reuse), under a --kv-memory budget; the text is the same
// with --no-prefix-cache.
TEST(GenerateCliTest, PromptsSharingAPrefixReuseItsBlocks) {
  TempDir dir;
  const std::string file = dir.File("prompts.txt");
  const std::string common =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day,";
  std::ofstream(file) << common << " she saw a bird.\n"
                      << common << " her mom said\n"
                      << common << " the sun was hot.\n";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "generate", "-m", BundledModel(), "--prompts", file,          "--parallel", "3", "-n", "12",
        "--temp",   "0",  "-t",           "2",         "--kv-memory", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = RunRotor(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<int, Json> by_id;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const Json j = Json::parse(line);
      by_id[j["id"].get<int>()] = j;
    }
    return by_id;
  };
  std::map<int, Json> on = run({}), off = run({"--no-prefix-cache"});
  ASSERT_EQ(on.size(), 3u);
  ASSERT_EQ(off.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(on[i]["text"], off[i]["text"]) << i;
    EXPECT_EQ(off[i]["cached_tokens"], 0);
    // The common text is two whole blocks and a part of a third.
    EXPECT_EQ(on[i]["cached_tokens"].get<int>(), i == 0 ? 0 : 32) << i;
  }
  CliResult bad = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--kv-memory", "12x"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--kv-memory 12x"));
}

TEST(GenerateCliTest, NegativeTokenCount) {
  CliResult r = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "-n", "-5"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("-5"));
  EXPECT_THAT(r.err, HasSubstr("--n-predict"));
}

TEST(GenerateCliTest, PromptLongerThanTheContext) {
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += "Once upon a time there was a little girl. ";
  CliResult r = RunRotor({"generate", "-m", BundledModel(), "-c", "16", "-p", prompt});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("context size 16"));
}

}  // namespace
}  // namespace rotor::testing
