#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rotor {
namespace {

using testing::Gpt2;
using testing::LlamaSpm;

const std::string kFffd = "\xEF\xBF\xBD";

TEST(StreamDecoder, HoldsSplitCharacterUntilComplete) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  // U+1F999 (llama emoji) has no token: four byte tokens F0 9F A6 99.
  const std::vector<int32_t> ids = tok->Encode("\xF0\x9F\xA6\x99", false);
  ASSERT_EQ(ids, (std::vector<int32_t>{29871, 243, 162, 169, 156}));
  StreamDecoder dec(*tok);
  EXPECT_EQ(dec.Push(ids[0]), " ");
  EXPECT_EQ(dec.Push(ids[1]), "");
  EXPECT_EQ(dec.Push(ids[2]), "");
  EXPECT_EQ(dec.Push(ids[3]), "");
  EXPECT_EQ(dec.pending(), 3u);
  EXPECT_EQ(dec.Push(ids[4]), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(dec.pending(), 0u);
  EXPECT_EQ(dec.Flush(), "");
}

TEST(StreamDecoder, CjkAfterText) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  // "ឆ" (U+1786, Khmer) is not in the vocabulary: E1 9E 86.
  const std::string text = "Hello \xE1\x9E\x86!";
  const std::vector<int32_t> ids = tok->Encode(text, true);
  StreamDecoder dec(*tok, /*strip_leading_space=*/true);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(dec.Push(id));
  outs.push_back(dec.Flush());
  std::string all;
  int empty = 0;
  for (const auto& s : outs) {
    all += s;
    empty += s.empty();
  }
  EXPECT_EQ(all, text);
  EXPECT_GE(empty, 3);  // BOS, and two of the three byte tokens
}

TEST(StreamDecoder, InvalidSequencesBecomeReplacementCharacters) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  const int32_t f0 = 3 + 0xF0, x80 = 3 + 0x80, hello = 15043;
  StreamDecoder dec(*tok);
  EXPECT_EQ(dec.Push(f0), "");
  // A non-continuation byte ends the character: the held lead byte is U+FFFD.
  EXPECT_EQ(dec.Push(hello), kFffd + " Hello");
  EXPECT_EQ(dec.Push(x80), kFffd);  // a stray continuation byte is never held
  EXPECT_EQ(dec.Push(f0), "");
  EXPECT_EQ(dec.Flush(), kFffd);  // an unfinished character at the end
  EXPECT_EQ(dec.Flush(), "");
}

TEST(StreamDecoder, ControlTokensAndStripping) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  StreamDecoder dec(*tok, /*strip_leading_space=*/true);
  EXPECT_EQ(dec.Push(1), "");
  EXPECT_EQ(dec.Push(15043), "Hello");
  EXPECT_EQ(dec.Push(3186), " world");
  EXPECT_EQ(dec.Push(2), "");
  dec.Reset();
  EXPECT_EQ(dec.Push(3186), "world");
  StreamDecoder keep(*tok);  // continuation of a prompt: keep the space
  EXPECT_EQ(keep.Push(3186), " world");
  EXPECT_EQ(keep.Push(-1), "");
}

TEST(StreamDecoder, AllVectorsStreamLikeDecode) {
  const Tokenizer* tok = LlamaSpm();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = {
      "F\xC3\xBChrer", " this is \xF0\x9F\xA6\x99.cpp",
      "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B",
      "Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3"};
  for (const std::string& text : texts) {
    StreamDecoder dec(*tok, true);
    std::string all;
    for (int32_t id : tok->Encode(text, true)) all += dec.Push(id);
    all += dec.Flush();
    EXPECT_EQ(all, text);
  }
}

// Byte-level BPE: a multi-byte character split across tokens comes out only
// once complete.
TEST(StreamDecoder, BpeSplitsCharactersAcrossTokens) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  const std::string text = "Hi \xF0\x9F\xA6\x99 \xE4\xBD\xA0\xE5\xA5\xBD \xC3\xA9t\xC3\xA9!";
  const std::vector<int32_t> ids = tok->Encode(text, false);
  // Some token carries part of a character only (GPT-2 has no token for the emoji).
  int partial = 0;
  for (int32_t id : ids) {
    const std::string piece = tok->TokenToPiece(id);
    std::string valid;
    if (AppendValidUtf8(piece, /*final=*/false, &valid) != piece.size() || valid != piece)
      ++partial;
  }
  EXPECT_GT(partial, 0);
  StreamDecoder dec(*tok);
  std::string all;
  for (int32_t id : ids) {
    const std::string out = dec.Push(id);
    std::string check;
    // Everything released is complete, valid UTF-8.
    EXPECT_EQ(AppendValidUtf8(out, /*final=*/false, &check), out.size());
    EXPECT_EQ(check, out);
    all += out;
  }
  EXPECT_EQ(dec.pending(), 0u);
  all += dec.Flush();
  EXPECT_EQ(all, text);
}

TEST(StreamDecoder, BpeFlushesAnUnfinishedCharacter) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  // The first three bytes of U+1F999 only.
  const std::vector<int32_t> ids = tok->Encode("ok \xF0\x9F\xA6", false);
  StreamDecoder dec(*tok);
  std::string out;
  for (int32_t id : ids) out += dec.Push(id);
  EXPECT_EQ(out, "ok ");
  EXPECT_EQ(dec.pending(), 3u);
  EXPECT_EQ(dec.Flush(), kFffd);
}

}  // namespace
}  // namespace rotor
