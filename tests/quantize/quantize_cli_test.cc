// rotor quantize end to end: progress and summary, the quantized model
// generates, the errors a user meets, and rotor synth --type with a mix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../cli/run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;

TEST(QuantizeCliTest, QuantizesReportsAndGenerates) {
  TempDir dir;
  const std::string out = dir.File("q8.gguf");
  CliResult r = RunRotor({"quantize", BundledModel(), out, "Q8_0", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[   1/48] token_embd.weight"));
  EXPECT_THAT(r.err, HasSubstr("f32 -> q8_0"));
  EXPECT_THAT(r.err, HasSubstr("blk.0.ffn_down.weight"));
  EXPECT_THAT(r.err,
              HasSubstr("f32 -> f16 (fallback: row 172 is not a multiple of the q8_0 block)"));
  EXPECT_THAT(r.err, HasSubstr("output_norm.weight"));
  EXPECT_THAT(r.err, HasSubstr("f32 (copied)"));
  EXPECT_THAT(r.err, HasSubstr("rotor: quantized " + BundledModel() + " (1.13 MiB) -> " + out));
  EXPECT_THAT(r.err, HasSubstr("q8_0) in "));
  EXPECT_THAT(r.err, HasSubstr("37 tensors converted, 11 copied, 5 fallbacks"));
  EXPECT_TRUE(r.out.empty()) << r.out;
  CliResult gen = RunRotor(
      {"generate", "-m", out, "-p", "Once upon a time", "-n", "16", "--temp", "0", "-t", "2"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out.rfind("Once upon a time", 0), 0u) << gen.out;
  EXPECT_GT(gen.out.size(), std::string("Once upon a time ").size());
  CliResult info = RunRotor({"info", out});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("general.quantization_version"));
}

TEST(QuantizeCliTest, UnknownTypeListsTheValidOnes) {
  TempDir dir;
  CliResult r = RunRotor({"quantize", BundledModel(), dir.File("x.gguf"), "q9_X"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown type 'q9_X'"));
  EXPECT_THAT(r.err, HasSubstr("Q4_K_M"));
  EXPECT_THAT(r.err, HasSubstr("iq4_nl"));
}

TEST(QuantizeCliTest, InputAndOutputErrors) {
  TempDir dir;
  CliResult missing = RunRotor({"quantize", "/nonexistent/in.gguf", dir.File("x.gguf"), "q8_0"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("'/nonexistent/in.gguf' does not exist"));
  CliResult text = RunRotor(
      {"quantize", ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt", dir.File("x.gguf"), "q8_0"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_THAT(text.err, HasSubstr("not a valid GGUF file"));
  CliResult out = RunRotor({"quantize", BundledModel(), "/nonexistent/dir/x.gguf", "q8_0"});
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_THAT(out.err, HasSubstr("output '/nonexistent/dir/x.gguf'"));
  CliResult usage = RunRotor({"quantize", BundledModel()});
  EXPECT_NE(usage.exit_code, 0);
  EXPECT_THAT(usage.err, HasSubstr("output"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.gguf")));
}

TEST(QuantizeCliTest, RequantizeNeedsTheFlag) {
  TempDir dir;
  ASSERT_EQ(RunRotor({"quantize", BundledModel(), dir.File("q8.gguf"), "q8_0", "-q"}).exit_code, 0);
  CliResult r = RunRotor({"quantize", dir.File("q8.gguf"), dir.File("q4.gguf"), "q4_0", "-q"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--allow-requantize"));
  CliResult ok = RunRotor(
      {"quantize", dir.File("q8.gguf"), dir.File("q4.gguf"), "q4_0", "--allow-requantize", "-q"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.err, ::testing::Not(HasSubstr("[   1/")));  // -q
}

TEST(QuantizeCliTest, LeaveOutputAndPure) {
  TempDir dir;
  CliResult r =
      RunRotor({"quantize", BundledModel(), dir.File("a.gguf"), "q4_0", "--leave-output"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("output.weight"));
  CliResult info = RunRotor({"info", dir.File("a.gguf")});
  EXPECT_THAT(info.out, ::testing::ContainsRegex("output.weight +f32"));
  r = RunRotor({"quantize", BundledModel(), dir.File("b.gguf"), "q4_0", "--pure", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  info = RunRotor({"info", dir.File("b.gguf")});
  EXPECT_THAT(info.out, ::testing::ContainsRegex("output.weight +q4_0"));
  r = RunRotor({"quantize", BundledModel(), dir.File("c.gguf"), "q4_0", "-q"});
  info = RunRotor({"info", dir.File("c.gguf")});
  EXPECT_THAT(info.out,
              ::testing::ContainsRegex("output.weight +q8_0"));  // q6_K rule, 64-wide rows
}

TEST(QuantizeCliTest, SynthWritesAMix) {
  TempDir dir;
  // A mix (not a plain type, which synth writes directly): f32, then quantize.
  const std::string model = dir.File("s15m-q4km.gguf");
  CliResult r = RunRotor({"synth", "-o", model, "--shape", "stories15m", "--layers", "1", "--ffn",
                          "800", "--type", "Q4_K_M", "--vocab-file", LlamaVocab(), "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("Q4_K_M"));
  EXPECT_FALSE(std::filesystem::exists(model + ".f32.tmp"));
  CliResult info = RunRotor({"info", model});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, ::testing::ContainsRegex("general.file_type +u32 +15"));
  // Rows of 288 and 800 are not multiples of 256: q4_K falls back to q5_0,
  // q6_K (attn_v, ffn_down and output in Q4_K_M) to q8_0.
  EXPECT_THAT(info.out, ::testing::ContainsRegex("blk.0.attn_q.weight +q5_0"));
  EXPECT_THAT(info.out, ::testing::ContainsRegex("blk.0.attn_v.weight +q8_0"));
  CliResult gen = RunRotor({"generate", "-m", model, "-p", "Hello", "-n", "4", "-t", "2"});
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  CliResult bad = RunRotor({"synth", "-o", dir.File("x.gguf"), "--type", "q7"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("Q4_K_M"));
}

}  // namespace
}  // namespace rotor::testing
