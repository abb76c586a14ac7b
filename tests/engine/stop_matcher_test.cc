#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace rotor {
namespace {

TEST(StopMatcher, HoldsBackPossiblePrefixes) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.Push("hello E"), "hello ");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("X"), "ENX");
  EXPECT_EQ(m.Push(" world\n"), " world");
  EXPECT_EQ(m.Push("\nmore"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, StopInsideOnePiece) {
  StopMatcher m({"cat"});
  EXPECT_EQ(m.Push("the cat sat"), "the ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcher, FlushReturnsHeldText) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.Push("xab"), "x");
  EXPECT_EQ(m.Flush(), "ab");
  StopMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

}  // namespace
}  // namespace rotor
