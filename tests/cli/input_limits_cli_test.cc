// What a file or a number from the user cannot do to `rotor generate`: input
// files must be regular files of bounded size (-f /dev/zero, -f DIR), and a
// model declaring an absurd context_length runs with a small -c (the K/V cache
// grows with the tokens) and, without -c, with a capped context and a note.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;

TEST(InputLimitsCli, PromptFileFromADeviceIsRefused) {
  CliResult r = RunRotor({"generate", "-f", "/dev/zero", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/dev/zero"));
  EXPECT_THAT(r.err, HasSubstr("not a regular file"));
}

TEST(InputLimitsCli, PromptFileThatIsADirectoryIsRefused) {
  TempDir dir;
  CliResult r = RunRotor({"generate", "-f", dir.path().string(), "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is a directory"));
}

TEST(InputLimitsCli, PromptsFileFromADeviceIsRefused) {
  CliResult r = RunRotor({"generate", "--prompts", "/dev/zero", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not a regular file"));
}

// The bundled model, its context_length replaced by `n_ctx`.
std::string WithContextLength(const TempDir& dir, uint32_t n_ctx) {
  auto src = GgufFile::Open(BundledModel());
  EXPECT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.CopyMetadata(**src);
  w.SetU32("llama.context_length", n_ctx);
  for (const GgufTensor& t : (*src)->tensors())
    EXPECT_TRUE(w.AddTensorView(t.name, t.type, t.ne, t.data, t.n_bytes).ok());
  const std::string path = dir.File("ctx" + std::to_string(n_ctx) + ".gguf");
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

TEST(InputLimitsCli, AbsurdContextLengthRunsWithASmallContext) {
  TempDir dir;
  for (uint32_t n_ctx : {1u << 20, 1u << 24}) {
    const std::string model = WithContextLength(dir, n_ctx);
    CliResult r = RunRotor({"generate", "-m", model, "-p", "Once upon a time", "-n", "8",
                            "--temp", "0", "-c", "256", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << n_ctx << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("Once upon a time"));
    // The whole run of the 260K-parameter model, whatever it declares: far below
    // the 1.28 GiB the 1,048,576 tokens once took before the first token.
    EXPECT_LT(r.max_rss_kib, 200 * 1024) << n_ctx;
  }
}

TEST(InputLimitsCli, AbsurdContextLengthWithoutCIsCappedWithANote) {
  TempDir dir;
  const std::string model = WithContextLength(dir, 1u << 24);
  CliResult r = RunRotor({"generate", "-m", model, "-p", "Once upon a time", "-n", "8",
                          "--temp", "0", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Once upon a time"));
  EXPECT_THAT(r.err, HasSubstr("declares a context of 16777216 tokens; using 131072"));
  EXPECT_THAT(r.err, HasSubstr("-c"));
  // 16,777,216 as the context took 233 MiB of per-context tables before any token.
  EXPECT_LT(r.max_rss_kib, 100 * 1024);
}

}  // namespace
}  // namespace rotor::testing
