// AVX-512 q2_K .. q6_K products over row-interleaved weights (PackWeight,
// kernels.h: PackedK), one kernel for every number of tokens.
//
// As for q8_0 / q4_0 (gemv_packed_avx512.cc): a zmm holds 4 quants of each of
// 16 rows, vpdpbusd with the token's 4 activation bytes broadcast advances the
// 16 rows, and each int32 lane sums one sub-block of one row (q4_K / q5_K: 32
// weights, q2_K / q3_K / q6_K: 16). The activation is quantized to q8_0 per
// block of 32 (matmul.cc PackActivations), so a q4_K / q5_K sub-block is one
// activation block and a q2_K / q3_K / q6_K block of 32 holds two sub-blocks.
// Per sub-block and token the f32 work runs once for 16 rows:
//   q4_K / q5_K: acc += (d * sc) * dx * isum - (dmin * m) * (dx * sum(qx))
//   q2_K:        the same, sum(qx) over the sub-block's 16
//   q6_K:        acc += (d * sc) * dx * (isum - 32 * sum(qx over the 16))
//   q3_K:        acc += (d * sc) * dx * (isum - 4 * sum(qx over the 16))
// with the 6-bit (q3_K / q6_K: int8) scales unpacked for 16 rows at once from
// the record's scale zmm. q3_K's, q5_K's and q6_K's values were recombined
// at packing: a q5_K sub-block is 5 zmm and 19 integer ops for its 8 zmm of
// values, a q6_K one 3 zmm and 9 ops for 4, a q3_K block of 32 3 zmm and 17
// ops for 8, a q2_K sub-block 1 zmm and 7 ops for 4 (kernels.h:
// PackedQ2Byte .. PackedQ6Byte).
// Every output is the same sequence of operations for every m and tile
// (batched == alone, bit for bit).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/packed_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

// Bits shifted left by kBits (right when negative), within 32-bit lanes.
template <int kBits>
inline __m512i Shift(__m512i v) {
  if constexpr (kBits > 0) return _mm512_slli_epi32(v, kBits);
  if constexpr (kBits < 0) return _mm512_srli_epi32(v, -kBits);
  return v;
}

// Byte kByte of each 32-bit lane as f32: unsigned, or signed (q6_K scales).
template <int kByte, bool kSigned>
inline __m512 ByteF32(__m512i v) {
  if constexpr (kSigned) return _mm512_cvtepi32_ps(_mm512_srai_epi32(Shift<24 - 8 * kByte>(v), 24));
  return _mm512_cvtepi32_ps(_mm512_and_si512(Shift<-8 * kByte>(v), _mm512_set1_epi32(0xff)));
}

inline const uint8_t* At(const uint8_t* rec, int offset, int zmm) {
  return rec + offset + 64 * zmm;
}
inline __m512i Load(const uint8_t* p) { return _mm512_load_si512(p); }
inline __m512 Halves(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

// Prefetches part `part` of kParts of the record kPackedPrefetch bytes ahead of
// rec, and the same lines kPackedPrefetchL2 ahead into L2: each part of a
// record's work asks for its share of the lines, so the requests stream out
// with the work instead of in one burst (PrefetchAhead).
template <DType kT, int kParts>
inline void PrefetchPart(const uint8_t* rec, int part) {
  constexpr int kLines = PackedK(kT).bytes / 64;
  const int from = kLines * part / kParts, to = kLines * (part + 1) / kParts;
  const char* pf = reinterpret_cast<const char*>(rec) + kPackedPrefetch;
#pragma GCC unroll 16
  for (int l = from; l < to; ++l) PrefetchAhead(pf + 64 * l);
}

// acc[t] += scale * dx(token) * isum[t] (scale: 16 rows), one sub-block.
template <int kTok>
inline void Scale(__m512* acc, const __m512i* isum, __m512 scale, const int32_t* aj) {
#pragma GCC unroll 8
  for (int t = 0; t < kTok; ++t)
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                             _mm512_mul_ps(scale, _mm512_set1_ps(ActFloat<kTok>(aj, kActScale, t))),
                             acc[t]);
}

// acc[t] -= mins * dx * sum(qx) of token t, one sub-block (q4_K / q5_K).
template <int kTok>
inline void Mins(__m512* acc, __m512 mins, const int32_t* aj) {
#pragma GCC unroll 8
  for (int t = 0; t < kTok; ++t)
    acc[t] = _mm512_fnmadd_ps(mins, _mm512_set1_ps(ActFloat<kTok>(aj, kActXsum, t)), acc[t]);
}

