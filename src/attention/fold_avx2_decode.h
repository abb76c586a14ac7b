// Internal to the AVX2 translation units of attention (compiled with the same
// flags; fold_tile_int_avx512.cc, whose flags add AVX-512's, includes it too):
// eight elements of a K or V head of any element type, as f32 or (the block
// types) as their signed integers, an 8 x 8 transpose, and the vectorized exp.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "attention/fold.h"

namespace rotor::attn {
namespace {

// Bytes of one block of B elements of block type T (kv_quant.h's layouts).
template <Elem T, int B>
constexpr int BlockBytes() {
  return T == Elem::kQ8_0 ? 2 + B : T == Elem::kQ4_0 ? 2 + B / 2 : 2 + B / 8 + B / 2;
}

// The scale d of the block holding element e of a head of block type T.
template <Elem T, int B>
inline float Scale(const uint8_t* head, int e) {
  uint16_t h;
  std::memcpy(&h, head + (e / B) * BlockBytes<T, B>(), 2);
  return _cvtsh_ss(h);
}

// The signed integers of elements [e, e + 8) (e a multiple of 8) of a head
// of block type T in blocks of B (8, 16 or 32): one byte each, element e in
// the lowest byte. The same integers as KvUnpackBlock.
template <Elem T, int B>
inline uint64_t Ints8(const uint8_t* head, int e) {
  const uint8_t* blk = head + (e / B) * BlockBytes<T, B>();
  const int o = e % B;  // 0, 8, 16 or 24
  uint64_t x;
  if constexpr (T == Elem::kQ8_0) {
    std::memcpy(&x, blk + 2 + o, 8);
    return x;
  } else {
    constexpr int qs = T == Elem::kQ5_0 ? 2 + B / 8 : 2;  // offset of the nibbles
    if constexpr (B == 8) {  // 4 bytes: low nibbles are elements 0..3, high 4..7
      uint32_t w;
      std::memcpy(&w, blk + qs, 4);
      x = (w & 0x0F0F0F0Fu) | static_cast<uint64_t>((w >> 4) & 0x0F0F0F0Fu) << 32;
    } else {  // low nibbles of B/2 bytes are the first half, high ones the second
      std::memcpy(&x, blk + qs + o % (B / 2), 8);
      if (o >= B / 2) x >>= 4;
      x &= 0x0F0F0F0F0F0F0F0Full;
    }
    uint64_t off = 0x0808080808080808ull;
    if constexpr (T == Elem::kQ5_0) {
      uint32_t qh = 0;
      std::memcpy(&qh, blk + 2, B / 8);
      const uint64_t bits = (qh >> o) & 0xFF;  // bit 4 of each of the 8 quants
      // Bit i of `bits` alone in byte i (0 or 2^i), then 0x10 where it is set
      // (adding 0x7F carries into bit 7 exactly when the byte is not 0).
      const uint64_t spread = (bits * 0x0101010101010101ull) & 0x8040201008040201ull;
      x |= ((spread + 0x7F7F7F7F7F7F7F7Full) & 0x8080808080808080ull) >> 3;
      off = 0x1010101010101010ull;
    }
    // Byte-wise x - off, no borrow between bytes (each byte of x | 0x80 is
    // at least 0x80 > off); the xor restores bit 7 as the sign.
    return ((x | 0x8080808080808080ull) - off) ^ 0x8080808080808080ull;
  }
}

// The offset of the nibble types' stored (unsigned) quants: q = n - offset.
template <Elem T>
constexpr int QuantOffset() {
  return T == Elem::kQ4_0 ? 8 : T == Elem::kQ5_0 ? 16 : 0;
}

// The 32 unsigned quants n of a 32-element block of a nibble type (q4_0:
// 0..15, q5_0: 0..31), in element order: the integers are n - QuantOffset.
template <Elem T>
inline __m256i Unsigned32(const uint8_t* blk) {
  static_assert(T == Elem::kQ4_0 || T == Elem::kQ5_0);
  constexpr int qs = T == Elem::kQ5_0 ? 6 : 2;
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs));
  const __m128i low = _mm_set1_epi8(15);
  __m256i x = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low), _mm_and_si128(raw, low));
  if constexpr (T == Elem::kQ5_0) {
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    // Byte i of the block gets byte i / 8 of qh, then 0x10 where its bit
    // i % 8 is set (the shuffle is per 128-bit lane; each holds all of qh).
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                         3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i high = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    x = _mm256_or_si256(x, _mm256_and_si256(high, _mm256_set1_epi8(16)));
  }
  return x;
}

// The 32 signed integers of a 32-element block of block type T, in element
// order (the same as Ints8 four times).
template <Elem T>
inline __m256i Ints32(const uint8_t* blk) {
  if constexpr (T == Elem::kQ8_0)
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  else
    return _mm256_sub_epi8(Unsigned32<T>(blk), _mm256_set1_epi8(QuantOffset<T>()));
}

// Elements [e, e + 8) of a head of type T as f32 (the block types: d * q,
// the same products as KvDequantizeHeads).
template <Elem T, int B>
inline __m256 Load8(const uint8_t* head, int e) {
  if constexpr (T == Elem::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(head) + e);
  } else if constexpr (T == Elem::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 2 * e)));
  } else if constexpr (T == Elem::kBF16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 2 * e));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
  } else {
    const __m128i q = _mm_cvtsi64_si128(static_cast<long long>(Ints8<T, B>(head, e)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                         _mm256_set1_ps(Scale<T, B>(head, e)));
  }
}

// Elements [e, e + 32) (e a multiple of 32) of a head of block type T in
// blocks of 32 as f32, out[i] holding [e + 8i, e + 8i + 8): the values of
// Load8 four times (the same products d * q), the block's integers unpacked
// once and its scale read once.
template <Elem T>
inline void DecodeBlock32(const uint8_t* head, int e, __m256 out[4]) {
  static_assert(IsBlockType(T));
  const uint8_t* blk = head + (e / 32) * BlockBytes<T, 32>();
  const __m256i q = Ints32<T>(blk);
  const __m256 d = _mm256_set1_ps(Scale<T, 32>(blk, 0));
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i)
    out[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i])), d);
}

// Transposes the 8 x 8 floats of r in place.
inline void Transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// The f16 values at p[0..8) as f32, gathered into lanes by vpinsrw (eight
// 2-byte stores read back as one vector would stall store forwarding).
inline __m256 F16x8(const uint8_t* const p[8]) {
  auto at = [&](int i) {
    uint16_t h;
    std::memcpy(&h, p[i], 2);
    return static_cast<short>(h);
  };
  return _mm256_cvtph_ps(_mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)));
}

inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float Hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// Lanes i < n of 8: all ones, the others zero.
inline __m256i FirstLanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 0 (scores minus their max), Cephes' expf polynomial as in
// fold_avx512_exp.h: relative error ~1e-7; x below -87 gives exp(-87).
inline __m256 Exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n from its exponent bits (n >= -126 here: a normal number).
  const __m256i pow2 =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
}

}  // namespace
}  // namespace rotor::attn
