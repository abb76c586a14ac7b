#include "tokenizer/spm.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/utf8.h"

namespace rotor {
namespace {

using testing::kTinyFirstNormal;
using testing::LlamaSpm;
using testing::LoadVocabTestCases;
using testing::TinyVocab;
using testing::VocabTestCase;

const std::vector<VocabTestCase>& LlamaSpmCases() {
  static const auto* cases = new std::vector<VocabTestCase>(
      LoadVocabTestCases(std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-llama-spm.gguf"));
  return *cases;
}

TEST(SpmVectors, FileParsing) {
  const auto& cases = LlamaSpmCases();
  ASSERT_EQ(cases.size(), 46u);
  EXPECT_EQ(cases[0].text, "ied 4 \xC2\xBD months");
  EXPECT_EQ(cases[1].text, "F\xC3\xBChrer");
  EXPECT_EQ(cases[2].text, "");
  EXPECT_TRUE(cases[2].ids.empty());
  EXPECT_EQ(cases[3].text, " ");
  EXPECT_EQ(cases[7].text, "\n");
  EXPECT_EQ(cases[8].text, "\n\n");
  EXPECT_EQ(cases[10].text, "\t\n");
  EXPECT_EQ(cases[28].text, "    Hello\n    Hello");
  EXPECT_EQ(cases[28].ids, (std::vector<int32_t>{268, 15043, 13, 1678, 15043}));
  // The last string starts with newlines and ends without one.
  EXPECT_EQ(cases[45].text.substr(0, 4), "\n \n\n");
  EXPECT_EQ(cases[45].text.substr(cases[45].text.size() - 4), "a'lL");
  EXPECT_EQ(cases[45].ids.back(), 29931);
}

TEST(SpmVectors, EncodeMatchesLlamaCpp) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  int n = 0;
  for (const auto& c : LlamaSpmCases()) {
    EXPECT_EQ(tok->Encode(c.text, /*add_special=*/false), c.ids) << "text: '" << c.text << "'";
    ++n;
  }
  EXPECT_EQ(n, 46);
}

TEST(SpmVectors, EncodeWithBos) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  for (const auto& c : LlamaSpmCases()) {
    std::vector<int32_t> want = {1};
    want.insert(want.end(), c.ids.begin(), c.ids.end());
    EXPECT_EQ(tok->Encode(c.text, /*add_special=*/true), want) << "text: '" << c.text << "'";
  }
}

TEST(SpmVectors, DecodeRoundTrips) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  for (const auto& c : LlamaSpmCases()) {
    // The space prefix that Encode adds is removed again, with or without BOS.
    EXPECT_EQ(tok->Decode(c.ids), c.text);
    EXPECT_EQ(tok->Decode(tok->Encode(c.text, true)), c.text);
  }
}

TEST(Spm, HighestScoreMergesFirst) {
  // a=259 b=260 c=261 ab=262 bc=263
  const int32_t a = kTinyFirstNormal, c = a + 2, ab = a + 3, bc = a + 4;
  Vocab v = TinyVocab({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -2}});
  v.add_space_prefix = false;
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{a, bc}));
  v.add_space_prefix = true;  // "▁" has no token: three byte tokens, then "a" "bc"
  tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{3 + 0xE2, 3 + 0x96, 3 + 0x81, a, bc}));
  v.add_space_prefix = false;
  v.scores[ab] = -2;  // a tie: the leftmost pair wins
  tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{ab, c}));
  v.scores[ab] = -1;
  tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{ab, c}));
}

TEST(Spm, MergesNeedEveryIntermediateToken) {
  // "abc" is a token but neither "ab" nor "bc" is: SPM never reaches it.
  Vocab v = TinyVocab({{"a", -1}, {"b", -1}, {"c", -1}, {"abc", 0}});
  v.add_space_prefix = false;
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  const int32_t a = kTinyFirstNormal;
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{a, a + 1, a + 2}));
}