// q4_K, sub-blocks 2c and 2c + 1 of a record: quants byte 32 c + i of a row
// holds element i of sub-block 2c (low nibble) and of 2c + 1 (high).
template <int kC, int kTok>
inline void ChunkQ4(const uint8_t* rec, const int32_t* a0, const int32_t* a1, __m512 d, __m512 dmin,
                    __m512i sc, __m512i mn, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ4_K);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i lo[kTok], hi[kTok];
  for (int t = 0; t < kTok; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    PrefetchPart<DType::kQ4_K, 32>(rec, 8 * kC + u);
    const __m512i v = Load(At(rec, kL.qs, 8 * kC + u));
    const __m512i l = _mm512_and_si512(v, low4);
    const __m512i h =
        _mm512_andnot_si512(low4, v);  // 16 x the high nibble: shifted back below (exact)
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      DotBroadcast(lo[t], l, ActField<kTok>(a0, u, t));
      DotBroadcast(hi[t], h, ActField<kTok>(a1, u, t));
    }
  }
  for (int t = 0; t < kTok; ++t) hi[t] = _mm512_srai_epi32(hi[t], 4);
  constexpr int kB = (2 * kC) % 4;  // byte of sub-block 2c in its scale zmm
  Scale<kTok>(acc, lo, _mm512_mul_ps(d, ByteF32<kB, false>(sc)), a0);
  Mins<kTok>(acc, _mm512_mul_ps(dmin, ByteF32<kB, false>(mn)), a0);
  Scale<kTok>(acc, hi, _mm512_mul_ps(d, ByteF32<kB + 1, false>(sc)), a1);
  Mins<kTok>(acc, _mm512_mul_ps(dmin, ByteF32<kB + 1, false>(mn)), a1);
}

// Bits of a where the byte mask m is set, of b elsewhere (vpternlogd 0xe4).
inline __m512i Select(__m512i m, __m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(a, b, m, 0xe4);
}

// q5_K, sub-block kJ (32 weights; activation block kJ) of a record: 5 zmm
// unpacked to the 8 zmm of its values (kernels.h: PackedQ5Byte).
template <int kJ, int kTok>
inline void SubQ5(const uint8_t* rec, const int32_t* aj, __m512 d, __m512 dmin, __m512i sc,
                  __m512i mn, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ5_K);
  PrefetchPart<DType::kQ5_K, 8>(rec, kJ);
  const __m512i five = _mm512_set1_epi8(0x1f), m3 = _mm512_set1_epi8(0x07),
                m4 = _mm512_set1_epi8(0x0f);
  __m512i z[5];
  for (int i = 0; i < 5; ++i) z[i] = Load(At(rec, kL.qs, 5 * kJ + i));
  __m512i v[8];
  for (int i = 0; i < 5; ++i) v[i] = _mm512_and_si512(z[i], five);
  // Bits 5-7 of z0..z4 carry v5..v7 (kernels.h).
  v[5] = _mm512_and_si512(Select(m3, _mm512_srli_epi16(z[0], 5), _mm512_srli_epi16(z[3], 2)), five);
  v[6] = _mm512_and_si512(Select(m3, _mm512_srli_epi16(z[1], 5), _mm512_srli_epi16(z[4], 2)), five);
  v[7] = _mm512_and_si512(
      Select(m4, Select(m3, _mm512_srli_epi16(z[2], 5), _mm512_srli_epi16(z[3], 4)),
             _mm512_srli_epi16(z[4], 3)),
      five);
  __m512i sum[kTok];
  for (int t = 0; t < kTok; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) DotBroadcast(sum[t], v[q], ActField<kTok>(aj, q, t));
  Scale<kTok>(acc, sum, _mm512_mul_ps(d, ByteF32<kJ % 4, false>(sc)), aj);
  Mins<kTok>(acc, _mm512_mul_ps(dmin, ByteF32<kJ % 4, false>(mn)), aj);
}

template <int kTok, int... kJ>
inline void SubsQ5(const uint8_t* rec, const int32_t* aj, __m512 d, __m512 dmin, const __m512i* sc,
                   const __m512i* mn, __m512* acc, std::integer_sequence<int, kJ...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ5<kJ, kTok>(rec, aj + kJ * kBlock, d, dmin, sc[kJ / 4], mn[kJ / 4], acc), ...);
}

