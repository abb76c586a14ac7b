// The matcher's parse stack: inline up to kInline elements, on the heap past
// them; copies, moves and comparisons the same either way; and a grammar whose
// stacks grow past the inline room (nesting 40 deep) still matches.
#include "grammar/small_stack.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace rotor::grammar {
namespace {

TEST(SmallStack, InlineAndHeapBehaveAlike) {
  std::vector<Element> elements(40);
  for (uint32_t n : {0u, 3u, SmallStack::kInline, SmallStack::kInline + 1, 40u}) {
    SmallStack s;
    for (uint32_t i = 0; i < n; ++i) s.push_back(&elements[i]);
    ASSERT_EQ(s.size(), n);
    if (n > 0) {
      EXPECT_EQ(s.back(), &elements[n - 1]);
    }
    SmallStack copy = s;
    EXPECT_TRUE(copy == s);
    SmallStack moved = std::move(copy);
    EXPECT_TRUE(moved == s);
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from stack is empty
    SmallStack part(s.begin(), s.end() - (n > 0 ? 1 : 0));
    EXPECT_EQ(part.size(), n > 0 ? n - 1 : 0);
    EXPECT_TRUE(n == 0 || !(part == s));
    SmallStack assigned;
    assigned.push_back(&elements[0]);
    assigned = s;
    EXPECT_TRUE(assigned == s);
    assigned = std::move(moved);
    EXPECT_TRUE(assigned == s);
    while (!s.empty()) s.pop_back();
    EXPECT_EQ(s.size(), 0u);
    s.push_back(&elements[1]);  // reused after emptying
    EXPECT_EQ(s.back(), &elements[1]);
  }
}

TEST(SmallStack, DeepNestingMatches) {
  auto g = ParseGrammar(R"g(root ::= "(" root ")" | "x")g");
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  const std::string text = std::string(40, '(') + "x" + std::string(40, ')');
  EXPECT_TRUE(m.Accept(text));
  EXPECT_TRUE(m.CanEnd());
  Matcher n(*g);
  EXPECT_FALSE(n.Accept(std::string(40, '(') + "x" + std::string(39, ')') + "x"));
}

}  // namespace
}  // namespace rotor::grammar
