// AVX-512 dequantization of q4_1, q5_0, q5_1, iq4_nl and the K-quants, with
// GGML's f32 arithmetic (sub-block scale d * sc, then scale * q - min; no
// fused multiply-add: this file builds with -ffp-contract=off), so the results
// equal ref::DequantizeRow bit for bit.
#include <immintrin.h>

#include <cstring>

#include "ops/kernels.h"
#include "ops/kquant_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

inline __m512 Lane(__m512 v, int i) { return _mm512_permutexvar_ps(_mm512_set1_epi32(i), v); }

// The 16 quants of bytes [16 q, 16 q + 16) of register w, as f32.
inline __m512 Quarter(__m512i w, int q) {
  __m128i b;
  switch (q) {
    case 0:
      b = _mm512_extracti32x4_epi32(w, 0);
      break;
    case 1:
      b = _mm512_extracti32x4_epi32(w, 1);
      break;
    case 2:
      b = _mm512_extracti32x4_epi32(w, 2);
      break;
    default:
      b = _mm512_extracti32x4_epi32(w, 3);
  }
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}

template <DType kT>
void DequantizeK16(const uint8_t* src, float* y, int64_t n) {
  constexpr float kBias = static_cast<float>(K16<kT>::kBias);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const uint8_t* blk = src + i * K16<kT>::kBytes;
    __m512i w[4];
    __m512 s16, m16 = _mm512_setzero_ps();
    UnpackK16<kT>(blk, w, &s16, &m16);
    for (int v = 0; v < 4; ++v)
      for (int q = 0; q < 4; ++q) {
        const int sub = 4 * v + q;
        const __m512 qf = _mm512_sub_ps(Quarter(w[v], q), _mm512_set1_ps(kBias));
        __m512 val = _mm512_mul_ps(Lane(s16, sub), qf);
        if constexpr (kT == DType::kQ2_K) val = _mm512_sub_ps(val, Lane(m16, sub));
        _mm512_storeu_ps(y + 16 * sub, val);
      }
  }
}

template <bool kQ5>
void DequantizeK45(const uint8_t* src, float* y, int64_t n) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const uint8_t* blk = src + i * kBytes;
    __m512i w[4];
    UnpackK45<kQ5>(blk, w);
    __m256 sc, mn;
    ScalesMins(blk + 4, &sc, &mn);
    const __m512 s8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(Half(blk)), sc));
    const __m512 m8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(Half(blk + 2)), mn));
    for (int v = 0; v < 4; ++v)
      for (int q = 0; q < 4; ++q) {
        // Register v's byte 16 q: element (q / 2) * 64 + (v % 2) * 32 + (v / 2) * 128 + (q % 2) * 16.
        const int e = (q / 2) * 64 + (v % 2) * 32 + (v / 2) * 128 + (q % 2) * 16;
        const __m512 val = _mm512_sub_ps(_mm512_mul_ps(Lane(s8, e / 32), Quarter(w[v], q)),
                                         Lane(m8, e / 32));
        _mm512_storeu_ps(y + e, val);
      }
  }
}

// Blocks of 32 (q4_1, q5_0, q5_1, iq4_nl): quants 0..15 from the low
// nibbles, 16..31 from the high ones (q5: bit 4 from qh bits 0..15 / 16..31).
template <DType kT>
void Dequantize32(const uint8_t* src, float* y, int64_t n) {
  constexpr int kBytes = kT == DType::kQ4_1   ? sizeof(BlockQ4_1)
                         : kT == DType::kQ5_0 ? sizeof(BlockQ5_0)
                         : kT == DType::kQ5_1 ? sizeof(BlockQ5_1)
                                              : sizeof(BlockIQ4_NL);
  constexpr int kQs = kBytes - 16;  // qs are the last 16 bytes
  constexpr bool kFive = kT == DType::kQ5_0 || kT == DType::kQ5_1;
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i one = _mm512_set1_epi32(1), nib = _mm512_set1_epi32(15);
  const __m512 table = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))));
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const uint8_t* blk = src + b * kBytes;
    const __m512 d = _mm512_set1_ps(Half(blk));
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQs)));
    __m512i q[2] = {_mm512_and_si512(bytes, nib), _mm512_srli_epi32(bytes, 4)};
    if constexpr (kFive) {
      const __m512i qh = _mm512_set1_epi32(static_cast<int>(LoadU32(blk + kQs - 4)));
      for (int h = 0; h < 2; ++h) {
        const __m512i bit = _mm512_and_si512(
            _mm512_srlv_epi32(qh, _mm512_add_epi32(iota, _mm512_set1_epi32(16 * h))), one);
        q[h] = _mm512_or_si512(q[h], _mm512_slli_epi32(bit, 4));
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m512 val;
      if constexpr (kT == DType::kQ4_1 || kT == DType::kQ5_1) {
        val = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q[h]), d),
                            _mm512_set1_ps(Half(blk + 2)));
      } else if constexpr (kT == DType::kQ5_0) {
        val = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q[h], _mm512_set1_epi32(16))), d);
      } else {
        val = _mm512_mul_ps(d, _mm512_permutexvar_ps(q[h], table));
      }
      _mm512_storeu_ps(y + 16 * h, val);
    }
  }
}

}  // namespace

void DequantizeBlocks(DType t, const void* src, float* dst, int64_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kQ4_1:
      return Dequantize32<DType::kQ4_1>(s, dst, n);
    case DType::kQ5_0:
      return Dequantize32<DType::kQ5_0>(s, dst, n);
    case DType::kQ5_1:
      return Dequantize32<DType::kQ5_1>(s, dst, n);
    case DType::kIQ4_NL:
      return Dequantize32<DType::kIQ4_NL>(s, dst, n);
    case DType::kQ2_K:
      return DequantizeK16<DType::kQ2_K>(s, dst, n);
    case DType::kQ3_K:
      return DequantizeK16<DType::kQ3_K>(s, dst, n);
    case DType::kQ4_K:
      return DequantizeK45<false>(s, dst, n);
    case DType::kQ5_K:
      return DequantizeK45<true>(s, dst, n);
    case DType::kQ6_K:
      return DequantizeK16<DType::kQ6_K>(s, dst, n);
    default:
      UnsupportedType(t);
  }
}

}  // namespace rotor::ops::internal::avx512
