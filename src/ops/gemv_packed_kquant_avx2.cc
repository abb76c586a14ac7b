// AVX2 q2_K .. q6_K products over row-interleaved weights (PackWeight,
// kernels.h: PackedK), one kernel for every number of tokens: the AVX-512
// kernel (gemv_packed_kquant_avx512.cc) on ymm halves of its vectors.
//
// Each 64-byte vector of a record holds 4 bytes of each of 16 rows; a pass
// reads one half (8 rows) as a ymm and up to kMaxN tokens share it. The
// token's 4 activation bytes are broadcast to every lane, so each int32 lane
// sums one sub-block of one row, and the f32 work runs once per sub-block
// and token for 8 rows:
//   q4_K / q5_K: acc += (d * sc) * dx * isum - (dmin * m) * (dx * sum(qx))
//   q2_K:        the same, sum(qx) over the sub-block's 16
//   q6_K:        acc += (d * sc) * dx * (isum - 32 * sum(qx over the 16))
//   q3_K:        acc += (d * sc) * dx * (isum - 4 * sum(qx over the 16))
// AVX2 has no vpdpbusd: vpmaddubsw multiplies the unsigned values by the
// signed activation bytes into int16 pair sums (|x| <= 127), which add up
// in int16 as far as they cannot overflow, then vpmaddwd with ones:
//   q4_K: values <= 15, 15 * 127 * 2 = 3810 per pair: a sub-block's 8 quads;
//   q5_K: <= 31, 7874: 4 quads (two sums per sub-block);
//   q6_K: <= 63, 16002: 2 quads (two sums per sub-block of 16);
//   q3_K: <= 7, 1778: a sub-block's 4 quads; q2_K: <= 3, 762: the same.
// The integer sums are exact and the f32 steps the AVX-512 kernel's, in its
// order, so the outputs are the same bit for bit, and the same whatever m
// and the tile (batched == alone).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "ops/kernels.h"
#include "ops/packed_tiles.h"

namespace rotor::ops::internal::avx2 {
namespace {

// Bytes ahead of the weight stream to prefetch (as the AVX-512 kernels).
constexpr int kPrefetch = 16 << 10;

// Volatile asm: GCC 12 drops or hoists builtin prefetches in such loops.
inline void PrefetchLine(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// The activation fields of a tile of kTok tokens: field f of token t.
template <int kTok>
inline const int32_t* Field(const int32_t* aj, int f, int t) {
  return aj + f * kTok + t;
}
template <int kTok>
inline float FieldFloat(const int32_t* aj, int f, int t) {
  float v;
  std::memcpy(&v, Field<kTok>(aj, f, t), 4);
  return v;
}

// Bits shifted left by kBits (right when negative), within 32-bit lanes.
template <int kBits>
inline __m256i Shift(__m256i v) {
  if constexpr (kBits > 0) return _mm256_slli_epi32(v, kBits);
  if constexpr (kBits < 0) return _mm256_srli_epi32(v, -kBits);
  return v;
}

// Byte kByte of each 32-bit lane as f32: unsigned, or signed (q6_K scales).
template <int kByte, bool kSigned>
inline __m256 ByteF32(__m256i v) {
  if constexpr (kSigned) return _mm256_cvtepi32_ps(_mm256_srai_epi32(Shift<24 - 8 * kByte>(v), 24));
  return _mm256_cvtepi32_ps(_mm256_and_si256(Shift<-8 * kByte>(v), _mm256_set1_epi32(0xff)));
}

// Half kH (rows 8 kH .. 8 kH + 7) of vector `vec` of a record field.
template <int kH>
inline __m256i Load(const uint8_t* rec, int offset, int vec) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(rec + offset + 64 * vec + 32 * kH));
}
template <int kH>
inline __m256 Halves(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + 16 * kH)));
}

// Bits of a where the byte mask m is set, of b elsewhere.
inline __m256i Select(__m256i m, __m256i a, __m256i b) {
  return _mm256_or_si256(_mm256_and_si256(m, a), _mm256_andnot_si256(m, b));
}

