// The whole byte-level BPE path on synthetic vocabularies: GPT-2's tokens and
// merges with another tokenizer.ggml.pre and chat special tokens added (no
// Llama 3 or Qwen vocabulary file is available to the tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace rotor {
namespace {

using testing::Gpt2Based;
using testing::TokenizerFrom;

// GPT-2 ids.
constexpr int32_t kEndOfText = 50256;
constexpr int32_t kI = 40, kQuote = 6, kM = 44, kSpace = 220, k123 = 10163, k45 = 2231;

// Appended ids: 50257 and on, in this order.
constexpr int32_t kBegin = 50257, kEot = 50258, kEom = 50259, kImStart = 50260, kImEnd = 50261,
                  kTool = 50262, kZqxj = 50263, kEndTurn = 50264;

const std::vector<std::pair<std::string, TokenType>>& ChatTokens() {
  static const auto* tokens = new std::vector<std::pair<std::string, TokenType>>{
      {"<|begin_of_text|>", TokenType::kControl},
      {"<|eot_id|>", TokenType::kControl},
      {"<|eom_id|>", TokenType::kControl},
      {"<|im_start|>", TokenType::kControl},
      {"<|im_end|>", TokenType::kNormal},  // mistyped by a converter: made control
      {"<tool>", TokenType::kUserDefined},
      {"\xC4\xA0zqxj", TokenType::kNormal},  // " zqxj": a token no merge reaches
      {"<end_of_turn>", TokenType::kControl},
  };
  return *tokens;
}

std::unique_ptr<Tokenizer> Make(GgufWriter w) {
  Result<std::unique_ptr<Tokenizer>> tok = TokenizerFrom(w);
  EXPECT_TRUE(tok.ok()) << tok.message();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::unique_ptr<Tokenizer> Llama3Style() {
  GgufWriter w = Gpt2Based("llama-bpe", ChatTokens());
  w.SetU32("tokenizer.ggml.bos_token_id", kBegin);
  w.SetU32("tokenizer.ggml.eos_token_id", kEndOfText);
  return Make(std::move(w));
}

// Token boundaries include every word boundary: merges never cross words.
void ExpectTokensRespectWords(const Tokenizer& tok, const PreTokenizer& pre,
                              std::string_view text) {
  std::vector<size_t> token_ends;
  size_t pos = 0;
  for (int32_t id : tok.Encode(text, false)) {
    pos += tok.TokenToPiece(id).size();
    token_ends.push_back(pos);
  }
  EXPECT_EQ(pos, text.size()) << text;
  pos = 0;
  for (std::string_view w : pre.Split(text)) {
    pos += w.size();
    EXPECT_TRUE(std::find(token_ends.begin(), token_ends.end(), pos) != token_ends.end())
        << "a token crosses the word end at " << pos << " in '" << text << "'";
  }
}

TEST(BpeVocab, Llama3StyleSplitsNumbersAndContractions) {
  auto tok = Llama3Style();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->pre(), "llama-bpe");
  EXPECT_TRUE(tok->add_bos());  // llama-bpe's default without the key
  EXPECT_EQ(tok->bos(), kBegin);
  // GPT-2's pre-tokenizer keeps " 12345" whole and makes " 123" "45"; Llama 3
  // cuts "123" "45" from the space. "'M" is one word for Llama 3.
  EXPECT_EQ(tok->Encode("I'M 12345", true),
            (std::vector<int32_t>{kBegin, kI, kQuote, kM, kSpace, k123, k45}));
  EXPECT_EQ(tok->Decode(tok->Encode("I'M 12345", true)), "I'M 12345");
  Result<PreTokenizer> pre = PreTokenizer::Create("llama-bpe");
  ASSERT_TRUE(pre.ok());
  for (std::string_view text : {"I'm sure they'LL say 1234567 isn't 89.",
                                "Ünïcödé wörds, 你好世界 and 🦙🦙!\n\n  x  ",
                                "line1\r\n\tline2   \n", "don't DON'T Don'T 'tis"}) {
    ExpectTokensRespectWords(*tok, *pre, text);
    EXPECT_EQ(tok->Decode(tok->Encode(text, true)), text);
  }
}

// Random text with special-token texts and broken UTF-8 in it: with
// parse_special the specials come out as their ids and the rest round-trips;
// without it everything is plain text and round-trips.
TEST(BpeVocab, RandomTextRoundTripsWithAndWithoutSpecials) {
  for (std::string_view pre : {"llama-bpe", "qwen2", "smollm"}) {
    auto tok = Make(Gpt2Based(pre, ChatTokens()));
    ASSERT_NE(tok, nullptr);
    std::mt19937 rng(5);
    const std::vector<std::string> parts = {
        "<|eot_id|>", "<|im_start|>", "Hello", " world",   "'S",           "123456",
        "\n\n",       "  ",           "\t",    "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\xA6\x99",
        "\xFF",       "\xC3",         "<|",    "|>",       "zqxj"};
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) text += parts[rng() % parts.size()];
      const std::vector<int32_t> plain = tok->Encode(text, false);
      ASSERT_EQ(tok->Decode(plain), text) << pre;
      for (int32_t id : plain) ASSERT_FALSE(tok->IsControl(id)) << pre << ": " << text;
      const std::vector<int32_t> parsed = tok->Encode(text, false, /*parse_special=*/true);
      ASSERT_EQ(tok->Decode(parsed, /*special=*/true), text) << pre;
    }
  }
}

