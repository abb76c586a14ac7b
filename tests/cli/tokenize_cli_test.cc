// rotor tokenize on vocabulary-only GGUF files (no tensors), and --special in
// rotor tokenize and rotor generate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Gpt2Vocab() { return std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf"; }

TEST(TokenizeCliTest, Gpt2VocabOnlyFile) {
  CliResult r = RunRotor({"tokenize", "-m", Gpt2Vocab(), "-p", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[15496, 995]\n");  // no BOS: GPT-2 does not add one
  r = RunRotor({"tokenize", "-m", Gpt2Vocab(), "-p", " this is 🦙.cpp", "--pieces"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // llama.cpp's ids (ggml-vocab-gpt-2.gguf.out line 19); the emoji's four
  // bytes are spread over three tokens.
  EXPECT_EQ(r.out,
            "   428 -> ' this'\n"
            "   318 -> ' is'\n"
            " 12520 -> ' \\xf0\\x9f'\n"
            "    99 -> '\\xa6'\n"
            "   247 -> '\\x99'\n"
            "    13 -> '.'\n"
            " 20322 -> 'cpp'\n");
}

TEST(TokenizeCliTest, LlamaSpmVocabOnlyFile) {
  CliResult r = RunRotor({"tokenize", "-m", LlamaVocab(), "-p", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[1, 15043, 3186]\n");
  r = RunRotor({"tokenize", "-m", LlamaVocab(), "-p", "Hello world", "--no-bos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[15043, 3186]\n");
}

// --pieces escapes what is not printable: a newline, a control byte, and the
// bytes of a character the vocabulary spells with byte tokens.
TEST(TokenizeCliTest, PiecesEscapeNewlinesControlAndLoneBytes) {
  CliResult r = RunRotor({"tokenize", "-m", LlamaVocab(), "-p", "Hello\n\x1b\xf0\x9f\xa6\x99",
                          "--pieces"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("     1 -> '<s>'\n 15043 -> ' Hello'\n    13 -> '\\n'\n"));
  EXPECT_THAT(r.out, HasSubstr("    30 -> '\\x1b'\n"));
  EXPECT_THAT(r.out, HasSubstr("   243 -> '\\xf0'\n"));
  // detokenize puts the character back together.
  r = RunRotor({"detokenize", "-m", LlamaVocab(), "243", "162", "169", "156"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\xf0\x9f\xa6\x99\n");
}

TEST(TokenizeCliTest, SpecialTokensOnlyWithTheFlag) {
  CliResult plain = RunRotor({"tokenize", "-m", Gpt2Vocab(), "-p", "<|endoftext|>"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "[27, 91, 437, 1659, 5239, 91, 29]\n");
  CliResult special = RunRotor({"tokenize", "-m", Gpt2Vocab(), "-p", "<|endoftext|>", "--special"});
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out, "[50256]\n");

  CliResult spm = RunRotor({"tokenize", "-m", LlamaVocab(), "-p", "</s>", "--no-bos"});
  ASSERT_EQ(spm.exit_code, 0) << spm.err;
  EXPECT_THAT(spm.out, Not(HasSubstr("[2]")));
  spm = RunRotor({"tokenize", "-m", LlamaVocab(), "-p", "</s>", "--no-bos", "--special"});
  ASSERT_EQ(spm.exit_code, 0) << spm.err;
  EXPECT_EQ(spm.out, "[2]\n");
}

TEST(TokenizeCliTest, ShowsEndOfGenerationTokens) {
  CliResult r = RunRotor({"tokenize", "-m", Gpt2Vocab(), "-p", "x", "--show-eog"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(" 50256 -> '<|endoftext|>'"));
}

TEST(TokenizeCliTest, UnknownPreTokenizerIsNamed) {
  Result<std::unique_ptr<GgufFile>> src = GgufFile::Open(Gpt2Vocab());
  ASSERT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.CopyMetadata(**src);
  w.SetString("tokenizer.ggml.pre", "made-up-pre");
  TempDir dir;
  const std::string path = dir.File("bad-pre.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  CliResult r = RunRotor({"tokenize", "-m", path, "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("tokenizer.ggml.pre 'made-up-pre' is not supported"));
  EXPECT_THAT(r.err, HasSubstr("llama-bpe"));
}

// A random-weight model with GPT-2's BPE vocabulary: the prompt's special
// text is one token with --special and seven without.
TEST(TokenizeCliTest, GenerateParsesSpecialTokensWithTheFlag) {
  TempDir dir;
  const std::string model = dir.File("bpe.gguf");
  CliResult synth = RunRotor({"synth", "-o", model, "--shape", "stories15m", "--layers", "1",
                              "--type", "q8_0", "--vocab-file", Gpt2Vocab(), "-t", "2"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::vector<std::string> common = {"generate", "-m", model,    "-p", "<|endoftext|>Once",
                                           "-n",       "2",  "--temp", "0",  "--ignore-eos",
                                           "-t",       "2",  "-c",     "64"};
  CliResult plain = RunRotor(common);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.err, HasSubstr("prompt 8 tokens"));
  std::vector<std::string> with_flag = common;
  with_flag.push_back("--special");
  CliResult special = RunRotor(with_flag);
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_THAT(special.err, HasSubstr("prompt 2 tokens"));
}

}  // namespace
}  // namespace rotor::testing