// The int16 pair sums of values v (unsigned) and quad q of token t.
template <int kTok>
inline __m256i Pairs(__m256i v, const int32_t* aj, int q, int t) {
  return _mm256_maddubs_epi16(v, _mm256_set1_epi32(*Field<kTok>(aj, q, t)));
}
inline __m256i Widen(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }

// Prefetches part `part` of kParts of the record kPrefetch bytes ahead (on
// the group's first pass only: it reads DRAM).
template <DType kT, int kParts>
inline void PrefetchPart(const uint8_t* rec, int part, bool prefetch) {
  if (!prefetch) return;
  constexpr int kLines = PackedK(kT).bytes / 64;
  const int from = kLines * part / kParts, to = kLines * (part + 1) / kParts;
  const char* pf = reinterpret_cast<const char*>(rec) + kPrefetch;
  for (int l = from; l < to; ++l) PrefetchLine(pf + 64 * l);
}

// acc[t] += scale * dx(token t0 + t) * isum[t] (scale: 8 rows), one sub-block.
template <int kTok, int kN>
inline void Scale(__m256* acc, const __m256i* isum, __m256 scale, const int32_t* aj) {
  for (int t = 0; t < kN; ++t)
    acc[t] = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(isum[t]),
        _mm256_mul_ps(scale, _mm256_set1_ps(FieldFloat<kTok>(aj, kActScale, t))), acc[t]);
}

// acc[t] -= mins * dx * sum(qx) of token t, one sub-block (q4_K / q5_K).
template <int kTok, int kN>
inline void Mins(__m256* acc, __m256 mins, const int32_t* aj) {
  for (int t = 0; t < kN; ++t)
    acc[t] = _mm256_fnmadd_ps(mins, _mm256_set1_ps(FieldFloat<kTok>(aj, kActXsum, t)), acc[t]);
}

// q4_K, sub-blocks 2c and 2c + 1 of a record: quants byte 32 c + i of a row
// holds element i of sub-block 2c (low nibble) and of 2c + 1 (high).
template <int kC, int kH, int kTok, int kN>
inline void ChunkQ4(const uint8_t* rec, const int32_t* a0, const int32_t* a1, __m256 d, __m256 dmin,
                    __m256i sc, __m256i mn, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ4_K);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i lo[kN], hi[kN];  // int16 pair sums, <= 8 * 3810
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    PrefetchPart<DType::kQ4_K, 32>(rec, 8 * kC + u, prefetch);
    const __m256i v = Load<kH>(rec, kL.qs, 8 * kC + u);
    const __m256i l = _mm256_and_si256(v, low4);
    const __m256i h = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#pragma GCC unroll 4
    for (int t = 0; t < kN; ++t) {
      const __m256i pl = Pairs<kTok>(l, a0, u, t), ph = Pairs<kTok>(h, a1, u, t);
      lo[t] = u == 0 ? pl : _mm256_add_epi16(lo[t], pl);
      hi[t] = u == 0 ? ph : _mm256_add_epi16(hi[t], ph);
    }
  }
  for (int t = 0; t < kN; ++t) lo[t] = Widen(lo[t]), hi[t] = Widen(hi[t]);
  constexpr int kB = (2 * kC) % 4;  // byte of sub-block 2c in its scale vector
  Scale<kTok, kN>(acc, lo, _mm256_mul_ps(d, ByteF32<kB, false>(sc)), a0);
  Mins<kTok, kN>(acc, _mm256_mul_ps(dmin, ByteF32<kB, false>(mn)), a0);
  Scale<kTok, kN>(acc, hi, _mm256_mul_ps(d, ByteF32<kB + 1, false>(sc)), a1);
  Mins<kTok, kN>(acc, _mm256_mul_ps(dmin, ByteF32<kB + 1, false>(mn)), a1);
}

