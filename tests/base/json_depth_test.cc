// The nesting scan that keeps deeply nested JSON away from recursive code.
#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace rotor {
namespace {

TEST(JsonNesting, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(JsonNesting(""), 0);
  EXPECT_EQ(JsonNesting("7"), 0);
  EXPECT_EQ(JsonNesting(R"("[[[{{")"), 0);
  EXPECT_EQ(JsonNesting("[]"), 1);
  EXPECT_EQ(JsonNesting(R"({"a": [1, {"b": [[]]}], "c": {}})"), 5);
  EXPECT_EQ(JsonNesting(R"(["\"[[[", "\\", [2]])"), 2);  // an escaped quote, then a backslash
  EXPECT_EQ(JsonNesting("]]]][["), 2);                   // not JSON: a number all the same
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(JsonNesting(deep), 100000);
}

}  // namespace
}  // namespace rotor
