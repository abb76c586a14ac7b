// rotor synth + generate end to end, and the errors of rotor generate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;

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