// q5_K, sub-block kJ (32 weights; activation block kJ) of a record: 5
// vectors unpacked to the 8 of its values (kernels.h: PackedQ5Byte).
template <int kJ, int kH, int kTok, int kN>
inline void SubQ5(const uint8_t* rec, const int32_t* aj, __m256 d, __m256 dmin, __m256i sc,
                  __m256i mn, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ5_K);
  PrefetchPart<DType::kQ5_K, 8>(rec, kJ, prefetch);
  const __m256i five = _mm256_set1_epi8(0x1f), m3 = _mm256_set1_epi8(0x07),
                m4 = _mm256_set1_epi8(0x0f);
  __m256i z[5];
  for (int i = 0; i < 5; ++i) z[i] = Load<kH>(rec, kL.qs, 5 * kJ + i);
  __m256i v[8];
  for (int i = 0; i < 5; ++i) v[i] = _mm256_and_si256(z[i], five);
  // Bits 5-7 of z0..z4 carry v5..v7 (kernels.h).
  v[5] = _mm256_and_si256(Select(m3, _mm256_srli_epi16(z[0], 5), _mm256_srli_epi16(z[3], 2)), five);
  v[6] = _mm256_and_si256(Select(m3, _mm256_srli_epi16(z[1], 5), _mm256_srli_epi16(z[4], 2)), five);
  v[7] = _mm256_and_si256(
      Select(m4, Select(m3, _mm256_srli_epi16(z[2], 5), _mm256_srli_epi16(z[3], 4)),
             _mm256_srli_epi16(z[4], 3)),
      five);
  __m256i sum[kN];
#pragma GCC unroll 4
  for (int t = 0; t < kN; ++t) {
    __m256i s0 = Pairs<kTok>(v[0], aj, 0, t), s1 = Pairs<kTok>(v[4], aj, 4, t);
    for (int q = 1; q < 4; ++q) {  // int16: 4 quads, <= 4 * 7874
      s0 = _mm256_add_epi16(s0, Pairs<kTok>(v[q], aj, q, t));
      s1 = _mm256_add_epi16(s1, Pairs<kTok>(v[4 + q], aj, 4 + q, t));
    }
    sum[t] = _mm256_add_epi32(Widen(s0), Widen(s1));
  }
  Scale<kTok, kN>(acc, sum, _mm256_mul_ps(d, ByteF32<kJ % 4, false>(sc)), aj);
  Mins<kTok, kN>(acc, _mm256_mul_ps(dmin, ByteF32<kJ % 4, false>(mn)), aj);
}

template <int kH, int kTok, int kN, int... kJ>
inline void SubsQ5(const uint8_t* rec, const int32_t* aj, __m256 d, __m256 dmin, const __m256i* sc,
                   const __m256i* mn, bool prefetch, __m256* acc,
                   std::integer_sequence<int, kJ...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ5<kJ, kH, kTok, kN>(rec, aj + kJ * kBlock, d, dmin, sc[kJ / 4], mn[kJ / 4], prefetch, acc),
   ...);
}

// One q4_K / q5_K record, half kH; aj: the activations of its first block.
template <bool kQ5, int kH, int kTok, int kN>
inline void SuperK45(const uint8_t* rec, const int32_t* aj, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(kQ5 ? DType::kQ5_K : DType::kQ4_K);
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  const __m256 d = Halves<kH>(rec + kL.d), dmin = Halves<kH>(rec + kL.dmin);
  // The 12 scale bytes of each row as 3 dwords A, B, C: sub-blocks 0..3 take
  // sc = A & 63, m = B & 63; 4..7 take sc = C & 15 | (A >> 6) << 4,
  // m = C >> 4 | (B >> 6) << 4 (byte by byte).
  const __m256i a = Load<kH>(rec, kL.scales, 0), b = Load<kH>(rec, kL.scales, 1),
                c = Load<kH>(rec, kL.scales, 2);
  const __m256i six = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f),
                top2 = _mm256_set1_epi8(0x30);
  const __m256i sc03 = _mm256_and_si256(a, six), mn03 = _mm256_and_si256(b, six);
  const __m256i sc47 =
      _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_srli_epi32(a, 2), top2));
  const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(c, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi32(b, 2), top2));
  if constexpr (kQ5) {
    const __m256i sc[2] = {sc03, sc47}, mn[2] = {mn03, mn47};
    SubsQ5<kH, kTok, kN>(rec, aj, d, dmin, sc, mn, prefetch, acc,
                         std::make_integer_sequence<int, 8>{});
  } else {
    ChunkQ4<0, kH, kTok, kN>(rec, aj, aj + kBlock, d, dmin, sc03, mn03, prefetch, acc);
    ChunkQ4<1, kH, kTok, kN>(rec, aj + 2 * kBlock, aj + 3 * kBlock, d, dmin, sc03, mn03, prefetch,
                             acc);
    ChunkQ4<2, kH, kTok, kN>(rec, aj + 4 * kBlock, aj + 5 * kBlock, d, dmin, sc47, mn47, prefetch,
                             acc);
    ChunkQ4<3, kH, kTok, kN>(rec, aj + 6 * kBlock, aj + 7 * kBlock, d, dmin, sc47, mn47, prefetch,
                             acc);
  }
}

