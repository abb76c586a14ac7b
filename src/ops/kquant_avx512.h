// Internal helpers of the AVX-512 K-quant kernels (GEMV and dequantization):
// super-blocks unpacked to unsigned bytes in registers. Include ONLY from
// *_avx512.cc files (see avx512_util.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/avx512_util.h"
#include "tensor/dtype.h"

namespace rotor::ops::internal::avx512 {

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 64 int8 activations: the 32 at a, then the 32 at b.
inline __m512i Join(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// Lane index pattern {a x8, b x8}.
inline __m512i Idx2(int a, int b) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}

// Byte pattern {a x32, b x32}.
inline __m512i Bytes2(int a, int b) {
  return _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(static_cast<char>(a)),
                                _mm512_set1_epi8(static_cast<char>(b)));
}

// The eight 6-bit scales and mins of a q4_K / q5_K block, as f32 lanes.
inline void ScalesMins(const uint8_t* s, __m256* sc, __m256* mn) {
  const uint32_t w0 = LoadU32(s), w1 = LoadU32(s + 4), w2 = LoadU32(s + 8);
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
  const auto to_f32 = [](uint32_t lo, uint32_t hi) {
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(hi) << 32 | lo));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  };
  *sc = to_f32(sc_lo, sc_hi);
  *mn = to_f32(m_lo, m_hi);
}

inline void Store(const __m512* acc, const float* sub, int kR, int64_t r0, float* y) {
  __m512 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r] : _mm512_setzero_ps();
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r] - (sub ? sub[r] : 0.f);
}

inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// q4_K (kQ5 false) / q5_K: the quants of a super-block as unsigned bytes in
// 4 registers; register v holds the elements {0..31, 64..95}, {32..63,
// 96..127}, {128..159, 192..223}, {160..191, 224..255}: the low / high nibbles
// of qs[0..63] and qs[64..127] (q5_K: plus 16 where bit e / 32 of qh[e % 32]).
template <bool kQ5>
inline void UnpackK45(const uint8_t* blk, __m512i* wq) {
  constexpr int kQs = kQ5 ? 48 : 16;  // offset of qs
  const __m512i nib = _mm512_set1_epi8(15);
  const __m512i qa = _mm512_loadu_si512(blk + kQs), qb = _mm512_loadu_si512(blk + kQs + 64);
  wq[0] = _mm512_and_si512(qa, nib);
  wq[1] = _mm512_and_si512(_mm512_srli_epi16(qa, 4), nib);
  wq[2] = _mm512_and_si512(qb, nib);
  wq[3] = _mm512_and_si512(_mm512_srli_epi16(qb, 4), nib);
  if constexpr (kQ5) {
    const __m512i hbit[4] = {Bytes2(1, 4), Bytes2(2, 8), Bytes2(16, 64), Bytes2(32, 128)};
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)));
    for (int v = 0; v < 4; ++v)
      wq[v] = _mm512_mask_add_epi8(wq[v], _mm512_test_epi8_mask(qh, hbit[v]), wq[v],
                                   _mm512_set1_epi8(16));
  }
}

// q2_K / q3_K / q6_K: sub-blocks of 16. The super-block is unpacked into 4
// registers of unsigned quants holding elements 64 v .. 64 v + 63 in order, so
// lane i of a vpdpbusd result covers sub-block 4 v + i / 4 and activation
// block 2 v + i / 8. kBias: the offset removed in int32 (q3_K 4, q6_K 32);
// q2_K subtracts dmin * m_i * (activation sum of sub-block i) instead.
template <DType kT>
struct K16 {
  static constexpr int kBytes = kT == DType::kQ2_K   ? sizeof(BlockQ2_K)
                                : kT == DType::kQ3_K ? sizeof(BlockQ3_K)
                                                     : sizeof(BlockQ6_K);
  static constexpr int kBias = kT == DType::kQ2_K ? 0 : kT == DType::kQ3_K ? 4 : 32;
  static constexpr int kLines = (kBytes + 63) / 64;
};

// q2_K / q3_K: the 2-bit fields of qs[32 h + l] at bits 2 j: register v
// (h = v / 2) takes j = 2 (v % 2) in bytes 0..31 and j + 1 in 32..63.
inline __m512i TwoBits(const uint8_t* qs, int v) {
  const __m512i q = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (v / 2))));
  const int j = 2 * (v % 2);
  const __m512i sh =
      _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(static_cast<short>(2 * j)),
                              _mm512_set1_epi16(static_cast<short>(2 * j + 2)));
  return _mm512_and_si512(_mm512_srlv_epi16(q, sh), _mm512_set1_epi8(3));
}

// Unsigned quants w[4], scales s16 = d * sc (f32 per sub-block) and for q2_K
// the mins m16 = dmin * m.
template <DType kT>
inline void UnpackK16(const uint8_t* blk, __m512i* w, __m512* s16, __m512* m16) {
  if constexpr (kT == DType::kQ2_K) {
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    *s16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))),
                         _mm512_set1_ps(Half(blk + 80)));
    *m16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)),
                         _mm512_set1_ps(Half(blk + 82)));
    for (int v = 0; v < 4; ++v) w[v] = TwoBits(blk + 16, v);
  } else if constexpr (kT == DType::kQ3_K) {
    // 6-bit scales: low 4 bits in bytes 0..7 (low nibble: scales 0..7, high
    // nibble: 8..15), high 2 bits in bytes 8..11 (bits 2 (i / 4) of byte 8 + i % 4).
    const uint8_t* sp = blk + 96;
    const uint32_t w0 = LoadU32(sp), w1 = LoadU32(sp + 4), w2 = LoadU32(sp + 8);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const __m128i sc = _mm_set_epi32(
        static_cast<int>(((w1 >> 4) & m4) | ((w2 >> 6) & m2) << 4),
        static_cast<int>(((w0 >> 4) & m4) | ((w2 >> 4) & m2) << 4),
        static_cast<int>((w1 & m4) | ((w2 >> 2) & m2) << 4), static_cast<int>((w0 & m4) | (w2 & m2) << 4));
    *s16 = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(sc), _mm512_set1_epi32(32))),
        _mm512_set1_ps(Half(blk + 108)));
    const __m512i hm =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    for (int v = 0; v < 4; ++v) {
      const int bit = 4 * (v / 2) + 2 * (v % 2);  // hmask bit of j = 2 (v % 2), h = v / 2
      const __mmask64 k = _mm512_test_epi8_mask(hm, Bytes2(1 << bit, 1 << (bit + 1)));
      const __m512i q = TwoBits(blk + 32, v);
      w[v] = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(4));
    }
  } else {
    *s16 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))),
                         _mm512_set1_ps(Half(blk + 208)));
    const __m512i nib = _mm512_set1_epi8(15), hmask = _mm512_set1_epi8(0x30);
    const __m512i shl =
        _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i shr =
        _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
      w[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, nib),
                                 _mm512_and_si512(_mm512_sllv_epi16(qh, shl), hmask));
      w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nib),
                                     _mm512_and_si512(_mm512_srlv_epi16(qh, shr), hmask));
    }
  }
}

}  // namespace rotor::ops::internal::avx512
