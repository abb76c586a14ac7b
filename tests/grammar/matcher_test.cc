#include "grammar/matcher.h"

#include <gtest/gtest.h>

namespace rotor::grammar {
namespace {

Matcher Make(std::string_view text) {
  auto g = ParseGrammar(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return Matcher(*g);
}

// The whole string is a sentence of the grammar.
bool Full(std::string_view grammar, std::string_view s) {
  Matcher m = Make(grammar);
  return m.Accept(s) && m.CanEnd();
}

TEST(Matcher, AcceptsAndRejectsWholeStrings) {
  const char* g = R"g(root ::= ("ab" | "c")+ [0-9]{2,3} "!"?)g";
  EXPECT_TRUE(Full(g, "ab12"));
  EXPECT_TRUE(Full(g, "cabc123!"));
  EXPECT_FALSE(Full(g, "ab1"));
  EXPECT_FALSE(Full(g, "ab1234"));
  EXPECT_FALSE(Full(g, "12"));
  EXPECT_FALSE(Full(g, "a12"));
  EXPECT_FALSE(Full(g, "ab12!!"));
}

TEST(Matcher, ClassesNegationAnyAndEscapes) {
  EXPECT_TRUE(Full(R"g(root ::= [^a-c]+)g", "xyz"));
  EXPECT_FALSE(Full(R"g(root ::= [^a-c]+)g", "xaz"));
  EXPECT_TRUE(Full(R"g(root ::= . . .)g", "a\xc3\xa9\xf0\x9f\x98\x80"));  // a é 😀
  EXPECT_FALSE(Full(R"g(root ::= . .)g", "abc"));
  EXPECT_TRUE(Full(R"g(root ::= "\x41\u00e9\n\t\"\\")g", "A\xc3\xa9\n\t\"\\"));
  EXPECT_TRUE(Full(R"g(root ::= [\]\[\-]+)g", "][-"));
  EXPECT_TRUE(Full("root ::= [é-ü]", "\xc3\xb1"));  // ñ
}

TEST(Matcher, PrefixesEndAndDone) {
  Matcher m = Make(R"g(root ::= "ab" "c"?)g");
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accepts("a"));
  EXPECT_FALSE(m.Accepts("b"));
  EXPECT_TRUE(m.Accept("a"));
  EXPECT_FALSE(m.Accept("x"));  // rejected: nothing changes
  EXPECT_TRUE(m.Accept("b"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.Done());
  EXPECT_TRUE(m.Accept("c"));
  EXPECT_TRUE(m.Done());
  EXPECT_FALSE(m.Accepts("c"));
  m.Reset();
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accept("abc"));
}

TEST(Matcher, UnfinishedCharactersAcrossPieces) {
  Matcher m = Make(R"g(root ::= [à-ÿ] "x")g");  // U+00E0..U+00FF: lead byte C3
  EXPECT_TRUE(m.Accepts("\xc3"));
  EXPECT_FALSE(m.Accepts("\xc4"));  // U+0100.. cannot match
  EXPECT_FALSE(m.Accepts("\xe2"));
  EXPECT_TRUE(m.Accept("\xc3"));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(
      m.Accepts("\xa0"
                "x"
                "\x80"));
  EXPECT_FALSE(m.Accepts("\x9f"));  // U+00DF: outside
  EXPECT_TRUE(m.Accept("\xa9"));    // é
  EXPECT_TRUE(m.Accept("x"));
  EXPECT_TRUE(m.Done());
  Matcher bad = Make(R"g(root ::= .*)g");
  EXPECT_FALSE(bad.Accepts("\x80"));  // a continuation byte first
  EXPECT_FALSE(
      bad.Accepts("\xc3"
                  "a"));  // a lead byte then ASCII
  EXPECT_FALSE(bad.Accepts("\xff"));
  EXPECT_TRUE(bad.Accepts("anything \xe2\x82\xac"));
  // Overlong forms could reach ASCII: a lead byte alone must not pass for '{'.
  Matcher brace = Make(R"g(root ::= "{")g");
  EXPECT_FALSE(brace.Accepts("\xf0"));
  EXPECT_FALSE(brace.Accepts("\xe0"));
  EXPECT_FALSE(brace.Accepts("\xc1\xbb"));
  EXPECT_FALSE(bad.Accepts("\xe0\x81\xbb"));      // overlong '{'
  EXPECT_FALSE(bad.Accepts("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(bad.Accepts("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Matcher, RecursionAndAmbiguity) {
  const char* g = R"g(root ::= expr
expr ::= term ("+" term)*
term ::= [0-9]+ | "(" expr ")")g";
  EXPECT_TRUE(Full(g, "1+(2+(3+4))+5"));
  EXPECT_FALSE(Full(g, "1+(2+3"));
  EXPECT_FALSE(Full(g, "1+"));
  // Ambiguous and nullable parts; long inputs stay cheap (deduplicated stacks).
  const char* amb = R"g(root ::= ("a" | "a" | "aa")* "b"? [a-z]*)g";
  EXPECT_TRUE(Full(amb, std::string(5000, 'a')));
  // Deep right recursion without tails grows the stack, not the set.
  const char* nest = R"g(root ::= "(" root ")" | "x")g";
  EXPECT_TRUE(Full(nest, std::string(300, '(') + "x" + std::string(300, ')')));
  EXPECT_FALSE(Full(nest, std::string(300, '(') + "x" + std::string(299, ')')));
}

// A rule that matches nothing in two ways doubles the ways to reach what
// follows at every repetition (2^60 here); each distinct stack is expanded
// once, so this is as cheap as one way.
TEST(Matcher, NothingMatchedManyWaysStaysCheap) {
  const char* g = R"g(root ::= ("" | "" | "x"?){60} "a")g";
  EXPECT_TRUE(Full(g, "a"));
  EXPECT_TRUE(Full(g, "xxxa"));
  EXPECT_FALSE(Full(g, "xb"));
  EXPECT_FALSE(Make(g).overflowed());
}

// Exponentially many distinct stacks (the choice of y or z for every "a" stays
// open until the end): refused past kMaxStacks with overflowed(), never a hang.
TEST(Matcher, TooAmbiguousIsRefusedAndSaysSo) {
  const char* g = R"g(root ::= x
x ::= "a" x y | "a" x z | "a"
y ::= "b"
z ::= "b")g";
  Matcher m = Make(g);
  EXPECT_TRUE(m.Accept(std::string(10, 'a')));  // 2^10 ways: within the limit
  EXPECT_FALSE(m.overflowed());
  EXPECT_TRUE(m.Accepts("b"));
  std::string more(4, 'a');
  EXPECT_FALSE(m.Accepts(more));
  EXPECT_TRUE(m.overflowed());  // refused for ambiguity, not as a non-sentence
  m.ClearOverflow();
  EXPECT_FALSE(m.Accept(more));
  EXPECT_TRUE(m.overflowed());
  EXPECT_TRUE(m.Accept("bb"));  // a refused text changed nothing
  m.ClearOverflow();
  EXPECT_FALSE(m.Accepts("c"));
  EXPECT_FALSE(m.overflowed());  // an ordinary refusal
  m.Reset();
  EXPECT_FALSE(m.overflowed());
  EXPECT_TRUE(m.Accept("aaabb"));
  EXPECT_NE(Matcher::OverflowMessage().find("too ambiguous"), std::string::npos);
}

// Too many ways at the very start: the matcher accepts nothing, and says why
// (also after ClearOverflow(): only Reset() could change it, and it would not).
TEST(Matcher, TooAmbiguousFromTheStart) {
  const char* g = R"g(root ::= y{1000}
y ::= "a"? "b"? "c"? "d"? "e"?)g";
  Matcher m = Make(g);
  EXPECT_TRUE(m.overflowed());
  EXPECT_FALSE(m.Accepts("a"));
  m.ClearOverflow();
  EXPECT_TRUE(m.overflowed());
  EXPECT_FALSE(m.CanEnd());
}

TEST(Matcher, BoundedRepetition) {
  const char* g = R"g(root ::= "a"{2} "b"{1,2} "c"{,1} "d"{2,})g";
  EXPECT_TRUE(Full(g, "aabdd"));
  EXPECT_TRUE(Full(g, "aabbcddd"));
  EXPECT_FALSE(Full(g, "abdd"));
  EXPECT_FALSE(Full(g, "aabbbdd"));
  EXPECT_FALSE(Full(g, "aabccdd"));
  EXPECT_FALSE(Full(g, "aabd"));
}

TEST(Matcher, JsonGrammar) {
  auto g = ParseGrammar(JsonGrammarText());
  ASSERT_TRUE(g.ok());
  auto full = [&](std::string_view s) {
    Matcher m(*g);
    return m.Accept(s) && m.CanEnd();
  };
  EXPECT_TRUE(full(R"g({"a": [1, -2.5e3, true, null, {"b": "c\n\u00e9"}], "d": {}})g"));
  EXPECT_TRUE(full("{}"));
  EXPECT_FALSE(full("[]"));  // json_object: an object at the top
  EXPECT_FALSE(full(R"g({"a": 01})g"));
  EXPECT_FALSE(full(R"g({"a": "x)g"));
  EXPECT_FALSE(full(R"g({"a" 1})g"));
  EXPECT_FALSE(full(R"g({"a": 1,})g"));
  Matcher m(*g);
  EXPECT_TRUE(m.Accept("{}"));
  EXPECT_TRUE(m.Done());
}

}  // namespace
}  // namespace rotor::grammar