// q6_K, sub-block kS (16 weights; scale kS) of a record: 3 vectors unpacked
// to the 4 of its values (kernels.h: PackedQ6Byte), against quads 4 h ..
// 4 h + 3 of activation block kS / 2 (h = kS % 2). The sums start at -32 x
// the 16 activations' sum: q6_K's bias.
template <int kS, int kH, int kTok, int kN>
inline void SubQ6(const uint8_t* rec, const int32_t* aj, __m256 d, const __m256i* scales,
                  bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ6_K);
  constexpr int kHalf = kS % 2;
  PrefetchPart<DType::kQ6_K, 16>(rec, kS, prefetch);
  const __m256i six = _mm256_set1_epi8(0x3f);
  const __m256i z0 = Load<kH>(rec, kL.qs, 3 * kS), z1 = Load<kH>(rec, kL.qs, 3 * kS + 1),
                z2 = Load<kH>(rec, kL.qs, 3 * kS + 2);
  // v3 = z0 >> 6 | (z1 >> 6) << 2 | (z2 >> 6) << 4, byte by byte.
  const __m256i v3 = _mm256_and_si256(
      Select(_mm256_set1_epi8(0x0f),
             Select(_mm256_set1_epi8(0x03), _mm256_srli_epi16(z0, 6), _mm256_srli_epi16(z1, 4)),
             _mm256_srli_epi16(z2, 2)),
      six);
  const __m256i v[4] = {_mm256_and_si256(z0, six), _mm256_and_si256(z1, six),
                        _mm256_and_si256(z2, six), v3};
  __m256i sum[kN];
#pragma GCC unroll 4
  for (int t = 0; t < kN; ++t) {
    const int32_t lo = *Field<kTok>(aj, kActSumLo, t);
    const int32_t bias = -32 * (kHalf == 0 ? lo : *Field<kTok>(aj, kActSum, t) - lo);
    // int16: 2 quads, <= 2 * 16002.
    const __m256i s0 = _mm256_add_epi16(Pairs<kTok>(v[0], aj, 4 * kHalf, t),
                                        Pairs<kTok>(v[1], aj, 4 * kHalf + 1, t));
    const __m256i s1 = _mm256_add_epi16(Pairs<kTok>(v[2], aj, 4 * kHalf + 2, t),
                                        Pairs<kTok>(v[3], aj, 4 * kHalf + 3, t));
    sum[t] = _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(bias), Widen(s0)), Widen(s1));
  }
  Scale<kTok, kN>(acc, sum, _mm256_mul_ps(d, ByteF32<kS % 4, true>(scales[kS / 4])), aj);
}

template <int kH, int kTok, int kN, int... kS>
inline void SubsQ6(const uint8_t* rec, const int32_t* aj, __m256 d, const __m256i* scales,
                   bool prefetch, __m256* acc, std::integer_sequence<int, kS...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ6<kS, kH, kTok, kN>(rec, aj + kS / 2 * kBlock, d, scales, prefetch, acc), ...);
}