// One q4_K / q5_K record; aj: the activations of its first block of 32.
template <bool kQ5, int kTok>
inline void SuperK45(const uint8_t* rec, const int32_t* aj, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(kQ5 ? DType::kQ5_K : DType::kQ4_K);
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  const __m512 d = Halves(rec + kL.d), dmin = Halves(rec + kL.dmin);
  // The 12 scale bytes of each row as 3 dwords A, B, C: sub-blocks 0..3 take
  // sc = A & 63, m = B & 63; 4..7 take sc = C & 15 | (A >> 6) << 4,
  // m = C >> 4 | (B >> 6) << 4 (byte by byte).
  const __m512i a = Load(At(rec, kL.scales, 0)), b = Load(At(rec, kL.scales, 1)),
                c = Load(At(rec, kL.scales, 2));
  const __m512i six = _mm512_set1_epi8(0x3f), low4 = _mm512_set1_epi8(0x0f),
                top2 = _mm512_set1_epi8(0x30);
  const __m512i sc03 = _mm512_and_si512(a, six), mn03 = _mm512_and_si512(b, six);
  const __m512i sc47 =
      _mm512_or_si512(_mm512_and_si512(c, low4), _mm512_and_si512(_mm512_srli_epi32(a, 2), top2));
  const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), low4),
                                       _mm512_and_si512(_mm512_srli_epi32(b, 2), top2));
  if constexpr (kQ5) {
    const __m512i sc[2] = {sc03, sc47}, mn[2] = {mn03, mn47};
    SubsQ5<kTok>(rec, aj, d, dmin, sc, mn, acc, std::make_integer_sequence<int, 8>{});
  } else {
    ChunkQ4<0, kTok>(rec, aj, aj + kBlock, d, dmin, sc03, mn03, acc);
    ChunkQ4<1, kTok>(rec, aj + 2 * kBlock, aj + 3 * kBlock, d, dmin, sc03, mn03, acc);
    ChunkQ4<2, kTok>(rec, aj + 4 * kBlock, aj + 5 * kBlock, d, dmin, sc47, mn47, acc);
    ChunkQ4<3, kTok>(rec, aj + 6 * kBlock, aj + 7 * kBlock, d, dmin, sc47, mn47, acc);
  }
}

// q6_K, sub-block kS (16 weights; scale kS) of a record: 3 zmm unpacked to
// the 4 zmm of its values (kernels.h: PackedQ6Byte), against quads 4 h ..
// 4 h + 3 of activation block kS / 2 (h = kS % 2). The sums start at -32 x
// the 16 activations' sum: q6_K's bias.
template <int kS, int kTok>
inline void SubQ6(const uint8_t* rec, const int32_t* aj, __m512 d, const __m512i* scales,
                  __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ6_K);
  constexpr int kH = kS % 2;
  PrefetchPart<DType::kQ6_K, 16>(rec, kS);
  const __m512i six = _mm512_set1_epi8(0x3f);
  const __m512i z0 = Load(At(rec, kL.qs, 3 * kS)), z1 = Load(At(rec, kL.qs, 3 * kS + 1)),
                z2 = Load(At(rec, kL.qs, 3 * kS + 2));
  // v3 = z0 >> 6 | (z1 >> 6) << 2 | (z2 >> 6) << 4, byte by byte: bits 0-1
  // from the first shift, 2-3 from the second, 4-5 from the third.
  const __m512i v3 = _mm512_and_si512(
      Select(_mm512_set1_epi8(0x0f),
             Select(_mm512_set1_epi8(0x03), _mm512_srli_epi16(z0, 6), _mm512_srli_epi16(z1, 4)),
             _mm512_srli_epi16(z2, 2)),
      six);
  const __m512i v[4] = {_mm512_and_si512(z0, six), _mm512_and_si512(z1, six),
                        _mm512_and_si512(z2, six), v3};
  __m512i sum[kTok];
  for (int t = 0; t < kTok; ++t) {
    const int32_t lo = *ActField<kTok>(aj, kActSumLo, t);
    sum[t] = _mm512_set1_epi32(-32 * (kH == 0 ? lo : *ActField<kTok>(aj, kActSum, t) - lo));
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) DotBroadcast(sum[t], v[q], ActField<kTok>(aj, 4 * kH + q, t));
  Scale<kTok>(acc, sum, _mm512_mul_ps(d, ByteF32<kS % 4, true>(scales[kS / 4])), aj);
}

