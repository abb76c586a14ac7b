// UTF-8 helpers for the tokenizers: splitting text into characters the way
// llama.cpp does, and cleaning byte streams for output.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rotor {

// "\xEF\xBF\xBD", U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence a byte starts, from its high nibble alone:
// 0x0-0xB -> 1 (ASCII and stray continuation bytes), 0xC-0xD -> 2, 0xE -> 3,
// 0xF -> 4. This is llama.cpp's unicode_len_utf8: the SPM tokenizer splits its
// input into symbols of this length (cut at the end of the text), so invalid
// input still yields symbols and falls back to byte tokens.
inline size_t Utf8LenFromLeadByte(unsigned char c) {
  static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

// Result of looking at the start of a byte string for one UTF-8 character.
struct Utf8Scan {
  enum Kind { kComplete, kIncomplete, kInvalid };
  Kind kind;
  // kComplete: the character's length. kIncomplete: the bytes present (all a
  // valid prefix). kInvalid: the bytes to replace by one U+FFFD (the maximal
  // valid prefix, at least 1), as the Unicode standard recommends.
  size_t length;
};

// Scans one character at the start of `s` (not empty) with strict validation
// (no overlongs, surrogates or code points above U+10FFFF).
Utf8Scan ScanUtf8(std::string_view s);

// Appends the complete, valid characters at the start of `s` to `out` and
// replaces invalid sequences with U+FFFD. Returns the number of bytes consumed:
// everything except a trailing incomplete (but so far valid) sequence, unless
// `final` is set, in which case that too becomes U+FFFD.
size_t AppendValidUtf8(std::string_view s, bool final, std::string* out);

}  // namespace rotor
