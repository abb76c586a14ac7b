#include "tokenizer/vocab.h"

#include <gtest/gtest.h>

#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace rotor {
namespace {

using testing::TinyVocab;

// A GGUF holding the tokenizer keys of TinyVocab({"a", "b"}); tests edit it.
GgufWriter TinyGguf() {
  Vocab v = TinyVocab({{"a", -1.0f}, {"b", -2.0f}});
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w.SetF32Array("tokenizer.ggml.scores", v.scores);
  std::vector<int32_t> types;
  for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
  w.SetI32Array("tokenizer.ggml.token_type", types);
  w.SetU32("tokenizer.ggml.bos_token_id", 1);
  w.SetU32("tokenizer.ggml.eos_token_id", 2);
  w.SetU32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

Result<Vocab> Read(const GgufWriter& w) {
  Result<std::vector<uint8_t>> bytes = w.WriteToBytes();
  if (!bytes.ok()) return bytes.status();
  ASSIGN_OR_RETURN(auto file, GgufFile::FromBytes(std::move(bytes).value()));
  return VocabFromGguf(*file);
}

// The error message of `r`, which must be an error.
template <typename T>
std::string ErrorOf(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  return r.message();
}

TEST(Vocab, ReadsGgufKeysWithDefaults) {
  Result<Vocab> v = Read(TinyGguf());
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->tokens.size(), 261u);
  EXPECT_EQ(v->tokens[259], "a");
  EXPECT_EQ(v->scores[260], -2.0f);
  EXPECT_EQ(v->types[1], TokenType::kControl);
  EXPECT_EQ(v->types[3], TokenType::kByte);
  EXPECT_EQ(v->bos, 1);
  EXPECT_EQ(v->eos, 2);
  EXPECT_EQ(v->unk, 0);
  EXPECT_EQ(v->pad, -1);
  EXPECT_EQ(v->eot, -1);
  EXPECT_TRUE(v->add_bos);
  EXPECT_FALSE(v->add_eos);
  EXPECT_TRUE(v->add_space_prefix);
}

TEST(Vocab, ReadsFlagsAndOptionalIds) {
  GgufWriter w = TinyGguf();
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  w.SetBool("tokenizer.ggml.add_eos_token", true);
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  w.SetU32("tokenizer.ggml.padding_token_id", 0);
  w.SetU32("tokenizer.ggml.eot_token_id", 2);
  Result<Vocab> v = Read(w);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_FALSE(v->add_bos);
  EXPECT_TRUE(v->add_eos);
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_EQ(v->pad, 0);
  EXPECT_EQ(v->eot, 2);
}

TEST(Vocab, ScoresAndTypesAreOptional) {
  GgufWriter w = TinyGguf();
  w.Remove("tokenizer.ggml.scores");
  w.Remove("tokenizer.ggml.token_type");
  Result<Vocab> v = Read(w);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_TRUE(v->scores.empty());
  EXPECT_TRUE(v->types.empty());
}

TEST(Vocab, UnsupportedModelIsAnError) {
  GgufWriter w = TinyGguf();
  w.SetString("tokenizer.ggml.model", "bert");
  std::string msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.model 'bert' is not supported (supported: 'llama', 'gpt2')"),
            std::string::npos)
      << msg;
  w.Remove("tokenizer.ggml.model");
  msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("missing key tokenizer.ggml.model"), std::string::npos) << msg;
}

TEST(Vocab, MismatchedArrayLengths) {
  GgufWriter w = TinyGguf();
  std::vector<float> scores(100, 0.0f);
  w.SetF32Array("tokenizer.ggml.scores", scores);
  std::string msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.scores has 100 entries but tokenizer.ggml.tokens has 261"),
            std::string::npos)
      << msg;

  w = TinyGguf();
  std::vector<int32_t> types(262, 1);
  w.SetI32Array("tokenizer.ggml.token_type", types);
  msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.token_type has 262 entries"), std::string::npos) << msg;
}

