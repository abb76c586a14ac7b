#include "tokenizer/unicode_regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rotor {
namespace {

std::vector<std::string> Pieces(const UnicodeRegex& re, std::string_view text) {
  std::vector<UnicodeRegex::Range> ranges;
  re.Split(text, 0, &ranges);
  std::vector<std::string> out;
  for (auto r : ranges) out.emplace_back(text.substr(r.begin, r.end - r.begin));
  return out;
}

TEST(UnicodeRegex, MatchesAndGapsArePieces) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile(R"(\p{N}+)");
  ASSERT_TRUE(re.ok()) << re.message();
  EXPECT_EQ(Pieces(*re, "ab12cd345"), (std::vector<std::string>{"ab", "12", "cd", "345"}));
  EXPECT_EQ(Pieces(*re, "12"), (std::vector<std::string>{"12"}));
  EXPECT_EQ(Pieces(*re, "xyz"), (std::vector<std::string>{"xyz"}));
  EXPECT_TRUE(Pieces(*re, "").empty());
  std::vector<UnicodeRegex::Range> ranges;
  re->Split("a1", 100, &ranges);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[1].begin, 101u);
  EXPECT_EQ(ranges[1].end, 102u);
}

TEST(UnicodeRegex, UnicodePropertiesAndJit) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile(R"(\p{L}+|\s+)");
  ASSERT_TRUE(re.ok());
  // PCRE2 on x86-64 has a JIT; the tokenizer's speed relies on it.
  EXPECT_TRUE(re->jit());
  // U+3000 (ideographic space) is \s with UCP; U+00E9 and Cyrillic are letters.
  EXPECT_EQ(Pieces(*re, "caf\xC3\xA9\xE3\x80\x80мир!"),
            (std::vector<std::string>{"caf\xC3\xA9", "\xE3\x80\x80", "мир", "!"}));
}

TEST(UnicodeRegex, LookaheadSeesOnlyTheSubject) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile(R"(\s+(?!\S))");
  ASSERT_TRUE(re.ok());
  // At the end of the subject "(?!\S)" holds, whatever the caller's buffer holds next.
  const std::string buf = "a  b";
  EXPECT_EQ(Pieces(*re, std::string_view(buf).substr(0, 3)), (std::vector<std::string>{"a", "  "}));
  EXPECT_EQ(Pieces(*re, buf), (std::vector<std::string>{"a", " ", " b"}));
}

TEST(UnicodeRegex, InvalidUtf8IsNeverLost) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile(R"([^\s\p{L}]+|\p{L}+)");
  ASSERT_TRUE(re.ok());
  // An invalid byte matches nothing: it stays in a gap of its own.
  EXPECT_EQ(Pieces(*re,
                   "ab\xFF"
                   "cd"),
            (std::vector<std::string>{"ab", "\xFF", "cd"}));
  EXPECT_EQ(Pieces(*re, "\xC3"), (std::vector<std::string>{"\xC3"}));
  EXPECT_EQ(Pieces(*re, "!!\x80\x80!!"), (std::vector<std::string>{"!!", "\x80\x80", "!!"}));
}

TEST(UnicodeRegex, EmptyMatchesAreSkipped) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile(R"(x*)");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(Pieces(*re, "axxb\xC3\xA9x"), (std::vector<std::string>{"a", "xx", "b\xC3\xA9", "x"}));
}

TEST(UnicodeRegex, BadPatternIsAnError) {
  Result<UnicodeRegex> re = UnicodeRegex::Compile("(unclosed");
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.message().find("regex '(unclosed'"), std::string::npos) << re.message();
  EXPECT_NE(re.message().find("offset"), std::string::npos);
}

}  // namespace
}  // namespace rotor