// q3_K, block kJ (32 weights; activation block kJ; sub-blocks 2 kJ and
// 2 kJ + 1) of a record: 3 vectors unpacked to the 8 of its values
// (kernels.h: PackedQ3Byte). Each sub-block's sums start at -4 x its 16
// activations' sum: q3_K's bias.
template <int kJ, int kH, int kTok, int kN>
inline void BlockQ3(const uint8_t* rec, const int32_t* aj, __m256 d, const __m256i* scales,
                    bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ3_K);
  PrefetchPart<DType::kQ3_K, 8>(rec, kJ, prefetch);
  const __m256i three = _mm256_set1_epi8(0x07), two = _mm256_set1_epi8(0x03);
  const __m256i z0 = Load<kH>(rec, kL.qs, 3 * kJ), z1 = Load<kH>(rec, kL.qs, 3 * kJ + 1),
                z2 = Load<kH>(rec, kL.qs, 3 * kJ + 2);
  // v6, v7: bits 0-1 from bits 6-7 of z0 / z1, bit 2 from bit 6 / 7 of z2.
  const __m256i v[8] = {
      _mm256_and_si256(z0, three),
      _mm256_and_si256(_mm256_srli_epi16(z0, 3), three),
      _mm256_and_si256(z1, three),
      _mm256_and_si256(_mm256_srli_epi16(z1, 3), three),
      _mm256_and_si256(z2, three),
      _mm256_and_si256(_mm256_srli_epi16(z2, 3), three),
      _mm256_and_si256(Select(two, _mm256_srli_epi16(z0, 6), _mm256_srli_epi16(z2, 4)), three),
      _mm256_and_si256(Select(two, _mm256_srli_epi16(z1, 6), _mm256_srli_epi16(z2, 5)), three)};
  __m256i lo[kN], hi[kN];
#pragma GCC unroll 4
  for (int t = 0; t < kN; ++t) {
    const int32_t s16 = *Field<kTok>(aj, kActSumLo, t);
    __m256i l = Pairs<kTok>(v[0], aj, 0, t), h = Pairs<kTok>(v[4], aj, 4, t);
    for (int q = 1; q < 4; ++q) {  // int16: 4 quads, <= 4 * 1778
      l = _mm256_add_epi16(l, Pairs<kTok>(v[q], aj, q, t));
      h = _mm256_add_epi16(h, Pairs<kTok>(v[4 + q], aj, 4 + q, t));
    }
    lo[t] = _mm256_add_epi32(_mm256_set1_epi32(-4 * s16), Widen(l));
    hi[t] =
        _mm256_add_epi32(_mm256_set1_epi32(-4 * (*Field<kTok>(aj, kActSum, t) - s16)), Widen(h));
  }
  constexpr int kS = 2 * kJ;  // the first sub-block's scale
  Scale<kTok, kN>(acc, lo, _mm256_mul_ps(d, ByteF32<kS % 4, true>(scales[kS / 4])), aj);
  Scale<kTok, kN>(acc, hi, _mm256_mul_ps(d, ByteF32<(kS + 1) % 4, true>(scales[kS / 4])), aj);
}

template <int kH, int kTok, int kN, int... kJ>
inline void BlocksQ3(const uint8_t* rec, const int32_t* aj, __m256 d, const __m256i* scales,
                     bool prefetch, __m256* acc, std::integer_sequence<int, kJ...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (BlockQ3<kJ, kH, kTok, kN>(rec, aj + kJ * kBlock, d, scales, prefetch, acc), ...);
}

// q2_K, sub-block kS (16 weights; scale byte kS) of a record: 1 vector
// unpacked to the 4 of its values (kernels.h: PackedQ2Byte), against quads
// 4 h .. 4 h + 3 of activation block kS / 2 (h = kS % 2); then the
// sub-block's min: acc -= (dmin * m) * (dx * sum of its 16 qx).
template <int kS, int kH, int kTok, int kN>
inline void SubQ2(const uint8_t* rec, const int32_t* aj, __m256 d, __m256 dmin, const __m256i* sc,
                  const __m256i* mn, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ2_K);
  constexpr int kHalf = kS % 2;
  PrefetchPart<DType::kQ2_K, 16>(rec, kS, prefetch);
  const __m256i two = _mm256_set1_epi8(0x03);
  const __m256i z = Load<kH>(rec, kL.qs, kS);
  const __m256i v[4] = {_mm256_and_si256(z, two), _mm256_and_si256(_mm256_srli_epi16(z, 2), two),
                        _mm256_and_si256(_mm256_srli_epi16(z, 4), two),
                        _mm256_and_si256(_mm256_srli_epi16(z, 6), two)};
  __m256i sum[kN];
