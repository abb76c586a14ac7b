// AVX-512 q4_K / q5_K / q6_K products over row-interleaved weights (PackWeight,
// kernels.h: PackedK), one kernel for every number of tokens.
//
// As for q8_0 / q4_0 (gemv_packed_avx512.cc): a zmm holds 4 quants of each of
// 16 rows, vpdpbusd with the token's 4 activation bytes broadcast advances the
// 16 rows, and each int32 lane sums one sub-block of one row (q4_K / q5_K: 32
// weights, q6_K: 16). The activation is quantized to q8_0 per block of 32
// (PackActivations), so a q4_K / q5_K sub-block is one activation block and a
// q6_K block of 32 holds two sub-blocks. Per sub-block and token the f32 work
// runs once for 16 rows:
//   q4_K / q5_K: acc += (d * sc) * dx * isum - (dmin * m) * (dx * sum(qx))
//   q6_K:        acc += (d * sc) * dx * (isum - 32 * sum(qx over the 16))
// with the 6-bit (q6_K: int8) scales unpacked for 16 rows at once from the
// record's scale zmm. Every output is the same sequence of operations for
// every m and tile (batched == alone, bit for bit).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

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

// Prefetches quarter kQ of the record kPackedPrefetch bytes ahead of rec: each
// quarter of a record's work asks for a quarter of the lines, so the requests
// are spread over the record instead of queued in one burst.
template <DType kT, int kQ>
inline void PrefetchQuarter(const uint8_t* rec) {
  constexpr int kLines = PackedK(kT).bytes / 64, kFrom = kLines * kQ / 4,
                kTo = kLines * (kQ + 1) / 4;
  const char* pf = reinterpret_cast<const char*>(rec) + kPackedPrefetch;
#pragma GCC unroll 16
  for (int l = kFrom; l < kTo; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
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

// q4_K / q5_K, sub-blocks 2c and 2c + 1 of a record: quants byte 32 c + i of
// a row holds element i of sub-block 2c (low nibble) and of 2c + 1 (high);
// q5_K's fifth bits are bits 2c and 2c + 1 of qh[i].
template <bool kQ5, int kC, int kTok>
inline void ChunkK45(const uint8_t* rec, const int32_t* a0, const int32_t* a1, __m512 d,
                     __m512 dmin, __m512i sc, __m512i mn, __m512* acc) {
  constexpr DType kT = kQ5 ? DType::kQ5_K : DType::kQ4_K;
  constexpr PackedKLayout kL = PackedK(kT);
  PrefetchQuarter<kT, kC>(rec);
  const __m512i low4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
  __m512i lo[kTok], hi[kTok];
  for (int t = 0; t < kTok; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    const __m512i v = Load(At(rec, kL.qs, 8 * kC + u));
    __m512i l, h;
    if constexpr (kQ5) {
      const __m512i qh = Load(At(rec, kL.qh, u));
      l = _mm512_or_si512(_mm512_and_si512(v, low4), _mm512_and_si512(Shift<4 - 2 * kC>(qh), bit4));
      h = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), low4),
                          _mm512_and_si512(Shift<3 - 2 * kC>(qh), bit4));
    } else {
      l = _mm512_and_si512(v, low4);
      h = _mm512_andnot_si512(low4, v);  // 16 x the high nibble: shifted back below (exact)
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      DotBroadcast(lo[t], l, ActField<kTok>(a0, u, t));
      DotBroadcast(hi[t], h, ActField<kTok>(a1, u, t));
    }
  }
  if constexpr (!kQ5)
    for (int t = 0; t < kTok; ++t) hi[t] = _mm512_srai_epi32(hi[t], 4);
  constexpr int kB = (2 * kC) % 4;  // byte of sub-block 2c in its scale zmm
  Scale<kTok>(acc, lo, _mm512_mul_ps(d, ByteF32<kB, false>(sc)), a0);
  Mins<kTok>(acc, _mm512_mul_ps(dmin, ByteF32<kB, false>(mn)), a0);
  Scale<kTok>(acc, hi, _mm512_mul_ps(d, ByteF32<kB + 1, false>(sc)), a1);
  Mins<kTok>(acc, _mm512_mul_ps(dmin, ByteF32<kB + 1, false>(mn)), a1);
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
  ChunkK45<kQ5, 0, kTok>(rec, aj, aj + kBlock, d, dmin, sc03, mn03, acc);
  ChunkK45<kQ5, 1, kTok>(rec, aj + 2 * kBlock, aj + 3 * kBlock, d, dmin, sc03, mn03, acc);
  ChunkK45<kQ5, 2, kTok>(rec, aj + 4 * kBlock, aj + 5 * kBlock, d, dmin, sc47, mn47, acc);
  ChunkK45<kQ5, 3, kTok>(rec, aj + 6 * kBlock, aj + 7 * kBlock, d, dmin, sc47, mn47, acc);
}

