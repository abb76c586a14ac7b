#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "test_util.h"

namespace rotor {
namespace {

using testing::LlamaSpm;
using testing::Stories260K;

TEST(Tokenizer, Stories260KOnceUponATime) {
  const Tokenizer* tok = Stories260K();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->Encode("Once upon a time", true), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->Encode("Once upon a time", false), (std::vector<int32_t>{403, 407, 261, 378}));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 403, 407, 261, 378}), "Once upon a time");
}

// The reference greedy continuation (llama2.c, cross-checked with llama.cpp)
// decodes to the text llama2.c printed.
TEST(Tokenizer, Stories260KDecodesReferenceText) {
  const Tokenizer* tok = Stories260K();
  ASSERT_NE(tok, nullptr);
  std::istringstream in(testing::ReadFileBytes(std::string(ROTOR_TESTDATA_DIR) +
                                               "/stories260K-greedy-once-upon-a-time.ids"));
  std::vector<int32_t> ids = {1};
  for (int32_t id; in >> id;) ids.push_back(id);
  ASSERT_EQ(ids.size(), 201u);
  const std::string want = testing::ReadFileBytes(std::string(ROTOR_TESTDATA_DIR) +
                                                  "/stories260K-greedy-once-upon-a-time.txt");
  std::string got = tok->Decode(ids);
  EXPECT_EQ(got + "\n", want);

  StreamDecoder stream(*tok, /*strip_leading_space=*/true);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  EXPECT_EQ(streamed, got);
}

TEST(Tokenizer, LlamaSpmProperties) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->unk(), 0);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_EQ(tok->model_name(), "llama");
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
  EXPECT_FALSE(tok->IsEndOfGeneration(1));
  EXPECT_FALSE(tok->IsEndOfGeneration(-1));
  EXPECT_TRUE(tok->IsControl(1));
  EXPECT_TRUE(tok->IsControl(2));
  EXPECT_FALSE(tok->IsControl(0));  // <unk> is type unknown
  EXPECT_FALSE(tok->IsControl(15043));
  EXPECT_FALSE(tok->IsControl(32000));
  EXPECT_EQ(tok->Type(13), TokenType::kByte);
  EXPECT_EQ(tok->TokenText(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(tok->TokenId("\xE2\x96\x81Hello"), 15043);
  EXPECT_EQ(tok->TokenId("no such token"), -1);
  EXPECT_LT(tok->Score(15043), 0.0f);
}

TEST(Tokenizer, TokenToPiece) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->TokenToPiece(15043), " Hello");
  EXPECT_EQ(tok->TokenToPiece(13), "\n");          // <0x0A>
  EXPECT_EQ(tok->TokenToPiece(3 + 0xF0), "\xF0");  // a lone byte
  EXPECT_EQ(tok->TokenToPiece(1), "");             // control
  EXPECT_EQ(tok->TokenToPiece(0), "");             // unknown
  EXPECT_EQ(tok->TokenToPiece(1, /*special=*/true), "<s>");
  EXPECT_EQ(tok->TokenToPiece(0, /*special=*/true), "<unk>");
  EXPECT_EQ(tok->TokenToPiece(-1), "");
  EXPECT_EQ(tok->TokenToPiece(32000), "");
}

TEST(Tokenizer, DecodeConventions) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> hello = {15043, 3186};  // "▁Hello", "▁world"
  EXPECT_EQ(tok->Decode(hello), "Hello world");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 15043, 3186, 2}, /*special=*/true),
            "<s> Hello world</s>");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{3186}), "world");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{29871, 3186}), " world");  // only one space goes
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{-5, 99999, 15043}), "Hello");
}

