#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace rotor::grammar {
namespace {

std::string ErrorOf(std::string_view text) {
  auto g = ParseGrammar(text);
  if (g.ok()) return "ok";
  return g.status().message();
}

TEST(GrammarParser, ParsesTheSyntax) {
  const char* text = R"(# a comment
root ::= greeting " " name ("!" | "?")* [0-9]{2,3} tail?  # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z\-]+ . [^\n"]
tail ::= (
    "x" |
    "y"
  )
  | "z\x41\u00e9\"\\" "" x{3} x{1,} x{,2}
x ::= "q"
)";
  auto g = ParseGrammar(text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Grammar& gr = **g;
  EXPECT_EQ(gr.rules[gr.root].name, "root");
  EXPECT_GE(gr.Find("greeting"), 0);
  EXPECT_EQ(gr.rules[gr.Find("greeting")].alternatives.size(), 2u);
  EXPECT_EQ(gr.rules[gr.Find("tail")].alternatives.size(), 2u);
}

TEST(GrammarParser, JsonGrammarParses) {
  auto g = ParseGrammar(JsonGrammarText());
  ASSERT_TRUE(g.ok()) << g.status().message();
}

struct Bad {
  const char* text;
  const char* error;
};

TEST(GrammarParser, ErrorsNameLineColumnAndProblem) {
  const Bad cases[] = {
      {"", "grammar: line 1, column 1: the grammar is empty"},
      {"# only a comment\n", "the grammar is empty"},
      {"root ::= foo\n", "grammar: line 1, column 10: undefined rule 'foo'"},
      {"a ::= \"x\"\n", "no 'root' rule"},
      {"root = \"x\"\n", "line 1, column 6: expected '::=' after rule name 'root', found '='"},
      {"root ::= \"abc\n", "line 1, column 14: unterminated literal (a newline inside it)"},
      {"root ::= \"abc", "line 1, column 10: unterminated literal '\"'"},
      {"root ::= [abc\n", "unterminated character class '[' (a newline inside it)"},
      {"root ::= [abc", "unterminated character class '['"},
      {"root ::= [z-a]", "line 1, column 12: character range U+007A-U+0061 is reversed"},
      {"root ::= (\"a\"", "unclosed '('"},
      {"root ::= \"a\")",
       "line 1, column 13: expected the end of the line after the rule, found ')'"},
      {"root ::= * \"a\"", "line 1, column 10: '*' has nothing before it to repeat"},
      {"root ::= \"a\"**", "'*' has nothing before it to repeat"},
      {"root ::= \"a\"{3,1}", "repetition {3,1} has its maximum below its minimum"},
      {"root ::= \"a\"{5000}", "repetition count above the limit of 1000"},
      {"root ::= \"a\"{}", "'{' needs a count"},
      {"root ::= \"a\"{,}", "needs a count"},
      {"root ::= \"a\"{2", "unclosed '{'"},
      {"root ::= \"\\q\"", "unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "escape '\\x' needs 2 hex digits"},
      {"root ::= \"\\UFFFFFFFF\"", "past U+10FFFF"},
      {"root ::= \"\\", "unfinished escape"},
      {"root ::= \"a\" @", "line 1, column 14: unexpected '@'"},
      {"root ::= <think>", "token references ('<...>') are not supported"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= root \"a\" | \"b\"", "left recursion: rule 'root' can reach itself"},
      {"root ::= a\na ::= b \"x\"\nb ::= \"\" a", "left recursion"},
      {"root ::= (\"\")* \"x\"", "left recursion"},
      {"root ::= \"x\"? root", "left recursion"},
      {"root ::= (\"a\"?)*", "left recursion: rule 'root-2' can reach itself"},
      {"root ::= \"\xff\"", "invalid UTF-8 byte 0xff"},
      {"::= \"x\"", "line 1, column 1: expected a rule name, found ':'"},
      {"root ::= \"a\"\n  \"b\"", "line 2, column 3: expected a rule name, found '\"'"},
  };
  for (const Bad& c : cases) {
    const std::string e = ErrorOf(c.text);
    EXPECT_NE(e.find(c.error), std::string::npos) << "grammar: " << c.text << "\nerror: " << e;
    EXPECT_EQ(e.rfind("grammar: line ", 0), 0u) << e;
  }
}

// Groups and repetitions become rules named after their rule, "root-1",
// "root-2", ..., skipping names the text uses. Each name was searched from 1:
// a rule of 20,000 optional items took 26 s to parse (one request's grammar
// field held a server thread that long).
TEST(GrammarParser, GeneratedRulesTakeTheNextFreeNames) {
  auto g = ParseGrammar("root ::= \"a\"? root-2 \"b\"?\nroot-2 ::= \"c\"");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_GE((*g)->Find("root-1"), 0);
  EXPECT_EQ((*g)->rules[(*g)->Find("root-2")].alternatives.size(), 1u);  // the text's
  EXPECT_GE((*g)->Find("root-3"), 0);
  EXPECT_LT((*g)->Find("root-4"), 0);
  // "ab"? is a rule for "ab" and one for its repetition, each time.
  std::string many = "root ::=";
  for (int i = 0; i < 20000; ++i) many += " \"ab\"?";
  auto big = ParseGrammar(many);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ((*big)->rules.size(), 40001u);
  EXPECT_GE((*big)->Find("root-40000"), 0);
}

// Repetitions of the same item share their rules: x{0,k} is one chain of
// rules, each link x{0,j}, wherever it appears; x* one rule. Each made its
// own before (800 x{0,1000} took 356 MB; "aa...a"{1000} copied every
// character 1000 times).
TEST(GrammarParser, RepetitionsOfOneItemShareTheirRules) {
  std::string text = "root ::= (";
  for (int i = 0; i < 800; ++i) text += " x{0,1000} x{3,7} x*";
  text += " )?\nx ::= \"a\"";
  auto g = ParseGrammar(text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  // root, x, the group, its ? chain link, x's 1000 chain links and x*.
  EXPECT_EQ((*g)->rules.size(), 2u + 1 + 1 + 1000 + 1);
  auto lit = ParseGrammar("root ::= \"" + std::string(6400, 'a') + "\"{1000}");
  ASSERT_TRUE(lit.ok());
  size_t elements = 0;
  for (const Rule& r : (*lit)->rules)
    for (const Alternative& a : r.alternatives) elements += a.size();
  EXPECT_LT(elements, 6400u + 1000 + 10);
  // An empty literal repeated is empty (it repeated the element before it,
  // or read before the sequence: the fuzzer's find).
  for (const char* text :
       {"root ::= \"a\" \"\"?", "root ::= \"\"* \"a\"", "root ::= \"a\" \"\"{2,5}"}) {
    auto g = ParseGrammar(text);
    ASSERT_TRUE(g.ok()) << text << ": " << g.status().message();
    Matcher one(*g), two(*g);
    EXPECT_TRUE(one.Accept("a") && one.CanEnd()) << text;
    EXPECT_FALSE(two.Accept("aa") && two.CanEnd()) << text;
  }
  // The language is the same: 2 to 4 "ab", then "c".
  auto counted = ParseGrammar("root ::= \"ab\"{2,4} \"c\" | (\"ab\"){1,2} \"d\"");
  ASSERT_TRUE(counted.ok());
  for (const auto& [text_in, ok] :
       std::vector<std::pair<std::string, bool>>{{"ababc", true}, {"abababc", true},
                                                 {"ababababc", true}, {"abc", false},
                                                 {"abababababc", false}, {"abd", true},
                                                 {"ababd", true}, {"abababd", false}}) {
    Matcher m(*counted);
    EXPECT_EQ(m.Accept(text_in) && m.CanEnd(), ok) << text_in;
  }
}

// Which rules match nothing is found through a chain of 64,000 rules (each
// refers to the next; the passes over every rule it took before settled one
// rule a pass, 12.6 s for such a request): s ::= r1 s is a left recursion
// exactly when the whole chain can match nothing.
TEST(GrammarParser, LongChainsOfRulesThatMatchNothing) {
  constexpr int kN = 64000;
  std::string chain = "root ::= s\ns ::= r1 s \"y\" | \"y\"\n";
  for (int i = 1; i < kN; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  const std::string nothing = ErrorOf(chain + fmt::format("r{} ::= \"a\"?\n", kN));
  EXPECT_NE(nothing.find("left recursion: rule 's' can reach itself"), std::string::npos)
      << nothing.substr(0, 200);
  EXPECT_EQ(ErrorOf(chain + fmt::format("r{} ::= \"a\"\n", kN)), "ok");
}

TEST(GrammarParser, DeepNestingIsAnErrorNotACrash) {
  std::string text = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(ErrorOf(text).find("nested deeper than"), std::string::npos);
}

TEST(GrammarParser, ArbitraryBytesNeverCrash) {
  // A poor man's fuzz loop; the libFuzzer harness calls ParseGrammar too.
  uint32_t x = 12345;
  const std::string alphabet = "root ::= \"a-z[]()|*+?{},.^\\\n#xu0123456789 ";
  for (int i = 0; i < 20000; ++i) {
    std::string text = "root ::= ";
    const int n = static_cast<int>(x % 24);
    for (int j = 0; j < n; ++j) {
      x = x * 1664525 + 1013904223;
      text += alphabet[(x >> 16) % alphabet.size()];
    }
    (void)ParseGrammar(text);
  }
}

}  // namespace
}  // namespace rotor::grammar