#pragma GCC unroll 4
  for (int t = 0; t < kN; ++t) {
    // int16: 4 quads, <= 4 * 762.
    const __m256i s0 = _mm256_add_epi16(Pairs<kTok>(v[0], aj, 4 * kHalf, t),
                                        Pairs<kTok>(v[1], aj, 4 * kHalf + 1, t));
    const __m256i s1 = _mm256_add_epi16(Pairs<kTok>(v[2], aj, 4 * kHalf + 2, t),
                                        Pairs<kTok>(v[3], aj, 4 * kHalf + 3, t));
    sum[t] = Widen(_mm256_add_epi16(s0, s1));
  }
  Scale<kTok, kN>(acc, sum, _mm256_mul_ps(d, ByteF32<kS % 4, false>(sc[kS / 4])), aj);
  const __m256 mins = _mm256_mul_ps(dmin, ByteF32<kS % 4, false>(mn[kS / 4]));
  for (int t = 0; t < kN; ++t)
    acc[t] = _mm256_fnmadd_ps(
        mins, _mm256_set1_ps(FieldFloat<kTok>(aj, kHalf == 0 ? kActXsumLo : kActXsumHi, t)),
        acc[t]);
}

template <int kH, int kTok, int kN, int... kS>
inline void SubsQ2(const uint8_t* rec, const int32_t* aj, __m256 d, __m256 dmin, const __m256i* sc,
                   const __m256i* mn, bool prefetch, __m256* acc,
                   std::integer_sequence<int, kS...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ2<kS, kH, kTok, kN>(rec, aj + kS / 2 * kBlock, d, dmin, sc, mn, prefetch, acc), ...);
}

template <int kH, int kTok, int kN>
inline void SuperQ2(const uint8_t* rec, const int32_t* aj, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ2_K);
  const __m256 d = Halves<kH>(rec + kL.d), dmin = Halves<kH>(rec + kL.dmin);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i sc[4], mn[4];  // the scale bytes' low and high nibbles
  for (int i = 0; i < 4; ++i) {
    const __m256i b = Load<kH>(rec, kL.scales, i);
    sc[i] = _mm256_and_si256(b, low4);
    mn[i] = _mm256_and_si256(_mm256_srli_epi32(b, 4), low4);
  }
  SubsQ2<kH, kTok, kN>(rec, aj, d, dmin, sc, mn, prefetch, acc,
                       std::make_integer_sequence<int, 16>{});
}

// One q6_K (kQ3: q3_K) record, half kH; aj: the activations of its first block.
template <bool kQ3, int kH, int kTok, int kN>
inline void SuperQ36(const uint8_t* rec, const int32_t* aj, bool prefetch, __m256* acc) {
  constexpr PackedKLayout kL = PackedK(kQ3 ? DType::kQ3_K : DType::kQ6_K);
  const __m256 d = Halves<kH>(rec + kL.d);
  const __m256i scales[4] = {Load<kH>(rec, kL.scales, 0), Load<kH>(rec, kL.scales, 1),
                             Load<kH>(rec, kL.scales, 2), Load<kH>(rec, kL.scales, 3)};
  if constexpr (kQ3)
    BlocksQ3<kH, kTok, kN>(rec, aj, d, scales, prefetch, acc, std::make_integer_sequence<int, 8>{});
  else
    SubsQ6<kH, kTok, kN>(rec, aj, d, scales, prefetch, acc, std::make_integer_sequence<int, 16>{});
}

