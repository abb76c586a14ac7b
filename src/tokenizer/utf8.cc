#include "tokenizer/utf8.h"

namespace rotor {

namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

Utf8Scan ScanUtf8(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Utf8Scan::kComplete, 1};
  size_t need;
  // The range allowed for the second byte narrows for E0 (no overlongs), ED (no
  // surrogates), F0 (no overlongs) and F4 (nothing above U+10FFFF).
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Scan::kInvalid, 1};  // continuation byte, C0, C1, F5..FF
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return {Utf8Scan::kIncomplete, i};
    const auto b = static_cast<unsigned char>(s[i]);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : IsContinuation(b);
    if (!ok) return {Utf8Scan::kInvalid, i};
  }
  return {Utf8Scan::kComplete, need};
}

size_t AppendValidUtf8(std::string_view s, bool final, std::string* out) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Scan scan = ScanUtf8(s.substr(i));
    switch (scan.kind) {
      case Utf8Scan::kComplete:
        out->append(s.substr(i, scan.length));
        break;
      case Utf8Scan::kInvalid:
        out->append(kUtf8Replacement);
        break;
      case Utf8Scan::kIncomplete:
        if (!final) return i;
        out->append(kUtf8Replacement);
        break;
    }
    i += scan.length;
  }
  return i;
}

}  // namespace rotor