TEST(BpeVocab, IgnoreMergesEmitsWholeWordTokens) {
  auto llama3 = Llama3Style();
  ASSERT_NE(llama3, nullptr);
  EXPECT_EQ(llama3->Encode(" zqxj", false), (std::vector<int32_t>{kZqxj}));
  // The same vocabulary with GPT-2's pre-tokenizer merges, which never reach it.
  auto gpt2 = Make(Gpt2Based("gpt-2", ChatTokens()));
  ASSERT_NE(gpt2, nullptr);
  const std::vector<int32_t> ids = gpt2->Encode(" zqxj", false);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(gpt2->Decode(ids), " zqxj");
}

TEST(BpeVocab, SpecialTokensOnlyWhenParsed) {
  auto tok = Llama3Style();
  ASSERT_NE(tok, nullptr);
  const std::string prompt = "<|begin_of_text|>Hi<|eot_id|>";
  EXPECT_EQ(tok->Encode(prompt, false, /*parse_special=*/true),
            (std::vector<int32_t>{kBegin, 17250, kEot}));
  // With add_special the parsed BOS follows the added one, as in llama.cpp.
  EXPECT_EQ(tok->Encode(prompt, true, true), (std::vector<int32_t>{kBegin, kBegin, 17250, kEot}));
  // Without parse_special the same text is ordinary text.
  for (std::string_view text : {std::string_view(prompt), std::string_view("<|endoftext|>"),
                                std::string_view("<|im_start|>user\nhi<|im_end|>")}) {
    const std::vector<int32_t> ids = tok->Encode(text, false);
    for (int32_t id : ids) {
      EXPECT_FALSE(tok->IsControl(id)) << text << " gave control token " << id;
    }
    EXPECT_EQ(tok->Decode(ids), text);
  }
  EXPECT_EQ(tok->Encode("<|endoftext|>", false, true), (std::vector<int32_t>{kEndOfText}));
  EXPECT_EQ(tok->Encode("<|im_start|>user\nhi<|im_end|>", false, true).front(), kImStart);
  EXPECT_EQ(tok->Encode("<|im_start|>user\nhi<|im_end|>", false, true).back(), kImEnd);
  // User-defined tokens are whole tokens even in plain text.
  EXPECT_EQ(tok->Encode("<tool>", false), (std::vector<int32_t>{kTool}));
  // Decode shows control tokens only on request; user-defined ones always.
  const std::vector<int32_t> ids = {kBegin, 17250, kTool, kEot};
  EXPECT_EQ(tok->Decode(ids), "Hi<tool>");
  EXPECT_EQ(tok->Decode(ids, /*special=*/true), "<|begin_of_text|>Hi<tool><|eot_id|>");
}

