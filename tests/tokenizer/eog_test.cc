#include "tokenizer/eog.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace rotor {
namespace {

using testing::TinyVocab;

TEST(EndOfGeneration, SpmUsesEosAndControlEndOfSentence) {
  Vocab v = TinyVocab({{"a", 0}});
  EXPECT_EQ(FindEndOfGeneration(&v), (std::vector<int32_t>{2}));  // "</s>", also eos
  EXPECT_EQ(v.eot, -1);
  EXPECT_EQ(v.eom, -1);

  const Tokenizer* tok = testing::LlamaSpm();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(std::vector<int32_t>(tok->eog_ids().begin(), tok->eog_ids().end()),
            (std::vector<int32_t>{2}));
}

TEST(EndOfGeneration, PlainTextEndOfSentenceIsNotAStop) {
  // "</s>" as a normal piece (HTML strike-through in a BPE vocabulary) is text.
  Vocab v;
  v.model = "gpt2";
  v.tokens = {"a", "</s>", "b"};
  v.eos = 0;
  EXPECT_EQ(FindEndOfGeneration(&v), (std::vector<int32_t>{0}));
  EXPECT_TRUE(v.types.empty());  // nothing was retyped
}

TEST(EndOfGeneration, TextsFillEotAndEomAndBecomeControl) {
  Vocab v;
  v.model = "gpt2";
  v.tokens = {"<|begin_of_text|>", "<|end_of_text|>", "x",
              "<|eom_id|>",        "<|eot_id|>",      "<|im_end|>"};
  v.eos = 1;
  // No types at all: the listed texts get control type, the others stay normal.
  EXPECT_EQ(FindEndOfGeneration(&v), (std::vector<int32_t>{1, 3, 4, 5}));
  EXPECT_EQ(v.eot, 4);  // <|eot_id|> comes first in EndOfTurnTexts()
  EXPECT_EQ(v.eom, 3);
  ASSERT_EQ(v.types.size(), 6u);
  EXPECT_EQ(v.types[0], TokenType::kNormal);
  EXPECT_EQ(v.types[2], TokenType::kNormal);
  for (int i : {1, 3, 4, 5}) EXPECT_EQ(v.types[i], TokenType::kControl) << i;
}

TEST(EndOfGeneration, KeysAreKept) {
  Vocab v;
  v.model = "gpt2";
  v.tokens = {"<|endoftext|>", "<|im_end|>", "<|im_start|>", "stop"};
  v.types = {TokenType::kControl, TokenType::kControl, TokenType::kControl, TokenType::kNormal};
  v.eos = 0;
  v.eot = 3;  // an unusual but explicit choice
  v.eom = -1;
  EXPECT_EQ(FindEndOfGeneration(&v), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(v.eot, 3);
  EXPECT_EQ(v.eom, -1);
}

TEST(EndOfGeneration, EndOfTurnTextsStartWithLlama3) {
  ASSERT_FALSE(EndOfTurnTexts().empty());
  EXPECT_EQ(EndOfTurnTexts()[0], "<|eot_id|>");
  bool im_end = false, gemma = false;
  for (std::string_view t : EndOfTurnTexts()) {
    im_end |= t == "<|im_end|>";
    gemma |= t == "<end_of_turn>";
  }
  EXPECT_TRUE(im_end);
  EXPECT_TRUE(gemma);
}

}  // namespace
}  // namespace rotor