// Rows 8 kH .. 8 kH + 7 of a group (fewer from `valid` on: not written),
// tokens [t0, t0 + kN) of a tile of kTok tokens.
template <DType kT, int kH, int kTok, int kN>
void Pass(const uint8_t* group, int64_t nsb, const uint8_t* acts, int t0, int valid, bool prefetch,
          float* y, int64_t ldy) {
  constexpr int kRecord = PackedK(kT).bytes;
  __m256 acc[kN];  // [token] x 8 rows
  for (int t = 0; t < kN; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* rec = group + sb * kRecord;
    const int32_t* aj =
        reinterpret_cast<const int32_t*>(acts + sb * 8 * kTok * kPackedActBytes) + t0;
    if constexpr (kT == DType::kQ2_K)
      SuperQ2<kH, kTok, kN>(rec, aj, prefetch, acc);
    else if constexpr (kT == DType::kQ3_K || kT == DType::kQ6_K)
      SuperQ36<kT == DType::kQ3_K, kH, kTok, kN>(rec, aj, prefetch, acc);
    else
      SuperK45<kT == DType::kQ5_K, kH, kTok, kN>(rec, aj, prefetch, acc);
  }
  const int rows = std::clamp(valid - 8 * kH, 0, 8);
  for (int t = 0; t < kN; ++t) {
    float* out = y + (t0 + t) * ldy + 8 * kH;
    if (rows == 8) {
      _mm256_storeu_ps(out, acc[t]);
    } else {
      alignas(32) float lanes[8];  // [8 rows]
      _mm256_store_ps(lanes, acc[t]);
      std::memcpy(out, lanes, sizeof(float) * rows);
    }
  }
}

// Tokens per pass: their accumulators, int16 sums and the values stay in
// the 16 ymm registers.
constexpr int kMaxN = 3;

// Both halves of a group, every token of a tile of kTok tokens.
template <DType kT, int kTok, int kH>
void Half(const uint8_t* group, int64_t nsb, const uint8_t* acts, int valid, float* y,
          int64_t ldy) {
  if (8 * kH >= valid) return;
  int t0 = 0;
  for (; t0 + kMaxN <= kTok; t0 += kMaxN)
    Pass<kT, kH, kTok, kMaxN>(group, nsb, acts, t0, valid, kH == 0 && t0 == 0, y, ldy);
  constexpr int kRest = kTok % kMaxN;
  if constexpr (kRest > 0)
    Pass<kT, kH, kTok, kRest>(group, nsb, acts, t0, valid, kH == 0 && t0 == 0, y, ldy);
}

template <DType kT, int kTok>
void Tile(const Weight& w, const uint8_t* acts, int64_t g0, int64_t g1, float* y, int64_t ldy) {
  const int64_t nsb = w.k / kQK_K, stride = PackedGroupBytes(kT, w.k);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w.packed + g * stride;
    const int valid = static_cast<int>(std::min<int64_t>(kPackedRows, w.n - kPackedRows * g));
    float* yg = y + kPackedRows * g;
    Half<kT, kTok, 0>(group, nsb, acts, valid, yg, ldy);
    Half<kT, kTok, 1>(group, nsb, acts, valid, yg, ldy);
  }
}

template <DType kT>
void TilesK(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
            int64_t ldy) {
  ForEachTile(w.k / 32, m, acts, y, ldy, [&](auto tok, const uint8_t* a, float* yt) {
    Tile<kT, decltype(tok)::value>(w, a, g0, g1, yt, ldy);
  });
}

}  // namespace

void PackedMatmulK(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1,
                   float* y, int64_t ldy) {
  switch (w.type) {
    case DType::kQ2_K:
      return TilesK<DType::kQ2_K>(w, acts, m, g0, g1, y, ldy);
    case DType::kQ3_K:
      return TilesK<DType::kQ3_K>(w, acts, m, g0, g1, y, ldy);
    case DType::kQ4_K:
      return TilesK<DType::kQ4_K>(w, acts, m, g0, g1, y, ldy);
    case DType::kQ5_K:
      return TilesK<DType::kQ5_K>(w, acts, m, g0, g1, y, ldy);
    case DType::kQ6_K:
      return TilesK<DType::kQ6_K>(w, acts, m, g0, g1, y, ldy);
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx2
