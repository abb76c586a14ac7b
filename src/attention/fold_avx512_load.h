// Internal to the AVX-512 translation units of attention (compiled with the
// same flags): 16 values of a K or V head of any element type as f32
// (fold_quant_avx512.cc's folds, fold_float_avx512.cc's scores).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "attention/fold.h"

namespace rotor::attn {
namespace {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Bytes of one 32-element block.
template <Elem T>
constexpr int BlockBytes() {
  return T == Elem::kQ8_0 ? 34 : T == Elem::kQ4_0 ? 18 : 22;
}

// Values [16 i, 16 i + 16) of a head of type T, as f32 (the block types in
// blocks of 32: values 16 i.. are half i % 2 of block i / 2).
template <Elem T>
inline __m512 Load16(const uint8_t* head, int i) {
  if constexpr (T == Elem::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(head) + 16 * i);
  } else if constexpr (T == Elem::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32 * i)));
  } else if constexpr (T == Elem::kBF16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  } else {
    const uint8_t* blk = head + (i >> 1) * BlockBytes<T>();
    const int half = i & 1;
    __m512i x;
    if constexpr (T == Elem::kQ8_0) {
      x = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * half)));
    } else {
      __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (T == Elem::kQ5_0 ? 6 : 2)));
      if (half) q = _mm_srli_epi16(q, 4);
      x = _mm512_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(15)));
      if constexpr (T == Elem::kQ5_0) {
        uint32_t qh;
        std::memcpy(&qh, blk + 2, 4);
        x = _mm512_mask_add_epi32(x, static_cast<__mmask16>(qh >> (16 * half)), x,
                                  _mm512_set1_epi32(16));
        x = _mm512_sub_epi32(x, _mm512_set1_epi32(16));
      } else {
        x = _mm512_sub_epi32(x, _mm512_set1_epi32(8));
      }
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(Half(blk)));
  }
}

}  // namespace
}  // namespace rotor::attn
