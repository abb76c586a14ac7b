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
// 9 to 16 tokens (batched decode) take both tiles in one pass over the
// weights, each block's quants read again from L1 for the second tile
// (PackedGroupPair); more tokens (prefill) take one tile per pass over a
// range of groups that stays in L2 (tried in pairs: no faster).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/packed_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

// Block j of kN tokens into acc[0, kN): the tokens are [t0, t0 + kN) of a
// tile of kStride tokens whose block j starts at aj; wj is the group's block j
// (its 16 rows' quants) and dw its 16 scales. Every token takes the same
// operations whatever kN, kStride and t0: the f32 steps below, once per block.
// With pf, the lines kPackedPrefetch ahead (pf = wj + kPackedPrefetch) are
// fetched one per vector, among the products, and with kL2 those
// kPackedPrefetchL2 ahead into L2 (packed_avx512.h).
template <DType kT, int kStride, int kN, bool kL2>
[[gnu::always_inline]] inline void BlockTokens(const uint8_t* wj, const int32_t* aj, int t0,
                                               __m512 dw, __m512* acc, const char* pf) {
  // -(the stored unsigned q - the value) * sum(activations), from memory
  constexpr int kBias = kT == DType::kQ8_0 ? kActBiasQ8 : kActBiasQ4;
  // Few tokens: several int32 chains per token keep the vpdpbusd latency
  // hidden; integer sums are exact in any order, so the result does not
  // depend on the number of chains. q4_0 keeps its high nibbles in place
  // (x16) in chains of their own, shifted back once per block (their sums
  // are multiples of 16: exact).
  constexpr int kChains = kT == DType::kQ4_0 ? (kN >= 4 ? 2 : 4) : kN >= 4 ? 1 : 4 / kN;
  constexpr int kHalf = kT == DType::kQ4_0 ? kChains / 2 : kChains;  // q4_0: [0, kHalf) low
  __m512i sum[kChains][kN];
#pragma GCC unroll 8
  for (int t = 0; t < kN; ++t) {
    sum[0][t] = _mm512_set1_epi32(*ActField<kStride>(aj, kBias, t0 + t));
#pragma GCC unroll 8
    for (int c = 1; c < kChains; ++c) sum[c][t] = _mm512_setzero_si512();
  }
  if constexpr (kT == DType::kQ8_0) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      if (pf) PrefetchAhead<kL2>(pf + 64 * q);
      const __m512i w = _mm512_load_si512(wj + q * 64);
#pragma GCC unroll 8
      for (int t = 0; t < kN; ++t)
        DotBroadcast(sum[q % kChains][t], w, ActField<kStride>(aj, q, t0 + t));
    }
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      if (pf) PrefetchAhead<kL2>(pf + 64 * q);
      const __m512i v = _mm512_load_si512(wj + q * 64);
      const __m512i lo = _mm512_and_si512(v, low4);       // elements 4q..
      const __m512i hi16 = _mm512_andnot_si512(low4, v);  // 16 x elements 16 + 4q..
#pragma GCC unroll 8
      for (int t = 0; t < kN; ++t) {
        DotBroadcast(sum[q % kHalf][t], lo, ActField<kStride>(aj, q, t0 + t));
        DotBroadcast(sum[kHalf + q % kHalf][t], hi16, ActField<kStride>(aj, 4 + q, t0 + t));
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kN; ++t) {
    __m512i s = sum[0][t];
#pragma GCC unroll 8
    for (int c = 1; c < kHalf; ++c) s = _mm512_add_epi32(s, sum[c][t]);
    if constexpr (kT == DType::kQ4_0) {
      __m512i h = sum[kHalf][t];
#pragma GCC unroll 8
      for (int c = kHalf + 1; c < kChains; ++c) h = _mm512_add_epi32(h, sum[c][t]);
      s = _mm512_add_epi32(s, _mm512_srai_epi32(h, 4));
    }
    acc[t] = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(s),
        _mm512_mul_ps(dw, _mm512_set1_ps(ActFloat<kStride>(aj, kActScale, t0 + t))), acc[t]);
  }
}

// The prefetch pointer of block j (wj), after fetching the line before it
// (the pair's scales) on even blocks.
template <bool kL2>
inline const char* PrefetchStart(const uint8_t* wj, int64_t j) {
  const char* pf = reinterpret_cast<const char*>(wj) + kPackedPrefetch;
  if (j % 2 == 0) PrefetchAhead<kL2>(pf - 64);
  return pf;
}

// The 16 rows' scales of block j of a group.
template <DType kT>
inline __m512 BlockScales(const uint8_t* group, int64_t j) {
  return _mm512_cvtph_ps(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(group + PackedScalesAt(kT, j))));
}

