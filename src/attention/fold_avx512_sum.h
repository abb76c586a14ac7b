// Internal to the AVX-512 translation units of attention (compiled with the
// same flags): the horizontal sums of four query heads' score lanes in one
// tree (the pair products, fold_pairs_avx512.cc; the decoded keys of a GQA
// group, fold_quant_avx512.cc).
#pragma once

#include <immintrin.h>

namespace rotor::attn {
namespace {

// The sums of a, b, c and d at once, each in PairSum's order
// (fold_pairs.cc): [a.lo | b.lo] + [a.hi | b.hi] as fold_pairs_avx512.cc's
// Sum2, the same for c and d; then the two halves of each head's eight
// (blocks 0 and 2 of both against 1 and 3), then (0 + 2), (1 + 3) and their
// sum in every 128-bit block (13 operations and three extractions where two
// Sum2 take 20 and two).
inline void Sum4(__m512 a, __m512 b, __m512 c, __m512 d, float* sa, float* sb, float* sc,
                 float* sd) {
  const __m512 ab =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88),   // i of each head's eight
                           _mm512_shuffle_f32x4(ab, cd, 0xDD));  // i + 4
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_movehdup_ps(t));
  *sa = _mm512_cvtss_f32(t);
  *sb = _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 1));
  *sc = _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));
  *sd = _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 3));
}

}  // namespace
}  // namespace rotor::attn