template <int kTok, int... kS>
inline void SubsQ6(const uint8_t* rec, const int32_t* aj, __m512 d, const __m512i* scales,
                   __m512* acc, std::integer_sequence<int, kS...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ6<kS, kTok>(rec, aj + kS / 2 * kBlock, d, scales, acc), ...);
}

// q3_K, block kJ (32 weights; activation block kJ; sub-blocks 2 kJ and
// 2 kJ + 1) of a record: 3 zmm unpacked to the 8 zmm of its values (kernels.h:
// PackedQ3Byte). Each sub-block's sums start at -4 x its 16 activations' sum:
// q3_K's bias.
template <int kJ, int kTok>
inline void BlockQ3(const uint8_t* rec, const int32_t* aj, __m512 d, const __m512i* scales,
                    __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ3_K);
  PrefetchPart<DType::kQ3_K, 8>(rec, kJ);
  const __m512i three = _mm512_set1_epi8(0x07), two = _mm512_set1_epi8(0x03);
  const __m512i z0 = Load(At(rec, kL.qs, 3 * kJ)), z1 = Load(At(rec, kL.qs, 3 * kJ + 1)),
                z2 = Load(At(rec, kL.qs, 3 * kJ + 2));
  // v6, v7: bits 0-1 from bits 6-7 of z0 / z1, bit 2 from bit 6 / 7 of z2.
  const __m512i v[8] = {
      _mm512_and_si512(z0, three),
      _mm512_and_si512(_mm512_srli_epi16(z0, 3), three),
      _mm512_and_si512(z1, three),
      _mm512_and_si512(_mm512_srli_epi16(z1, 3), three),
      _mm512_and_si512(z2, three),
      _mm512_and_si512(_mm512_srli_epi16(z2, 3), three),
      _mm512_and_si512(Select(two, _mm512_srli_epi16(z0, 6), _mm512_srli_epi16(z2, 4)), three),
      _mm512_and_si512(Select(two, _mm512_srli_epi16(z1, 6), _mm512_srli_epi16(z2, 5)), three)};
  __m512i lo[kTok], hi[kTok];
  for (int t = 0; t < kTok; ++t) {
    const int32_t s16 = *ActField<kTok>(aj, kActSumLo, t);
    lo[t] = _mm512_set1_epi32(-4 * s16);
    hi[t] = _mm512_set1_epi32(-4 * (*ActField<kTok>(aj, kActSum, t) - s16));
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      DotBroadcast(lo[t], v[q], ActField<kTok>(aj, q, t));
      DotBroadcast(hi[t], v[4 + q], ActField<kTok>(aj, 4 + q, t));
    }
  constexpr int kS = 2 * kJ;  // the first sub-block's scale
  Scale<kTok>(acc, lo, _mm512_mul_ps(d, ByteF32<kS % 4, true>(scales[kS / 4])), aj);
  Scale<kTok>(acc, hi, _mm512_mul_ps(d, ByteF32<(kS + 1) % 4, true>(scales[kS / 4])), aj);
}

template <int kTok, int... kJ>
inline void BlocksQ3(const uint8_t* rec, const int32_t* aj, __m512 d, const __m512i* scales,
                     __m512* acc, std::integer_sequence<int, kJ...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (BlockQ3<kJ, kTok>(rec, aj + kJ * kBlock, d, scales, acc), ...);
}

// q2_K, sub-block kS (16 weights; scale byte kS) of a record: 1 zmm unpacked
// to the 4 zmm of its values (kernels.h: PackedQ2Byte), against quads 4 h ..
// 4 h + 3 of activation block kS / 2 (h = kS % 2); then the sub-block's min:
// acc -= (dmin * m) * (dx * sum of its 16 qx).
template <int kS, int kTok>
inline void SubQ2(const uint8_t* rec, const int32_t* aj, __m512 d, __m512 dmin, const __m512i* sc,
                  const __m512i* mn, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ2_K);
  constexpr int kH = kS % 2;
  PrefetchPart<DType::kQ2_K, 16>(rec, kS);
  const __m512i two = _mm512_set1_epi8(0x03);
  const __m512i z = Load(At(rec, kL.qs, kS));
  const __m512i v[4] = {_mm512_and_si512(z, two), _mm512_and_si512(_mm512_srli_epi16(z, 2), two),
                        _mm512_and_si512(_mm512_srli_epi16(z, 4), two),
                        _mm512_and_si512(_mm512_srli_epi16(z, 6), two)};
  __m512i sum[kTok];
  for (int t = 0; t < kTok; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) DotBroadcast(sum[t], v[q], ActField<kTok>(aj, 4 * kH + q, t));
  Scale<kTok>(acc, sum, _mm512_mul_ps(d, ByteF32<kS % 4, false>(sc[kS / 4])), aj);
  const __m512 mins = _mm512_mul_ps(dmin, ByteF32<kS % 4, false>(mn[kS / 4]));