// Rows [16 g, 16 g + valid) of kTok tokens (the tile at `acts`); `group` is
// the group's one stream of block pairs (kernels.h). Inlined into its loop
// over groups, which is its own function, and every loop over the
// accumulators unrolled: inlined into the tile loop, or with the zeroing
// and the stores left as loops, GCC 12 kept the accumulators or the int32
// sums in memory and stored them on every block (seen in objdump; prefill
// ran 4-11% slower with it; a call per group cost prefill about 4%).
template <DType kT, int kTok>
[[gnu::always_inline]] inline void PackedGroup(const uint8_t* group, int64_t nb,
                                               const uint8_t* acts, int valid, float* y,
                                               int64_t ldy) {
  __m512 acc[kTok];  // [token] x 16 rows
#pragma GCC unroll 16
  for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nb; ++j) {
    const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kPackedActBytes);
    const uint8_t* wj = group + PackedQuantsAt(kT, j);
    const char* pf = PrefetchStart<kPrefetchL2<kTok>>(wj, j);
    const __m512 dw = BlockScales<kT>(group, j);
    BlockTokens<kT, kTok, kTok, kPrefetchL2<kTok>>(wj, aj, 0, dw, acc, pf);
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTok; ++t) _mm512_mask_storeu_ps(y + t * ldy, RowsMask(valid), acc[t]);
}

// As PackedGroup for a full tile of 8 tokens (acts0) and a tile of kTok1
// (acts1) in one pass over the group: each block's quants are read from
// memory once and again from L1, where two passes over a range of groups
// streamed it twice (batch 9-16 decode). The tokens go kSub at a time so the
// integer sums and the 8 + kTok1 accumulators nearly fit in the 32 registers
// (16 tokens: GCC keeps 2 accumulators of q8_0 on the stack, 3 of q4_0).
template <DType kT, int kTok1>
void PackedGroupPair(const uint8_t* group, int64_t nb, const uint8_t* acts0, const uint8_t* acts1,
                     int valid, float* y, int64_t ldy) {
  constexpr int kTok0 = kPackedTileTokens;
  constexpr int kSub = kT == DType::kQ4_0 ? 4 : 8;  // q4_0: two int32 chains per token
  static_assert(kTok0 % kSub == 0);
  __m512 acc[kTok0 + kTok1];  // [token] x 16 rows
#pragma GCC unroll 16
  for (int t = 0; t < kTok0 + kTok1; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nb; ++j) {
    const int32_t* a0 = reinterpret_cast<const int32_t*>(acts0 + j * kTok0 * kPackedActBytes);
    const int32_t* a1 = reinterpret_cast<const int32_t*>(acts1 + j * kTok1 * kPackedActBytes);
    const uint8_t* wj = group + PackedQuantsAt(kT, j);
    const char* pf = PrefetchStart<false>(wj, j);
    const __m512 dw = BlockScales<kT>(group, j);
    BlockTokens<kT, kTok0, kSub, false>(wj, a0, 0, dw, acc, pf);
    if constexpr (kSub < kTok0)
      BlockTokens<kT, kTok0, kSub, false>(wj, a0, kSub, dw, acc + kSub, nullptr);
    if constexpr (kTok1 <= kSub) {
      BlockTokens<kT, kTok1, kTok1, false>(wj, a1, 0, dw, acc + kTok0, nullptr);
    } else {
      BlockTokens<kT, kTok1, kSub, false>(wj, a1, 0, dw, acc + kTok0, nullptr);
      BlockTokens<kT, kTok1, kTok1 - kSub, false>(wj, a1, kSub, dw, acc + kTok0 + kSub, nullptr);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTok0 + kTok1; ++t)
    _mm512_mask_storeu_ps(y + t * ldy, RowsMask(valid), acc[t]);
}

template <DType kT, int kTok>
[[gnu::noinline]] void PackedGroups(const Weight& w, int64_t g0, int64_t g1, const uint8_t* acts,
                                    float* y, int64_t ldy) {
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  for (int64_t g = g0; g < g1; ++g) {
    const int valid = static_cast<int>(std::min<int64_t>(16, w.n - 16 * g));
    PackedGroup<kT, kTok>(w.packed + g * stride, nb, acts, valid, y + 16 * g, ldy);
  }
}

// 9 to 16 tokens: the first tile's 8 and the second tile's m - 8, one pass.
template <DType kT>
void PackedPairs(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                 int64_t ldy) {
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  const uint8_t* acts1 = acts + kPackedTileTokens * nb * kPackedActBytes;
  auto f = [&](auto tok1, const uint8_t*, float*) {
    for (int64_t g = g0; g < g1; ++g) {
      const int valid = static_cast<int>(std::min<int64_t>(16, w.n - 16 * g));
      PackedGroupPair<kT, decltype(tok1)::value>(w.packed + g * stride, nb, acts, acts1, valid,
                                                 y + 16 * g, ldy);
    }
  };
  CallTile<kPackedTileTokens>(static_cast<int>(m - kPackedTileTokens), acts1, y, f);
}

template <DType kT>
void PackedTiles(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                 int64_t ldy) {
  if (m > kPackedTileTokens && m <= 2 * kPackedTileTokens)
    return PackedPairs<kT>(w, acts, m, g0, g1, y, ldy);
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
