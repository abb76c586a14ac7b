// GPT-2's byte <-> Unicode mapping for byte-level BPE vocabularies: every byte
// of the input is shown as one printable code point, so that token texts and
// merges never hold raw spaces, control bytes or invalid UTF-8. Bytes that are
// printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves; the other 68 (0x00..0x20, 0x7F..0xA0, 0xAD) get U+0100.. in
// byte order, so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ'.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rotor {

// The UTF-8 text (1 or 2 bytes) of byte `b`'s code point.
std::string_view ByteToUnicode(uint8_t b);

// The byte a code point stands for, or -1 if it is not one of the 256.
int UnicodeToByte(uint32_t cp);

// Appends the mapped text of every byte of `bytes`.
void AppendByteEncoded(std::string_view bytes, std::string* out);

// The bytes a vocabulary text stands for: each code point of the mapping
// becomes its byte; anything else (a code point outside the 256, invalid
// UTF-8) is kept as it is, so nothing is lost.
std::string ByteDecode(std::string_view text);

}  // namespace rotor