#pragma GCC unroll 8
  for (int t = 0; t < kTok; ++t)
    acc[t] = _mm512_fnmadd_ps(
        mins, _mm512_set1_ps(ActFloat<kTok>(aj, kH == 0 ? kActXsumLo : kActXsumHi, t)), acc[t]);
}

template <int kTok, int... kS>
inline void SubsQ2(const uint8_t* rec, const int32_t* aj, __m512 d, __m512 dmin, const __m512i* sc,
                   const __m512i* mn, __m512* acc, std::integer_sequence<int, kS...>) {
  constexpr int kBlock = kTok * kPackedActBytes / 4;  // int32 per activation block
  (SubQ2<kS, kTok>(rec, aj + kS / 2 * kBlock, d, dmin, sc, mn, acc), ...);
}

template <int kTok>
inline void SuperQ2(const uint8_t* rec, const int32_t* aj, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ2_K);
  const __m512 d = Halves(rec + kL.d), dmin = Halves(rec + kL.dmin);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i sc[4], mn[4];  // the scale bytes' low and high nibbles
  for (int i = 0; i < 4; ++i) {
    const __m512i b = Load(At(rec, kL.scales, i));
    sc[i] = _mm512_and_si512(b, low4);
    mn[i] = _mm512_and_si512(_mm512_srli_epi32(b, 4), low4);
  }
  SubsQ2<kTok>(rec, aj, d, dmin, sc, mn, acc, std::make_integer_sequence<int, 16>{});
}

// One q6_K (kQ3: q3_K) record; aj: the activations of its first block of 32.
template <bool kQ3, int kTok>
inline void SuperQ36(const uint8_t* rec, const int32_t* aj, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(kQ3 ? DType::kQ3_K : DType::kQ6_K);
  const __m512 d = Halves(rec + kL.d);
  const __m512i scales[4] = {Load(At(rec, kL.scales, 0)), Load(At(rec, kL.scales, 1)),
                             Load(At(rec, kL.scales, 2)), Load(At(rec, kL.scales, 3))};
  if constexpr (kQ3)
    BlocksQ3<kTok>(rec, aj, d, scales, acc, std::make_integer_sequence<int, 8>{});
  else
    SubsQ6<kTok>(rec, aj, d, scales, acc, std::make_integer_sequence<int, 16>{});
}

// Rows [16 g, 16 g + valid) of kTok tokens; `group`: the group's records.
template <DType kT, int kTok>
void GroupK(const uint8_t* group, int64_t nsb, const uint8_t* acts, int valid, float* y,
            int64_t ldy) {
  constexpr int kRecord = PackedK(kT).bytes;
  __m512 acc[kTok];  // [token] x 16 rows
  for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* rec = group + sb * kRecord;
    const int32_t* aj = reinterpret_cast<const int32_t*>(acts + sb * 8 * kTok * kPackedActBytes);
    if constexpr (kT == DType::kQ2_K)
      SuperQ2<kTok>(rec, aj, acc);
    else if constexpr (kT == DType::kQ3_K || kT == DType::kQ6_K)
      SuperQ36<kT == DType::kQ3_K, kTok>(rec, aj, acc);
    else
      SuperK45<kT == DType::kQ5_K, kTok>(rec, aj, acc);
  }
  for (int t = 0; t < kTok; ++t) _mm512_mask_storeu_ps(y + t * ldy, RowsMask(valid), acc[t]);
}

template <DType kT>
void TilesK(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
            int64_t ldy) {
  const int64_t nsb = w.k / kQK_K, stride = PackedGroupBytes(kT, w.k);
  ForEachTile(w.k / 32, m, acts, y, ldy, [&](auto tok, const uint8_t* a, float* yt) {
    for (int64_t g = g0; g < g1; ++g) {
      const int valid = static_cast<int>(std::min<int64_t>(kPackedRows, w.n - kPackedRows * g));
      GroupK<kT, decltype(tok)::value>(w.packed + g * stride, nsb, a, valid, yt + kPackedRows * g,
                                       ldy);
    }
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

}  // namespace rotor::ops::internal::avx512
