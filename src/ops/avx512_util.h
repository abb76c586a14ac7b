// Internal helpers of the AVX-512 translation units. Include ONLY from
// *_avx512.cc files (all compiled with the same ISA flags, so the inline
// copies the linker merges are identical).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace rotor::ops::internal::avx512 {

inline __mmask16 TailMask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// {sum(a), sum(b), sum(c), sum(d)}.
inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d.
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  // Per 128-bit lane: [a, b, c, d] partial sums.
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(abcd),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <DType kT>
inline __m512 LoadW(const uint8_t* row, int64_t i) {
  if constexpr (kT == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    if constexpr (kT == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <DType kT>
inline __m512 LoadWMasked(const uint8_t* row, int64_t i, __mmask16 mk) {
  if constexpr (kT == DType::kF32) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(row) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (kT == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Lane pattern {a x8, b x8} of two f32 values.
inline __m512 Pattern2(float a, float b) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

}  // namespace rotor::ops::internal::avx512
