#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
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

}  // namespace
}  // namespace rotor
