#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace rotor {
namespace {

struct SplitCase {
  std::string_view pre;
  std::string_view text;
  std::vector<std::string_view> words;
};

// Hand-written expectations, cross-checked against the original tokenizer.json
// expressions (with "(?i:...)" contractions and the final "\s+") run by another
// regex engine.
const std::vector<SplitCase>& Cases() {
  static const auto* cases = new std::vector<SplitCase>{
      // Llama 3: contractions in any case, split off the word before them.
      {"llama-bpe",
       "I'm you're we've he'll she'd it's don't",
       {"I", "'m", " you", "'re", " we", "'ve", " he", "'ll", " she", "'d", " it", "'s", " don",
        "'t"}},
      {"llama-bpe",
       "I'M YOU'RE WE'VE HE'LL SHE'D IT'S DON'T",
       {"I", "'M", " YOU", "'RE", " WE", "'VE", " HE", "'LL", " SHE", "'D", " IT", "'S", " DON",
        "'T"}},
      // ... which also cut a word that merely starts like one.
      {"llama-bpe", "'tis 'S", {"'t", "is", " '", "S"}},
      // Numbers: groups of up to three digits from the left, no leading space.
      {"llama-bpe",
       "1 12 123 1234 12345 1234567",
       {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7"}},
      {"llama-bpe",
       "3.14159, 2024-01-31",
       {"3", ".", "141", "59", ",", " ", "202", "4", "-", "01", "-", "31"}},
      {"llama-bpe", "hello123world $100 ...!!", {"hello", "123", "world", " $", "100", " ...!!"}},
      // Letters of any script; Arabic-Indic digits are digits. A combining
      // mark (U+0301) is not a letter: it ends the word.
      {"llama-bpe",
       "na\xC3\xAFve cafe\xCC\x81 \xC3\x85ngstr\xC3\xB6m",
       {"na\xC3\xAFve", " cafe", "\xCC\x81", " \xC3\x85ngstr\xC3\xB6m"}},
      {"llama-bpe", "Привет мир Ελληνικά ٣٤٥٦٧", {"Привет", " мир", " Ελληνικά", " ", "٣٤٥", "٦٧"}},
      // CJK runs are one word; a full-width comma leads the next one.
      {"llama-bpe", "你好世界，欢迎！", {"你好世界", "，欢迎", "！"}},
      // Emoji (with a skin-tone modifier) are symbols: one run with its space.
      {"llama-bpe", "Hi 👋🏽 there 🦙!", {"Hi", " 👋🏽", " there", " 🦙!"}},
      // Whitespace: the last space joins the next word; trailing runs stay whole.
      {"llama-bpe", "a  b   c    ", {"a", " ", " b", "  ", " c", "    "}},
      {"llama-bpe",
       "line1\n\nline2\r\n  indented\n",
       {"line", "1", "\n\n", "line", "2", "\r\n", " ", " indented", "\n"}},
      {"llama-bpe", "\tx\t\t y", {"\tx", "\t\t", " y"}},
      {"llama-bpe", "", {}},
      // Qwen 2: Llama 3 with single digits.
      {"qwen2",
       "I'M don't 12345 x1y",
       {"I", "'M", " don", "'t", " ", "1", "2", "3", "4", "5", " x", "1", "y"}},
      {"qwen2", "你好 123 ab  \n", {"你好", " ", "1", "2", "3", " ab", "  \n"}},
      // GPT-2: lower-case contractions only; digit runs with a leading space.
      {"gpt-2",
       "I'M don't it's HE'S 12345  a",
       {"I", "'", "M", " don", "'t", " it", "'s", " HE", "'", "S", " 12345", " ", " a"}},
      {"gpt-2", "Hello, world!  \n", {"Hello", ",", " world", "!", "  \n"}},
      // SmolLM: every digit alone, then GPT-2.
      {"smollm",
       "abc123 4567x don't",
       {"abc", "1", "2", "3", " ", "4", "5", "6", "7", "x", " don", "'t"}},
      // llama.cpp's default: punctuation first, then GPT-2, then digit groups.
      {"default",
       "Hello, world! 12345 $x",
       {"Hello", ",", " world", "!", " ", "123", "45", " ", "$", "x"}},
  };
  return *cases;
}

TEST(PreTokenizer, HandWrittenSplits) {
  for (const SplitCase& c : Cases()) {
    Result<PreTokenizer> pre = PreTokenizer::Create(c.pre);
    ASSERT_TRUE(pre.ok()) << pre.message();
    EXPECT_EQ(pre->Split(c.text), c.words) << c.pre << ": '" << c.text << "'";
  }
}

TEST(PreTokenizer, AliasesShareAFamily) {
  for (std::string_view name : {"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"}) {
    const PreTokenizerSpec* spec = FindPreTokenizer(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_EQ(spec->family, "llama3");
    EXPECT_TRUE(spec->ignore_merges);
    EXPECT_TRUE(spec->add_bos);
  }
  EXPECT_EQ(FindPreTokenizer("deepseek-r1-qwen")->family, "qwen2");
  EXPECT_EQ(FindPreTokenizer("starcoder")->family, "smollm");
  EXPECT_EQ(FindPreTokenizer("phi-2")->family, "gpt2");
  for (std::string_view name : {"qwen2", "smollm", "gpt-2", "default"}) {
    EXPECT_FALSE(FindPreTokenizer(name)->ignore_merges) << name;
    EXPECT_FALSE(FindPreTokenizer(name)->add_bos) << name;
  }
  EXPECT_EQ(FindPreTokenizer("no-such"), nullptr);
  EXPECT_EQ(FindPreTokenizer(""), nullptr);
}

TEST(PreTokenizer, UnknownNameIsAnErrorListingTheKnownOnes) {
  Result<PreTokenizer> pre = PreTokenizer::Create("deepseek-llm");
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.message().find("tokenizer.ggml.pre 'deepseek-llm' is not supported"),
            std::string::npos)
      << pre.message();
  for (const char* known : {"default", "gpt-2", "llama-bpe", "qwen2", "smollm"}) {
    EXPECT_NE(pre.message().find(known), std::string::npos) << known;
  }
}

std::string Join(const std::vector<std::string_view>& words) {
  std::string s;
  for (std::string_view w : words) s.append(w);
  return s;
}

// Every byte lands in exactly one non-empty word, whatever the input.
TEST(PreTokenizer, WordsCoverAnyBytes) {
  std::mt19937 rng(7);
  const std::vector<std::string> samples = {
      "\xFF",
      "a\x80"
      "b",
      "\xC3",
      "x\xE2\x82",
      "\xED\xA0\x80!",
      "  \xF0\x9F\xA6\x99\xF0\x9F",
      "don\xC3't",
      std::string("a\0b\0\0 c", 7),
      "\xC0\xAF\xF8\x88\x80\x80\x80",
  };
  for (const char* name : {"llama-bpe", "qwen2", "gpt-2", "smollm", "default", "falcon"}) {
    Result<PreTokenizer> pre = PreTokenizer::Create(name);
    ASSERT_TRUE(pre.ok()) << pre.message();
    for (const std::string& s : samples) {
      const auto words = pre->Split(s);
      EXPECT_EQ(Join(words), s) << name;
      for (std::string_view w : words) EXPECT_FALSE(w.empty());
    }
    for (int trial = 0; trial < 200; ++trial) {
      std::string s(1 + rng() % 40, '\0');
      for (char& c : s) {
        // Mostly text-like bytes, some high ones to make broken UTF-8.
        const uint32_t r = rng() % 10;
        c = static_cast<char>(r < 4 ? 'a' + rng() % 3 : r < 6 ? " \n\t'1"[rng() % 5] : rng() % 256);
      }
      const auto words = pre->Split(s);
      ASSERT_EQ(Join(words), s) << name;
      for (std::string_view w : words) ASSERT_FALSE(w.empty());
    }
  }
}

// Long runs of one character class: no regex resource limit cuts them.
TEST(PreTokenizer, LongRunsSplitCorrectly) {
  Result<PreTokenizer> pre = PreTokenizer::Create("llama-bpe");
  ASSERT_TRUE(pre.ok());
  const size_t n = 1 << 20;
  const std::string spaces(n, ' ');
  EXPECT_EQ(pre->Split(spaces), (std::vector<std::string_view>{spaces}));
  const std::string letters(n, 'x');
  EXPECT_EQ(pre->Split(letters), (std::vector<std::string_view>{letters}));
  const std::string punct(n, '#');
  EXPECT_EQ(pre->Split(punct), (std::vector<std::string_view>{punct}));
  const std::string spaces_then_word = spaces + "word";
  EXPECT_EQ(pre->Split(spaces_then_word),
            (std::vector<std::string_view>{std::string_view(spaces).substr(1), " word"}));
  std::string mixed;
  for (int i = 0; i < 100000; ++i) mixed += " \t\r\n";
  EXPECT_EQ(pre->Split(mixed), (std::vector<std::string_view>{mixed}));
  const std::string digits(3 * 1000, '7');
  EXPECT_EQ(pre->Split(digits).size(), 1000u);
}

}  // namespace
}  // namespace rotor