TEST(BpeVocab, EndOfGenerationTokens) {
  auto tok = Llama3Style();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->eot(), kEot);  // found by text: no eot_token_id key
  EXPECT_EQ(tok->eom(), kEom);
  EXPECT_EQ(std::vector<int32_t>(tok->eog_ids().begin(), tok->eog_ids().end()),
            (std::vector<int32_t>{kEndOfText, kEot, kEom, kImEnd, kEndTurn}));
  for (int32_t id : {kEndOfText, kEot, kEom, kImEnd, kEndTurn}) {
    EXPECT_TRUE(tok->IsEndOfGeneration(id)) << id;
  }
  for (int32_t id : {kBegin, kImStart, kTool, kZqxj, k123, -1, 99999}) {
    EXPECT_FALSE(tok->IsEndOfGeneration(id)) << id;
  }
  // The normal-typed <|im_end|> became control: hidden in output, parsed only on request.
  EXPECT_TRUE(tok->IsControl(kImEnd));
  EXPECT_EQ(tok->TokenToPiece(kImEnd), "");
  EXPECT_EQ(tok->Encode("<|im_end|>", false, true), (std::vector<int32_t>{kImEnd}));

  // Keys win over texts: an explicit eot_token_id is kept, and still every
  // end-of-turn text ends generation.
  GgufWriter w = Gpt2Based("qwen2", ChatTokens());
  w.SetU32("tokenizer.ggml.eot_token_id", kImEnd);
  w.SetU32("tokenizer.ggml.eos_token_id", kImEnd);
  auto qwen = Make(std::move(w));
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->eot(), kImEnd);
  EXPECT_EQ(qwen->eos(), kImEnd);
  EXPECT_TRUE(qwen->IsEndOfGeneration(kEot));
  EXPECT_TRUE(qwen->IsEndOfGeneration(kEndOfText));
  EXPECT_FALSE(qwen->add_bos());  // qwen2 default
}

TEST(BpeVocab, Qwen2AndSmolLmSplitDigits) {
  for (std::string_view pre : {"qwen2", "smollm"}) {
    auto tok = Make(Gpt2Based(pre));
    ASSERT_NE(tok, nullptr);
    std::vector<int32_t> want;
    for (char c : std::string_view("12345")) want.push_back(tok->TokenId(std::string(1, c)));
    EXPECT_EQ(tok->Encode("12345", false), want) << pre;
    EXPECT_EQ(tok->Decode(tok->Encode("a 12345 b", false)), "a 12345 b");
  }
}

TEST(BpeVocab, PreTokenizerKeyErrors) {
  // Unknown: an error naming it.
  Result<std::unique_ptr<Tokenizer>> tok = TokenizerFrom(Gpt2Based("deepseek-llm"));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("tokenizer.ggml.pre 'deepseek-llm' is not supported"),
            std::string::npos)
      << tok.message();
  // Absent: llama.cpp's default pre-tokenizer, with a warning.
  tok = TokenizerFrom(Gpt2Based(""));
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ((*tok)->pre(), "default");
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("Hello, world! 12345", false)), "Hello, world! 12345");
}

TEST(BpeVocab, MergeKeyErrors) {
  GgufWriter w = Gpt2Based("gpt-2");
  w.Remove("tokenizer.ggml.merges");
  Result<std::unique_ptr<Tokenizer>> tok = TokenizerFrom(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("missing key tokenizer.ggml.merges"), std::string::npos);

  const std::vector<std::string> merges = {"\xC4\xA0 t", "nospace", "h e"};
  w.SetStringArray("tokenizer.ggml.merges", merges);
  tok = TokenizerFrom(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("tokenizer.ggml.merges[1] = 'nospace'"), std::string::npos)
      << tok.message();
}

TEST(BpeVocab, DefaultsWithoutIdKeys) {
  GgufWriter w = Gpt2Based("gpt-2");
  w.Remove("tokenizer.ggml.bos_token_id");
  w.Remove("tokenizer.ggml.eos_token_id");
  auto tok = Make(std::move(w));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos(), 11);  // llama.cpp's BPE defaults
  EXPECT_EQ(tok->eos(), 11);
  EXPECT_EQ(tok->unk(), -1);
  EXPECT_TRUE(tok->IsEndOfGeneration(11));
  EXPECT_TRUE(tok->IsEndOfGeneration(kEndOfText));  // by its text
}

}  // namespace
}  // namespace rotor
