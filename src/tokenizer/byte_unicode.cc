#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace rotor {

namespace {

bool StandsForItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> code_point;  // [byte]
  std::array<char, 256 * 2> utf8;        // [byte][2]: the UTF-8 of code_point
  std::array<uint8_t, 256> utf8_len;     // [byte]
  std::array<int16_t, 0x144> byte;       // [code point < 0x144] -> byte or -1

  Tables() {
    byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = StandsForItself(b) ? static_cast<uint32_t>(b) : next++;
      code_point[b] = cp;
      byte[cp] = static_cast<int16_t>(b);
      if (cp < 0x80) {
        utf8[2 * b] = static_cast<char>(cp);
        utf8_len[b] = 1;
      } else {
        utf8[2 * b] = static_cast<char>(0xC0 | (cp >> 6));
        utf8[2 * b + 1] = static_cast<char>(0x80 | (cp & 0x3F));
        utf8_len[b] = 2;
      }
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t b) {
  const Tables& t = GetTables();
  return std::string_view(&t.utf8[2 * b], t.utf8_len[b]);
}

int UnicodeToByte(uint32_t cp) {
  const Tables& t = GetTables();
  return cp < t.byte.size() ? t.byte[cp] : -1;
}

void AppendByteEncoded(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out->append(&t.utf8[2 * b], t.utf8_len[b]);
  }
}

std::string ByteDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Scan scan = ScanUtf8(text.substr(i));
    if (scan.kind == Utf8Scan::kComplete) {
      const auto* s = reinterpret_cast<const unsigned char*>(text.data() + i);
      // Every code point of the mapping is below U+0800: one or two bytes.
      int b = -1;
      if (scan.length == 1) {
        b = UnicodeToByte(s[0]);
      } else if (scan.length == 2) {
        b = UnicodeToByte(((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu));
      }
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out.append(text.substr(i, scan.length));
      }
    } else {
      out.append(text.substr(i, scan.length));
    }
    i += scan.length;
  }
  return out;
}

}  // namespace rotor