TEST(Tokenizer, ParseSpecial) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  // A special token starts a new fragment, which gets the space prefix again.
  EXPECT_EQ(tok->Encode("<s>Hello</s>", false, /*parse_special=*/true),
            (std::vector<int32_t>{1, 15043, 2}));
  EXPECT_EQ(tok->Encode("Hello<s>world", true, /*parse_special=*/true),
            (std::vector<int32_t>{1, 15043, 1, 3186}));
  // Without parse_special the text is ordinary text.
  std::vector<int32_t> plain = tok->Encode("<s>Hello</s>", false);
  for (int32_t id : plain) {
    EXPECT_FALSE(tok->IsControl(id)) << id;
  }
  EXPECT_EQ(tok->Decode(plain), "<s>Hello</s>");
}

// Piece by piece (chat turns): specials are parsed only where allowed, plain
// text runs across pieces as one text, and a continuation gets no space prefix
// unless it follows a special token.
TEST(Tokenizer, EncodeAppendPieces) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  using P = Tokenizer::TextPiece;
  std::vector<int32_t> ids;
  const std::vector<P> pieces = {{"[INST] ", true}, {"Hello</s>", false}, {" [/INST]</s><s>", true}};
  EXPECT_TRUE(tok->EncodeAppend(pieces, /*after_special=*/true, &ids));
  // The same as the whole text with the user's "</s>" as plain text.
  const std::vector<int32_t> joined = tok->Encode("[INST] Hello</s> [/INST]", false);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end() - 2), joined);
  EXPECT_EQ(ids[ids.size() - 2], tok->eos());
  EXPECT_EQ(ids.back(), tok->bos());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->eos()), 1);
  // Plain text across pieces is tokenized as one run ("▁Hello" stays whole).
  std::vector<int32_t> split;
  tok->EncodeAppend(std::vector<P>{{"Hel", true}, {"lo", false}}, true, &split);
  EXPECT_EQ(split, tok->Encode("Hello", false));
  // A continuation: no "▁world".
  std::vector<int32_t> cont;
  EXPECT_FALSE(tok->EncodeAppend(std::vector<P>{{"world", false}}, /*after_special=*/false, &cont));
  EXPECT_NE(cont, tok->Encode("world", false));
  EXPECT_EQ(tok->Decode(cont), "world");
  EXPECT_TRUE(tok->EncodeAppend(std::vector<P>{}, true, &cont));
}

TEST(Tokenizer, UserDefinedTokensAreAlwaysWhole) {
  Vocab v = testing::TinyVocab({{"\xE2\x96\x81", -1}, {"a", -1}, {"b", -1}, {"<tool>", 0}});
  v.types.back() = TokenType::kUserDefined;
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  const int32_t sp = testing::kTinyFirstNormal, a = sp + 1, b = sp + 2, tool = sp + 3;
  EXPECT_EQ(tok->Encode("a<tool>b", false), (std::vector<int32_t>{sp, a, tool, sp, b}));
  EXPECT_EQ(tok->Decode(tok->Encode("a<tool>b", false)), "a<tool> b");
  EXPECT_EQ(tok->TokenToPiece(tool), "<tool>");
}

TEST(Tokenizer, AddSpecialHonoursVocabFlags) {
  Vocab v = testing::TinyVocab({{"\xE2\x96\x81", -1}, {"a", -1}});
  v.add_bos = false;
  v.add_eos = true;
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  const int32_t sp = testing::kTinyFirstNormal;
  EXPECT_EQ(tok->Encode("a", true), (std::vector<int32_t>{sp, sp + 1, 2}));
  EXPECT_EQ(tok->Encode("a", false), (std::vector<int32_t>{sp, sp + 1}));
  EXPECT_EQ(tok->Encode("", true), (std::vector<int32_t>{2}));

  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = false;
  tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("a", true), (std::vector<int32_t>{1, sp + 1}));
  EXPECT_EQ(tok->Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{sp, sp + 1}), " a");  // nothing to strip
}

TEST(Tokenizer, EmptyTokenTextsAreRenamed) {
  Vocab v = testing::TinyVocab({{"", -1}, {"a", -1}});
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->TokenText(testing::kTinyFirstNormal), "[EMPTY_259]");
}

}  // namespace
}  // namespace rotor
