// UTF-8 helpers for the tokenizers: splitting text into characters (invalid
// sequences included) and cleaning byte streams for output.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rotor {

// "\xEF\xBF\xBD", U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

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