// q6_K, half kN (elements 128 kN ..) and pair kP of its activation blocks:
// block kP takes the low nibbles of ql[64 kN + 32 kP + i] and bits 2 kP of
// qh[32 kN + i]; block kP + 2 the high nibbles and bits 4 + 2 kP. Sub-block
// h of a block (its 16 weights from 16 h) has the int8 scale 8 kN + 2 i + h.
template <int kN, int kP, int kTok>
inline void PairQ6(const uint8_t* rec, const int32_t* alo, const int32_t* ahi, __m512 d,
                   const __m512i* scales, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ6_K);
  PrefetchQuarter<DType::kQ6_K, 2 * kN + kP>(rec);
  const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m512i lo[kTok], hi[kTok];  // start at -32 x (the 16 activations' sum): q6_K's bias
    for (int t = 0; t < kTok; ++t) {
      const int32_t sl = *ActField<kTok>(alo, kActSumLo, t),
                    sh = *ActField<kTok>(ahi, kActSumLo, t);
      lo[t] = _mm512_set1_epi32(-32 * (h == 0 ? sl : *ActField<kTok>(alo, kActSum, t) - sl));
      hi[t] = _mm512_set1_epi32(-32 * (h == 0 ? sh : *ActField<kTok>(ahi, kActSum, t) - sh));
    }
#pragma GCC unroll 4
    for (int u = 4 * h; u < 4 * h + 4; ++u) {
      const __m512i ql = Load(At(rec, kL.qs, 16 * kN + 8 * kP + u));
      const __m512i qh = Load(At(rec, kL.qh, 8 * kN + u));
      const __m512i l = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                        _mm512_and_si512(Shift<4 - 2 * kP>(qh), top2));
      const __m512i hq = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(ql, 4), low4),
                                         _mm512_and_si512(Shift<-2 * kP>(qh), top2));
#pragma GCC unroll 8
      for (int t = 0; t < kTok; ++t) {
        DotBroadcast(lo[t], l, ActField<kTok>(alo, u, t));
        DotBroadcast(hi[t], hq, ActField<kTok>(ahi, u, t));
      }
    }
    // Scales 8 kN + 2 kP + h (block kP) and 8 kN + 2 kP + 4 + h (block kP + 2).
    const int s_lo = 8 * kN + 2 * kP + h, s_hi = s_lo + 4;
    const __m512 sc_lo = h == 0 ? ByteF32<(2 * kP) % 4, true>(scales[s_lo / 4])
                                : ByteF32<(2 * kP + 1) % 4, true>(scales[s_lo / 4]);
    const __m512 sc_hi = h == 0 ? ByteF32<(2 * kP) % 4, true>(scales[s_hi / 4])
                                : ByteF32<(2 * kP + 1) % 4, true>(scales[s_hi / 4]);
    Scale<kTok>(acc, lo, _mm512_mul_ps(d, sc_lo), alo);
    Scale<kTok>(acc, hi, _mm512_mul_ps(d, sc_hi), ahi);
  }
}

template <int kTok>
inline void SuperQ6(const uint8_t* rec, const int32_t* aj, __m512* acc) {
  constexpr PackedKLayout kL = PackedK(DType::kQ6_K);
  constexpr int kBlock = kTok * kPackedActBytes / 4;
  const __m512 d = Halves(rec + kL.d);
  const __m512i scales[4] = {Load(At(rec, kL.scales, 0)), Load(At(rec, kL.scales, 1)),
                             Load(At(rec, kL.scales, 2)), Load(At(rec, kL.scales, 3))};
  PairQ6<0, 0, kTok>(rec, aj, aj + 2 * kBlock, d, scales, acc);
  PairQ6<0, 1, kTok>(rec, aj + kBlock, aj + 3 * kBlock, d, scales, acc);
  PairQ6<1, 0, kTok>(rec, aj + 4 * kBlock, aj + 6 * kBlock, d, scales, acc);
  PairQ6<1, 1, kTok>(rec, aj + 5 * kBlock, aj + 7 * kBlock, d, scales, acc);
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
    if constexpr (kT == DType::kQ6_K)
      SuperQ6<kTok>(rec, aj, acc);
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
