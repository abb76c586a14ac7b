// IEEE half and bfloat16 conversions, portable scalar versions (kernels use
// F16C / AVX-512 BF16 in their fast paths).
#pragma once

#include <cstdint>
#include <cstring>

namespace rotor {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, with overflow to infinity and subnormals.
inline uint16_t F32ToF16(float f) {
  uint32_t x = FloatToBits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float v = BitsToFloat(abs) * 16777216.0f;  // in units of 2^-24
    uint32_t m = static_cast<uint32_t>(v);
    float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = abs & 0x7fffff;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float BF16ToF32(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t F32ToBF16(float f) {
  uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace rotor