TEST(Spm, ByteFallbackKeepsCharactersWhole) {
  Vocab v = TinyVocab({{"\xE2\x96\x81", -1}, {"a", -1}, {"\xC3\xA9", -1}});
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  const int32_t sp = kTinyFirstNormal, a = sp + 1, e_acute = sp + 2;
  // U+00E9 has a token, U+4E2D does not: its three bytes fall back together.
  EXPECT_EQ(tok->Encode("a\xC3\xA9\xE4\xB8\xAD", false),
            (std::vector<int32_t>{sp, a, e_acute, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}));
  EXPECT_EQ(tok->Encode("a a", false), (std::vector<int32_t>{sp, a, sp, a}));
}

TEST(Spm, ByteFallbackWithoutByteTokensUsesUnk) {
  Vocab v;
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "x"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl, TokenType::kNormal,
             TokenType::kNormal};
  auto tok = std::move(Tokenizer::FromVocab(v)).value();
  EXPECT_EQ(tok->Encode("xy", false), (std::vector<int32_t>{3, 4, 0}));
}

TEST(Spm, InvalidUtf8DoesNotCrashAndRoundTrips) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> inputs = testing::InvalidUtf8Samples();
  for (const std::string& s : inputs) {
    std::vector<int32_t> ids = tok->Encode(s, true);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
    EXPECT_EQ(tok->Decode(ids), s);
  }
  // A lead byte without its continuation is a symbol of its own: "(" is
  // still a token (llama.cpp's split by lead byte takes "\xC3(" as one
  // symbol and falls back to the byte token of "(").
  const std::vector<int32_t> c3 = tok->Encode("\xC3(", false);
  ASSERT_EQ(c3.size(), 3u);
  EXPECT_EQ(c3[1], 3 + 0xC3);
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{c3[2]}), "(");
  EXPECT_GE(c3[2], 3 + 256);  // a piece, not the byte token <0x28>
}

bool IsValidUtf8(std::string_view s) {
  std::string out;
  return AppendValidUtf8(s, true, &out) == s.size() && out == s;
}

TEST(Spm, RandomTextRoundTrips) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> alphabet = {
      "a",        "e",    "t",    "h",    " ",   "  ",       "\n",           "\t",
      "The",      "ing",  "3",    ".",    "'",   "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\xA6\x99",
      "\xD0\xBF", "\xFF", "\x80", "\xE2", "<s>", "<0x41>"};
  std::mt19937 rng(1234);
  int checked = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    const std::vector<int32_t> ids = tok->Encode(s, iter % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
    EXPECT_EQ(tok->Decode(ids), s) << "iter " << iter;
    checked += IsValidUtf8(s) ? 0 : 1;
  }
  EXPECT_GT(checked, 100);  // invalid texts among them
}

TEST(Spm, InvalidByteKeepsTheSpaceAfterIt) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  // "\xFF a" is escaped to "▁\xFF▁a". Split by lead byte (llama.cpp), 0xFF
  // took the next three bytes, the escaped space, into its symbol, which fell
  // back to byte tokens: the text came back as "\xFF▁a". 0xFF is a symbol of
  // one byte now, and "▁a" a token.
  for (const char* text : {"\xFF a", "\xE2\x82 x", "\xC3 a b", "a\xFF b", "\x80 z", "\xF0\x9F "}) {
    const std::vector<int32_t> ids = tok->Encode(text, false);
    EXPECT_EQ(tok->Decode(ids), text) << ::testing::PrintToString(ids);
  }
  const std::vector<int32_t> ids = tok->Encode("\xFF a", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 3 + 0xFF);
  EXPECT_EQ(tok->TokenToPiece(ids[2]), " a");  // the token "▁a"
}

TEST(Spm, EscapeSpaces) {
  EXPECT_EQ(SpmModel::Escape("a b", false),
            "a\xE2\x96\x81"
            "b");
  EXPECT_EQ(SpmModel::Escape("", true), "\xE2\x96\x81");
  EXPECT_EQ(SpmModel::Escape("\t\n", false), "\t\n");  // only ' ' is escaped
}

}  // namespace
}  // namespace rotor
