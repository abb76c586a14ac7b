// Element types with their GGML ids and block layouts (GGUF tensor types).
// Quantized types store rows as blocks of `block_size` elements; a row of n
// elements takes n / block_size * type_size bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rotor {

// Values are the GGML type ids stored in GGUF files.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct DTypeTraits {
  DType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q8_0", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
  bool supported;         // rotor's kernels can read it
};

// Traits of a GGML type id, or nullopt for an id rotor does not know.
std::optional<DTypeTraits> LookupDType(uint32_t ggml_id);
const DTypeTraits& Traits(DType t);
inline std::string_view DTypeName(DType t) { return Traits(t).name; }
// Parses "f32", "F16", "q4_0", ...; nullopt if unknown.
std::optional<DType> ParseDType(std::string_view name);

// The type a writer uses for rows of k elements when `want` cannot hold them
// (k not a multiple of its block), as llama-quantize falls back: q2_K / q3_K
// -> iq4_nl, q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0; a 32-block type when k
// is not a multiple of 32 -> f16. `want` itself when k fits.
DType FallbackForRowSize(DType want, int64_t k);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline int64_t RowBytes(DType t, int64_t n) {
  const DTypeTraits& tr = Traits(t);
  return n / tr.block_size * tr.type_size;
}

// GGML block layouts (little-endian, packed). d is an IEEE half.
inline constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;          // scale
  int8_t qs[kQK8_0];   // x[i] = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);

inline constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;               // scale
  uint8_t qs[kQK4_0 / 2];   // x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8)
};
static_assert(sizeof(BlockQ4_0) == 18);

inline constexpr int kQK4_1 = 32;
struct BlockQ4_1 {
  uint16_t d;               // scale
  uint16_t m;               // offset: x[i] = d * nibble + m (nibbles as q4_0)
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

inline constexpr int kQK5_0 = 32;
struct BlockQ5_0 {
  uint16_t d;               // scale: x[i] = d * (q5 - 16)
  uint8_t qh[4];            // bit i (little-endian u32) = bit 4 of quant i
  uint8_t qs[kQK5_0 / 2];   // low 4 bits: quant i in qs[i] & 15, quant i + 16 in qs[i] >> 4
};
static_assert(sizeof(BlockQ5_0) == 22);

inline constexpr int kQK5_1 = 32;
struct BlockQ5_1 {
  uint16_t d;               // scale: x[i] = d * q5 + m (quants as q5_0)
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

inline constexpr int kQK4_NL = 32;
// Non-linear 4-bit: x[i] = d * kIq4nlValues[nibble] (nibbles as q4_0).
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// K-quants: super-blocks of 256. Element e of a super-block lies in
// "half" h = e / 128, "quarter" j = (e % 128) / 32, lane l = e % 32.
inline constexpr int kQK_K = 256;

// x = d * (sc & 15) * q2 - dmin * (sc >> 4); 16 sub-blocks of 16 (scales[e / 16]);
// q2 = (qs[32 h + l] >> 2 j) & 3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// x = d * (s6 - 32) * (q2 - (hbit ? 0 : 4)); q2 as q2_K, hbit = bit (4 h + j) of
// hmask[l]; 16 six-bit scales s6 (sub-blocks of 16): low 4 bits in scales[i % 8]
// (low nibble for i < 8, high nibble above), high 2 bits at bit 2 (i / 4) of
// scales[8 + i % 4].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 sub-blocks of 32 with six-bit scale sc_i and min m_i (12 packed bytes):
// i < 4: sc = s[i] & 63, m = s[i + 4] & 63; i >= 4: sc = (s[i + 4] & 15) |
// (s[i - 4] >> 6) << 4, m = (s[i + 4] >> 4) | (s[i] >> 6) << 4.
// q4_K: x = d * sc * q4 - dmin * m over sub-block e / 32; chunk c = e / 64 uses
// qs[32 c + l]: low nibble for e % 64 < 32, high nibble above.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// q5_K: as q4_K with a fifth bit: bit (e / 32) of qh[e % 32] adds 16.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// q6_K: x = d * scales[e / 16] * (q6 - 32); q6 = low 4 bits from ql[64 h + l +
// 32 (j & 1)] (low nibble for j < 2, high nibble above), high 2 bits at bit
// 2 j of qh[32 h + l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace rotor
