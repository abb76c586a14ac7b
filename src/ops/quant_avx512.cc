// AVX-512 row conversions, dot products and activation quantization.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

inline float HalfToFloat(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Calls fn(i, v, mask) for each group of up to 16 elements of row, v holding
// them in f32 (lanes outside mask are 0).
template <typename F>
inline void ForEach16(DType t, const void* row, int64_t n, F&& fn) {
  const uint8_t* src = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        fn(i, _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(src) + i), mk);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(src) + i);
        fn(i, _mm512_cvtph_ps(h), mk);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(src) + i);
        fn(i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), mk);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ8_0);
        const __m512 d = _mm512_set1_ps(HalfToFloat(blk));
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18));
        fn(b * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))),
           __mmask16{0xffff});
        fn(b * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))),
           __mmask16{0xffff});
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ4_0);
        const __m512 d = _mm512_set1_ps(HalfToFloat(blk));
        const __m512i q =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
        const __m512i eight = _mm512_set1_epi32(8), low = _mm512_set1_epi32(15);
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, low), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
        fn(b * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), __mmask16{0xffff});
        fn(b * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), __mmask16{0xffff});
      }
      return;
    default:
      UnsupportedType(t);
  }
}

// roundf (half away from zero) of each lane, as an int32.
inline __m512i RoundHalfAway(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_sub_ps(v, t);
  const __m512 sign = _mm512_and_ps(v, _mm512_set1_ps(-0.f));
  const __m512 one = _mm512_or_ps(sign, _mm512_set1_ps(1.f));
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(frac), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm512_cvtps_epi32(_mm512_mask_add_ps(t, up, t, one));
}

// Block x[0, 32) as q8_0 (ref::QuantizeActivations, bit for bit): its scale
// into *d, its 32 quants returned in order.
inline __m256i QuantizeBlock(const float* x, float* d) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
  const float db = amax / 127.f;
  const float id = db != 0.f ? 1.f / db : 0.f;
  *d = db;
  const __m512 vid = _mm512_set1_ps(id);
  const __m128i q0 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v0, vid)));
  const __m128i q1 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v1, vid)));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  ForEach16(t, src, n,
            [&](int64_t i, __m512 v, __mmask16 mk) { _mm512_mask_storeu_ps(dst + i, mk, v); });
}

void F32ToF16Row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, mk, h);
  }
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  ForEach16(t, w_row, n, [&](int64_t i, __m512 v, __mmask16 mk) {
    acc = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(mk, x + i), acc);
  });
  return _mm512_reduce_add_ps(acc);
}

void AxpyRow(DType t, float a, const void* row, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  ForEach16(t, row, n, [&](int64_t i, __m512 v, __mmask16 mk) {
    _mm512_mask_storeu_ps(y + i, mk, _mm512_fmadd_ps(va, v, _mm512_maskz_loadu_ps(mk, y + i)));
  });
}

// Same results as ref::QuantizeActivations, bit for bit.
void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), QuantizeBlock(x + b * 32, d + b));
}

void PackActivationTiles(const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1,
                         uint8_t* acts) {
  constexpr int kFields = kPackedActBytes / 4;
  const int64_t nb = k / 32;
  const __m256i zero = _mm256_setzero_si256(), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t t0 = 0; t0 < m; t0 += kPackedTileTokens) {
    const int tokens = static_cast<int>(std::min<int64_t>(kPackedTileTokens, m - t0));
    int32_t* tile = reinterpret_cast<int32_t*>(acts + t0 * nb * kPackedActBytes);
    // quad i of a token at i * tokens
    const __m256i quad_at =
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(tokens));
    for (int64_t j = j0; j < j1; ++j) {
      int32_t* aj = tile + j * tokens * kFields;  // [kFields][tokens]
      for (int t = 0; t < tokens; ++t) {
        float d;
        const __m256i q = QuantizeBlock(x + (t0 + t) * k + j * 32, &d);  // [32]
        _mm256_i32scatter_epi32(aj + t, quad_at, q, 4);
        // Sums of q + 128 per 8 bytes: [0, 8), [8, 16) | [16, 24), [24, 32).
        const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, flip), zero);
        const __m128i s_lo = _mm256_castsi256_si128(s), s_hi = _mm256_extracti128_si256(s, 1);
        const int32_t lo = _mm_cvtsi128_si32(s_lo) + _mm_extract_epi32(s_lo, 2) - 16 * 128;
        const int32_t sum = lo + _mm_cvtsi128_si32(s_hi) + _mm_extract_epi32(s_hi, 2) - 16 * 128;
        const float xsum = d * static_cast<float>(sum);
        aj[kActSum * tokens + t] = sum;
        std::memcpy(&aj[kActScale * tokens + t], &d, 4);
        aj[kActSumLo * tokens + t] = lo;
        std::memcpy(&aj[kActXsum * tokens + t], &xsum, 4);
        aj[kActBiasQ8 * tokens + t] = -128 * sum;
        aj[kActBiasQ4 * tokens + t] = -8 * sum;
      }
    }
  }
}

}  // namespace rotor::ops::internal::avx512
