#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace rotor {
namespace {

const std::string kFffd(kUtf8Replacement);

TEST(Utf8, Scan) {
  EXPECT_EQ(ScanUtf8("a").kind, Utf8Scan::kComplete);
  EXPECT_EQ(ScanUtf8("\xC3\xA9").length, 2u);
  EXPECT_EQ(ScanUtf8("\xF0\x9F\xA6\x99").kind, Utf8Scan::kComplete);
  EXPECT_EQ(ScanUtf8("\xF0\x9F\xA6\x99").length, 4u);
  Utf8Scan s = ScanUtf8("\xF0\x9F");
  EXPECT_EQ(s.kind, Utf8Scan::kIncomplete);
  EXPECT_EQ(s.length, 2u);
  EXPECT_EQ(ScanUtf8("\x80").kind, Utf8Scan::kInvalid);
  EXPECT_EQ(ScanUtf8("\xC0\x80").kind, Utf8Scan::kInvalid);          // overlong
  EXPECT_EQ(ScanUtf8("\xE0\x80\x80").kind, Utf8Scan::kInvalid);      // overlong
  EXPECT_EQ(ScanUtf8("\xED\xA0\x80").kind, Utf8Scan::kInvalid);      // surrogate
  EXPECT_EQ(ScanUtf8("\xF4\x90\x80\x80").kind, Utf8Scan::kInvalid);  // > U+10FFFF
  s = ScanUtf8("\xE2\x96x");
  EXPECT_EQ(s.kind, Utf8Scan::kInvalid);
  EXPECT_EQ(s.length, 2u);  // the maximal valid prefix becomes one U+FFFD
}

TEST(Utf8, AppendValid) {
  std::string out;
  EXPECT_EQ(AppendValidUtf8("ab\xC3\xA9", false, &out), 4u);
  EXPECT_EQ(out, "ab\xC3\xA9");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("a\xF0\x9F\xA6", false, &out), 1u);  // holds the partial emoji
  EXPECT_EQ(out, "a");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("a\xF0\x9F\xA6", true, &out), 4u);
  EXPECT_EQ(out, "a" + kFffd);
  out.clear();
  EXPECT_EQ(AppendValidUtf8("\xFF\xE2\x96x\x80", false, &out), 5u);
  EXPECT_EQ(out, kFffd + kFffd + "x" + kFffd);
}

}  // namespace
}  // namespace rotor