TEST(Vocab, SpecialIdOutOfRange) {
  GgufWriter w = TinyGguf();
  w.SetU32("tokenizer.ggml.bos_token_id", 261);
  std::string msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.bos_token_id = 261 is out of range (n_vocab 261)"),
            std::string::npos)
      << msg;
  w = TinyGguf();
  w.SetU32("tokenizer.ggml.eos_token_id", 1000000);
  EXPECT_NE(ErrorOf(Read(w)).find("eos_token_id = 1000000"), std::string::npos);
  // A padding id past the end is dropped with a warning, as llama.cpp does.
  w = TinyGguf();
  w.SetU32("tokenizer.ggml.padding_token_id", 261);
  Result<Vocab> v = Read(w);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_EQ(v->pad, -1);
}

TEST(Vocab, MinusOneMeansNoToken) {
  GgufWriter w = TinyGguf();
  w.SetU32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // as in stories260K
  w.SetI32("tokenizer.ggml.eot_token_id", -1);
  w.SetU32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);  // llama.cpp keeps the default
  Result<Vocab> v = Read(w);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_EQ(v->pad, -1);
  EXPECT_EQ(v->eot, -1);
  EXPECT_EQ(v->bos, 1);
}

TEST(Vocab, BadTokenTypes) {
  GgufWriter w = TinyGguf();
  std::vector<int32_t> types(261, 1);
  types[7] = 9;
  w.SetI32Array("tokenizer.ggml.token_type", types);
  std::string msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.token_type[7] = 9 is not a token type"), std::string::npos)
      << msg;
  types[7] = 6;    // byte, but the text is "<0x04>": fine
  types[259] = 6;  // byte, but the text is "a"
  w.SetI32Array("tokenizer.ggml.token_type", types);
  msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("token 259 'a' has type byte"), std::string::npos) << msg;
}

TEST(Vocab, WrongValueTypes) {
  GgufWriter w = TinyGguf();
  w.SetU32("tokenizer.ggml.tokens", 5);
  std::string msg = ErrorOf(Read(w));
  EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("tokenizer: ", 0), 0u) << msg;
  w = TinyGguf();
  w.Remove("tokenizer.ggml.tokens");
  EXPECT_NE(ErrorOf(Read(w)).find("missing key tokenizer.ggml.tokens"), std::string::npos);
}

TEST(Vocab, ValidateInMemory) {
  Vocab v = TinyVocab({{"a", 0}});
  EXPECT_TRUE(ValidateVocab(v).ok());
  Vocab bad = v;
  bad.scores.pop_back();
  EXPECT_NE(ValidateVocab(bad).message().find("tokenizer.ggml.scores has 259 entries"),
            std::string::npos);
  bad = v;
  bad.bos = 260;
  EXPECT_EQ(ValidateVocab(bad).message(), "tokenizer: bos id 260 is out of range (n_vocab 260)");
  bad = v;
  bad.model = "t5";
  EXPECT_NE(ValidateVocab(bad).message().find("'t5' is not supported"), std::string::npos);
  bad = v;
  bad.model = "gpt2";
  bad.pre = "llama-bpe";
  EXPECT_TRUE(ValidateVocab(bad).ok());
  bad.pre = "no-such-pre";
  EXPECT_NE(ValidateVocab(bad).message().find("tokenizer.ggml.pre 'no-such-pre' is not supported"),
            std::string::npos);
  bad = v;
  bad.tokens.clear();
  bad.scores.clear();
  bad.types.clear();
  EXPECT_FALSE(ValidateVocab(bad).ok());
}

TEST(Vocab, ParseByteToken) {
  EXPECT_EQ(ParseByteToken("<0x0A>"), 10);
  EXPECT_EQ(ParseByteToken("<0xff>"), 255);
  EXPECT_EQ(ParseByteToken("<0xG0>"), -1);
  EXPECT_EQ(ParseByteToken("0x0A"), -1);
}

TEST(Vocab, TokenIndexLastDuplicateWins) {
  TokenIndex index({"a", "b", "a"});
  EXPECT_EQ(index.Find("a"), 2);
  EXPECT_EQ(index.Find("b"), 1);
  EXPECT_EQ(index.Find("c"), -1);
}

}  // namespace
}  // namespace rotor
