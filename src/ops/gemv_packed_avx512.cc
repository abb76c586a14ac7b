// AVX-512 q8_0 / q4_0 products over row-interleaved weights (PackWeight's
// layout, see matmul.h), one kernel for every number of tokens.
//
// A zmm holds 4 weights of each of 16 rows; vpdpbusd multiplies it with 4
// activation bytes of one token broadcast from memory, so each int32 lane
// sums a whole block of one row (8 instructions per block) and the f32
// scaling runs once per block for 16 rows. Every output is the same sequence
// of operations whatever m and whatever tile it falls in: the results of a
// token do not depend on the tokens beside it (batched == alone, bit for bit).
//
// Activations are quantized to q8_0 per token (QuantizeActivations, bit for
// bit) and laid out in tiles of up to 8 tokens (matmul.cc PackActivations)
// so the kernel addresses every token from one pointer with constant offsets.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/packed_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

// Rows [16 g, 16 g + valid) of kTok tokens (the tile at `acts`); `group` is
// the group's one stream of block pairs (kernels.h).
template <DType kT, int kTok>
void PackedGroup(const uint8_t* group, int64_t nb, const uint8_t* acts, int valid, float* y,
                 int64_t ldy) {
  // -(the stored unsigned q - the value) * sum(activations), from memory
  constexpr int kBias = kT == DType::kQ8_0 ? kActBiasQ8 : kActBiasQ4;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[kTok];  // [token] x 16 rows
  for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
  // Few tokens: several int32 chains per token keep the vpdpbusd latency
  // hidden; integer sums are exact in any order, so the result does not
  // depend on the number of chains. q4_0 keeps its high nibbles in place
  // (x16) in chains of their own, shifted back once per block (their sums
  // are multiples of 16: exact).
  constexpr int kChains = kT == DType::kQ4_0 ? (kTok >= 4 ? 2 : 4) : kTok >= 4 ? 1 : 4 / kTok;
  constexpr int kHalf = kT == DType::kQ4_0 ? kChains / 2 : kChains;  // q4_0: [0, kHalf) low
  for (int64_t j = 0; j < nb; ++j) {
    const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kPackedActBytes);
    const uint8_t* wj = group + PackedQuantsAt(kT, j);
    // The lines kPackedPrefetch ahead: the pair's scales, then one per vector.
    const char* pf = reinterpret_cast<const char*>(wj) + kPackedPrefetch;
    if (j % 2 == 0) PrefetchLine(pf - 64);
    __m512i sum[kChains][kTok];
    for (int t = 0; t < kTok; ++t) {
      sum[0][t] = _mm512_set1_epi32(*ActField<kTok>(aj, kBias, t));
      for (int c = 1; c < kChains; ++c) sum[c][t] = _mm512_setzero_si512();
    }
    if constexpr (kT == DType::kQ8_0) {
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        PrefetchLine(pf + 64 * q);
        const __m512i w = _mm512_load_si512(wj + q * 64);
#pragma GCC unroll 8
        for (int t = 0; t < kTok; ++t) DotBroadcast(sum[q % kChains][t], w, aj + q * kTok + t);
      }
    } else {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        PrefetchLine(pf + 64 * q);
        const __m512i v = _mm512_load_si512(wj + q * 64);
        const __m512i lo = _mm512_and_si512(v, low4);       // elements 4q..
        const __m512i hi16 = _mm512_andnot_si512(low4, v);  // 16 x elements 16 + 4q..
#pragma GCC unroll 8
        for (int t = 0; t < kTok; ++t) {
          DotBroadcast(sum[q % kHalf][t], lo, aj + q * kTok + t);
          DotBroadcast(sum[kHalf + q % kHalf][t], hi16, aj + (4 + q) * kTok + t);
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(group + PackedScalesAt(kT, j))));
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      __m512i s = sum[0][t];
      for (int c = 1; c < kHalf; ++c) s = _mm512_add_epi32(s, sum[c][t]);
      if constexpr (kT == DType::kQ4_0) {
        __m512i h = sum[kHalf][t];
        for (int c = kHalf + 1; c < kChains; ++c) h = _mm512_add_epi32(h, sum[c][t]);
        s = _mm512_add_epi32(s, _mm512_srai_epi32(h, 4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                               _mm512_mul_ps(dw, _mm512_set1_ps(ActFloat<kTok>(aj, kActScale, t))),
                               acc[t]);
    }
  }
  for (int t = 0; t < kTok; ++t) _mm512_mask_storeu_ps(y + t * ldy, RowsMask(valid), acc[t]);
}

template <DType kT, int kTok>
void PackedGroups(const Weight& w, int64_t g0, int64_t g1, const uint8_t* acts, float* y,
                  int64_t ldy) {
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  for (int64_t g = g0; g < g1; ++g) {
    const int valid = static_cast<int>(std::min<int64_t>(16, w.n - 16 * g));
    PackedGroup<kT, kTok>(w.packed + g * stride, nb, acts, valid, y + 16 * g, ldy);
  }
}

template <DType kT>
void PackedTiles(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                 int64_t ldy) {
  ForEachTile(w.k / 32, m, acts, y, ldy, [&](auto tok, const uint8_t* a, float* yt) {
    PackedGroups<kT, decltype(tok)::value>(w, g0, g1, a, yt, ldy);
  });
}

}  // namespace

void PackedMatmul(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                  int64_t ldy) {
  if (w.type == DType::kQ8_0) return PackedTiles<DType::kQ8_0>(w, acts, m, g0, g1, y, ldy);
  if (w.type == DType::kQ4_0) return PackedTiles<DType::kQ4_0>(w, acts, m, g0, g1, y, ldy);
  if (IsPackedK(w.type)) return PackedMatmulK(w, acts, m, g0, g1, y, ldy);
  UnsupportedType(w.type);
}

}  // namespace rotor::ops::internal::avx512
