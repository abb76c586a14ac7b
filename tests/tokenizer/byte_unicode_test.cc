#include "tokenizer/byte_unicode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tokenizer/utf8.h"

namespace rotor {
namespace {

TEST(ByteUnicode, KnownCharacters) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(ByteToUnicode(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(ByteToUnicode('a'), "a");
  EXPECT_EQ(ByteToUnicode('!'), "!");
  EXPECT_EQ(ByteToUnicode(0x7F), "\xC4\xA1");  // the 34th remapped byte: U+0121
  EXPECT_EQ(ByteToUnicode(0xAD), "\xC5\x83");  // the last one: U+0143
  EXPECT_EQ(ByteToUnicode(0xE9), "\xC3\xA9");  // Latin-1 stands for itself
  EXPECT_EQ(UnicodeToByte(0x120), ' ');
  EXPECT_EQ(UnicodeToByte('a'), 'a');
  EXPECT_EQ(UnicodeToByte(' '), -1);    // remapped away
  EXPECT_EQ(UnicodeToByte(0xAD), -1);   // soft hyphen is remapped
  EXPECT_EQ(UnicodeToByte(0x144), -1);  // past the table
  EXPECT_EQ(UnicodeToByte(0x4E2D), -1);
}

TEST(ByteUnicode, IsABijectionOntoPrintableCharacters) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string_view s = ByteToUnicode(static_cast<uint8_t>(b));
    ASSERT_TRUE(ScanUtf8(s).kind == Utf8Scan::kComplete && ScanUtf8(s).length == s.size());
    EXPECT_TRUE(seen.insert(std::string(s)).second) << b;
    EXPECT_NE(s[0], ' ');
    EXPECT_FALSE(s.size() == 1 && static_cast<unsigned char>(s[0]) < 0x21) << b;
    EXPECT_EQ(ByteDecode(s), std::string(1, static_cast<char>(b)));
  }
}

TEST(ByteUnicode, EncodeDecodeRoundTripsAnyBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string encoded;
  AppendByteEncoded(all, &encoded);
  EXPECT_EQ(ByteDecode(encoded), all);
  std::string hello;
  AppendByteEncoded(" Hello\n", &hello);
  EXPECT_EQ(hello, "\xC4\xA0Hello\xC4\x8A");
}

TEST(ByteUnicode, DecodeKeepsWhatIsNotMapped) {
  EXPECT_EQ(ByteDecode("\xE4\xB8\xAD"), "\xE4\xB8\xAD");  // U+4E2D stays itself
  EXPECT_EQ(ByteDecode("a\xFF"
                       "b"),
            "a\xFF"
            "b");                         // invalid UTF-8 stays
  EXPECT_EQ(ByteDecode("\xC4"), "\xC4");  // cut character
  EXPECT_EQ(ByteDecode(""), "");
}

}  // namespace
}  // namespace rotor
