// rotor generate --prompt-cache / --prompt-cache-ro end to end: the first run
// writes the prompt's whole blocks, a later run whose prompt starts with them
// restores them and prints the same text as a run without the file; a file
// it cannot use (another K/V type, truncated) is a warning, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with "
    "her red ball. One day she saw a big dog";

CliResult Generate(const std::string& prompt, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"generate", "-m", BundledModel(), "-p", prompt, "-n", "24",
                                   "--temp",   "0",  "-t",           "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunRotor(args);
}

TEST(PromptCacheCli, SecondRunRestoresThePromptAndPrintsTheSameText) {
  TempDir dir;
  const std::string file = dir.File("prompt.kv");
  const CliResult plain = Generate(kStory);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;

  const CliResult first = Generate(kStory, {"--prompt-cache", file});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, plain.out);
  EXPECT_THAT(first.err, HasSubstr("no such file yet"));
  EXPECT_THAT(first.err, HasSubstr("saved 32 prompt tokens"));  // 41 tokens: two whole blocks
  ASSERT_TRUE(std::filesystem::exists(file));

  const CliResult second = Generate(kStory, {"--prompt-cache", file});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, plain.out);
  EXPECT_THAT(second.err, HasSubstr("32 prompt tokens restored, 9 computed"));
  EXPECT_THAT(second.err, Not(HasSubstr("saved")));  // nothing new to write

  // A longer prompt that starts the same way takes the file's blocks, and
  // the file then holds its whole blocks.
  const std::string longer = kStory + " under a tree. The dog was very friendly and wagged";
  const CliResult plain_longer = Generate(longer);
  const CliResult third = Generate(longer, {"--prompt-cache", file});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(third.out, plain_longer.out);
  EXPECT_THAT(third.err, HasSubstr("32 prompt tokens restored"));
  EXPECT_THAT(third.err, HasSubstr("saved 48 prompt tokens"));
}

TEST(PromptCacheCli, ReadOnlyNeverWrites) {
  TempDir dir;
  const std::string file = dir.File("ro.kv");
  CliResult r = Generate(kStory, {"--prompt-cache", file, "--prompt-cache-ro"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(file));
  ASSERT_EQ(Generate(kStory, {"--prompt-cache", file}).exit_code, 0);
  const auto size = std::filesystem::file_size(file);
  const std::string longer = kStory + " under a tree. The dog was very friendly and wagged";
  r = Generate(longer, {"--prompt-cache", file, "--prompt-cache-ro"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("32 prompt tokens restored"));
  EXPECT_EQ(std::filesystem::file_size(file), size);
  r = RunRotor({"generate", "-m", BundledModel(), "-p", "hi", "--prompt-cache-ro"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--prompt-cache"));
}

TEST(PromptCacheCli, AFileItCannotUseIsAWarningAndThePromptIsComputed) {
  TempDir dir;
  const std::string file = dir.File("f16.kv");
  const CliResult plain = Generate(kStory);
  ASSERT_EQ(Generate(kStory, {"--prompt-cache", file, "--kv-type", "q8_0"}).exit_code, 0);
  CliResult r = Generate(kStory, {"--prompt-cache", file, "--prompt-cache-ro"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: kv file " + file + ": K/V type (kv_type) q8_0"));
  EXPECT_THAT(r.err, HasSubstr("computing the whole prompt"));
  EXPECT_EQ(r.out, plain.out);

  // Truncated, then garbage: warnings; the file is written anew after the run.
  const std::string cut = dir.File("cut.kv");
  ASSERT_EQ(Generate(kStory, {"--prompt-cache", cut}).exit_code, 0);
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
  r = Generate(kStory, {"--prompt-cache", cut});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("truncated"));
  EXPECT_EQ(r.out, plain.out);
  EXPECT_THAT(r.err, HasSubstr("saved 32 prompt tokens"));
  std::ofstream(cut, std::ios::binary) << std::string(100, 'x');
  r = Generate(kStory, {"--prompt-cache", cut, "--prompt-cache-ro"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not a rotor KV file"));

  // A policy that does not share prefixes cannot use one at all.
  r = Generate(kStory, {"--prompt-cache", file, "--kv", "h2o", "--kv-size", "64"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("the h2o cache does not share prefixes"));
}

// A prompt longer than a sink's cells: its first whole blocks are saved (in
// one chunk the ring evicted them before they were committed, and every run
// said "saved 0 prompt tokens"), and a run that restores them prints what an
// uninterrupted run with the same cut prints.
TEST(PromptCacheCli, ARingSavesTheBlocksItHoldsOfALongerPrompt) {
  TempDir dir;
  const std::string file = dir.File("ring.kv");
  const std::vector<std::string> sink = {"--kv", "sink", "--kv-size", "32"};
  std::vector<std::string> cached = sink;
  cached.insert(cached.end(), {"--prompt-cache", file});
  std::vector<std::string> cut = sink;
  cut.insert(cut.end(), {"--prefill-step", "32"});
  const CliResult plain = Generate(kStory, cut);  // 41 tokens
  const CliResult first = Generate(kStory, cached);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.err, HasSubstr("saved 32 prompt tokens"));
  EXPECT_EQ(first.out, plain.out);
  const CliResult second = Generate(kStory, cached);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("32 prompt tokens restored, 9 computed"));
  EXPECT_THAT(second.err, Not(HasSubstr("saved")));  // nothing more a 32-cell ring can hold
  EXPECT_EQ(second.out, plain.out);
}

}  // namespace
}  // namespace rotor::testing
