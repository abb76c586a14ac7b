#include "grammar/grammar.h"

#include <gtest/gtest.h>

namespace rotor::grammar {
namespace {

TEST(Element, MatchesRangesAndNegation) {
  Element e{.kind = Element::Kind::kChars, .ranges = {{'a', 'c'}, {'x', 'x'}}};
  EXPECT_TRUE(e.Matches('b'));
  EXPECT_TRUE(e.Matches('x'));
  EXPECT_FALSE(e.Matches('d'));
  EXPECT_TRUE(e.MatchesAnyIn('c', 'z'));
  EXPECT_FALSE(e.MatchesAnyIn('d', 'w'));
  e.negated = true;
  EXPECT_FALSE(e.Matches('b'));
  EXPECT_TRUE(e.Matches('d'));
  EXPECT_FALSE(e.MatchesAnyIn('a', 'c'));
  EXPECT_TRUE(e.MatchesAnyIn('a', 'd'));
  EXPECT_TRUE(e.MatchesAnyIn('c', 'x'));
  const Element any{.kind = Element::Kind::kChars, .negated = true};
  EXPECT_TRUE(any.Matches(0x1F600));
}

TEST(Grammar, FindsRulesByName) {
  auto g = ParseGrammar("root ::= a\na ::= \"x\"");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->Find("root"), (*g)->root);
  EXPECT_GE((*g)->Find("a"), 0);
  EXPECT_EQ((*g)->Find("b"), -1);
}

}  // namespace
}  // namespace rotor::grammar
