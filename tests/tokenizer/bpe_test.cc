#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tokenizer/utf8.h"

namespace rotor {
namespace {

using testing::Gpt2;
using testing::LoadVocabTestCases;
using testing::VocabTestCase;

const std::vector<VocabTestCase>& Gpt2Cases() {
  static const auto* cases = new std::vector<VocabTestCase>(
      LoadVocabTestCases(std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf"));
  return *cases;
}

TEST(BpeVectors, Gpt2Properties) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->model_name(), "gpt2");
  EXPECT_EQ(tok->pre(), "gpt-2");
  EXPECT_EQ(tok->n_vocab(), 50257);
  EXPECT_EQ(tok->bos(), 50256);
  EXPECT_EQ(tok->eos(), 50256);
  EXPECT_EQ(tok->unk(), -1);
  EXPECT_FALSE(tok->add_bos());  // BPE default without the key
  EXPECT_FALSE(tok->add_space_prefix());
  EXPECT_EQ(tok->TokenText(50256), "<|endoftext|>");
  EXPECT_TRUE(tok->IsControl(50256));
  EXPECT_TRUE(tok->IsEndOfGeneration(50256));
  EXPECT_EQ(tok->eot(), 50256);  // found by its text
  EXPECT_EQ(tok->eog_ids().size(), 1u);
}

TEST(BpeVectors, EncodeMatchesLlamaCpp) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  const auto& cases = Gpt2Cases();
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) {
    EXPECT_EQ(tok->Encode(c.text, /*add_special=*/false), c.ids) << "text: '" << c.text << "'";
  }
}

TEST(BpeVectors, DecodeRoundTrips) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  for (const auto& c : Gpt2Cases()) {
    EXPECT_EQ(tok->Decode(c.ids), c.text);
    EXPECT_EQ(tok->Decode(tok->Encode(c.text, true)), c.text);
  }
}

// Byte-level BPE encodes every byte: any input, valid UTF-8 or not, decodes
// back to itself.
TEST(Bpe, AnyBytesRoundTrip) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> inputs = testing::InvalidUtf8Samples();
  inputs.push_back("caf\xC3\xA9 \xFF\xFE" "don't");
  inputs.push_back("   \x80   ");
  for (const std::string& s : inputs) {
    const std::vector<int32_t> ids = tok->Encode(s, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->Decode(ids), s);
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s(1 + rng() % 64, '\0');
    for (char& c : s)
      c = static_cast<char>(rng() % 3 == 0 ? rng() % 256 : " ae'1\n\xC3\xA9"[rng() % 8]);
    ASSERT_EQ(tok->Decode(tok->Encode(s, false)), s);
  }
}

// A Tokenizer is shared by server threads: concurrent encodes agree.
TEST(Bpe, ConcurrentEncodesAgree) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  const std::string text =
      testing::ReadFileBytes(std::string(ROTOR_TESTDATA_DIR) + "/tinystories-valid-8k.txt") +
      " caf\xC3\xA9 \xF0\x9F\xA6\x99 12345 \xFF";
  const std::vector<int32_t> want = tok->Encode(text, false);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 10; ++rep) got[t] = tok->Encode(text, false);
    });
  }
  for (std::thread& th : threads) th.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

// Encoding 1 MB of text takes well under a second (a priority queue of
// merge ranks per word; no quadratic rescans).
// This thread's CPU seconds: unlike wall time, they do not count the moments
// the scheduler gives the core to the suite's other tests (ctest runs one
// more test than there are cores).
double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU seconds of the fastest of `runs` encodings of `text` (best-of damps a busy machine).
double BestEncodeSeconds(const Tokenizer& tok, const std::string& text, int runs,
                         std::vector<int32_t>* ids) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const double start = ThreadSeconds();
    *ids = tok.Encode(text, false);
    best = std::min(best, ThreadSeconds() - start);
  }
  return best;
}

// Encoding grows about linearly with the text, not quadratically: 16x the
// text may take at most 128x the time (linear: 16x, n log n and caches a
// little more; quadratic: 256x). A ratio of the encoding thread's CPU time,
// the best of a few runs, measured in one process: not a time limit, so a
// slow machine (sanitizers) does not fail it, and neither does a busy one
// (wall time did: 196x once beside the other tests of `ctest -j3`, where
// the long word takes 52-58x alone). Absolute speed is for benchmarks.
void ExpectLinear(const Tokenizer& tok, const std::string& small, const std::string& large,
                  const char* what) {
  std::vector<int32_t> ids;
  const double t_small = BestEncodeSeconds(tok, small, 3, &ids);
  EXPECT_EQ(tok.Decode(ids), small);
  const double t_large = BestEncodeSeconds(tok, large, 3, &ids);
  EXPECT_EQ(tok.Decode(ids), large);
  std::printf("%s: %zu bytes %.4f s, %zu bytes %.4f s (%.1fx)\n", what, small.size(), t_small,
              large.size(), t_large, t_large / t_small);
  EXPECT_LT(t_large, 128 * t_small + 0.05) << what;
}

TEST(Bpe, EncodingHalfAMegabyteIsLinear) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  const std::string story =
      testing::ReadFileBytes(std::string(ROTOR_TESTDATA_DIR) + "/tinystories-valid-8k.txt");
  ASSERT_GT(story.size(), 1000u);
  std::string text;
  const std::string extra = " Ünïcödé 你好世界 🦙 1234567 \t\t\n\n   ";
  while (text.size() < (1u << 15)) text += story + extra;
  std::string large;
  for (int i = 0; i < 16; ++i) large += text;  // half a MiB
  ExpectLinear(*tok, text, large, "gpt-2 BPE text");
}

// One long word (no pre-tokenizer split) is merged in O(n log n), not O(n^2).
TEST(Bpe, LongWordIsLinear) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  std::string word;
  for (int i = 0; i < 12500; ++i) word += "abcdefgh"[i % 8];
  std::string large;
  for (int i = 0; i < 16; ++i) large += word;  // 200,000 bytes, one word
  ExpectLinear(*tok, word, large, "gpt-2 BPE long word");
}

}  // namespace
}  // namespace rotor
