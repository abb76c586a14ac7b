// AVX-512 q8_0 / q4_0 products over row-interleaved weights (PackWeight's
// layout, see matmul.h), one kernel for every number of tokens.
//
// A zmm holds 4 weights of each of 16 rows, a line of the stream two such
// zmm (the group's 32 rows); vpdpbusd multiplies each with 4 activation bytes
// of one token, broadcast once into a register for both, so each int32 lane
// sums a whole block of one row (8 instructions per block) and the f32
// scaling runs once per block for 16 rows. Every output is the same sequence
// of operations whatever m and whatever tile it falls in: the results of a
// token do not depend on the tokens beside it (batched == alone, bit for bit).
//
// Activations are quantized to q8_0 per token (QuantizeActivations, bit for
// bit) and laid out in tiles of up to 8 tokens (matmul.cc PackActivations)
// so the kernel addresses every token from one pointer with constant offsets.
// More than 8 tokens take one tile of 8 per pass: batched decode over 9-16
// both tiles block by block (PairBlocks), prefill every tile over a range of
// groups that stays in L2 (PackedTiles).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/packed_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

// Bytes of the stream fetched ahead: q8_0 twice kPackedPrefetch, as the
// paired-layout prototype measured (bench/packed_pair_bench.cc); q4_0
// kPackedPrefetch (twice ran 110M q4_0 batch 1 0.977x of the 16-row groups
// where this ran 1.011x; BENCHMARKS.md, "Fifty-third session"). Passes over
// 8 or more tokens (kTok; PairBlocks: 16) fetch 8 KiB ahead, both types:
// they consume the stream at their arithmetic's pace, and 32 KiB (q8_0) or
// 16 KiB (q4_0) of lines ahead share the 48 KiB L1 with the tile's
// activations (about 18 KiB for 8 tokens at k = 2048; the likely cause, not
// measured). q8_0 from 32 KiB to 8: 1B batch 8 / 16 1.064 / 1.056x, 110M
// 1.028 / 1.052x (BENCHMARKS.md, "Fifty-fifth session"); 4 KiB ran as 8,
// 12 KiB slower (1B batch 8 0.907x). q4_0 from 16 KiB to 8: 1B batch 8 / 16
// 1.048 / 1.024x, 110M 1.029 / 1.049x ("Fifty-sixth session").
template <DType kT, int kTok>
constexpr int kAhead = kTok >= 8            ? 8 << 10
                       : kT == DType::kQ8_0 ? 2 * kPackedPrefetch
                                            : kPackedPrefetch;

// Block j of kN tokens into acc0 / acc1 [0, kN) (rows 0-15 / 16-31 of the
// group): the tokens are [t0, t0 + kN) of a tile of kStride tokens whose
// block j starts at aj; wj is the group's block j and dw its 2 x 16 scales.
// Each activation quad is broadcast once into a register and feeds both
// halves' vpdpbusd (half the loads of one broadcast per product: from DRAM
// the 8-token product ran 1.06-1.53x faster, BENCHMARKS.md, "Fifty-second
// session"). Every token takes the same operations whatever kN, kStride
// and t0: exact int32 sums from the bias, then the f32 steps, once per
// block. With pf, the lines kAhead ahead (pf = wj + kAhead) are fetched
// among the products, and with kL2 those further ahead into L2.
template <DType kT, int kStride, int kN, bool kL2>
[[gnu::always_inline]] inline void BlockTokens(const uint8_t* wj, const int32_t* aj, int t0,
                                               const __m512* dw, __m512* acc0, __m512* acc1,
                                               const char* pf) {
  // -(the stored unsigned q - the value) * sum(activations), from memory
  constexpr int kBias = kT == DType::kQ8_0 ? kActBiasQ8 : kActBiasQ4;
  // Few tokens: several int32 chains per token and half keep the vpdpbusd
  // latency hidden; integer sums are exact in any order, so the result does
  // not depend on the number of chains.
  // Below 4 tokens q4_0 keeps its high nibbles in place (x16) in chains of
  // their own, shifted back once per block (their sums are multiples of 16:
  // exact), a shift less per line; from 4 tokens the registers are too few.
  constexpr int kChains = kN >= 4 ? 1 : kN == 1 ? 4 : 2;
  constexpr bool kHi16 = kT == DType::kQ4_0 && kChains > 1;
  constexpr int kLow = kHi16 ? kChains / 2 : kChains;  // kHi16: chains [0, kLow) low
  __m512i sum[2][kChains][kN];
#pragma GCC unroll 8
  for (int t = 0; t < kN; ++t) {
    sum[0][0][t] = sum[1][0][t] = _mm512_set1_epi32(*ActField<kStride>(aj, kBias, t0 + t));
#pragma GCC unroll 4
    for (int c = 1; c < kChains; ++c) sum[0][c][t] = sum[1][c][t] = _mm512_setzero_si512();
  }
  // Quad e of both halves: q8_0 line e; q4_0 the low (e < 4) or high nibbles
  // of line e % 4 (elements 4 e.. of the block).
  auto products = [&](int e, int c, __m512i w0, __m512i w1) {
#pragma GCC unroll 8
    for (int t = 0; t < kN; ++t) {
      const __m512i a = _mm512_set1_epi32(*ActField<kStride>(aj, e, t0 + t));
      sum[0][c][t] = _mm512_dpbusd_epi32(sum[0][c][t], w0, a);
      sum[1][c][t] = _mm512_dpbusd_epi32(sum[1][c][t], w1, a);
    }
  };
  if constexpr (kT == DType::kQ8_0) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      if (pf)
        PrefetchAhead<kL2>(pf + kPackedLine * q), PrefetchAhead<kL2>(pf + kPackedLine * q + 64);
      products(q, q % kChains, _mm512_load_si512(wj + kPackedLine * q),
               _mm512_load_si512(wj + kPackedLine * q + 64));
    }
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      if (pf)
        PrefetchAhead<kL2>(pf + kPackedLine * q), PrefetchAhead<kL2>(pf + kPackedLine * q + 64);
      const __m512i v0 = _mm512_load_si512(wj + kPackedLine * q);
      const __m512i v1 = _mm512_load_si512(wj + kPackedLine * q + 64);
      products(q, q % kLow, _mm512_and_si512(v0, low4), _mm512_and_si512(v1, low4));
      if constexpr (kHi16)
        products(4 + q, kLow + q % kLow, _mm512_andnot_si512(low4, v0),
                 _mm512_andnot_si512(low4, v1));
      else
        products(4 + q, 0, _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4),
                 _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kN; ++t) {
    const __m512 as = _mm512_set1_ps(ActFloat<kStride>(aj, kActScale, t0 + t));
    __m512i s0 = sum[0][0][t], s1 = sum[1][0][t];
#pragma GCC unroll 4
    for (int c = 1; c < kLow; ++c)
      s0 = _mm512_add_epi32(s0, sum[0][c][t]), s1 = _mm512_add_epi32(s1, sum[1][c][t]);
    if constexpr (kHi16) {
      __m512i h0 = sum[0][kLow][t], h1 = sum[1][kLow][t];
#pragma GCC unroll 4
      for (int c = kLow + 1; c < kChains; ++c)
        h0 = _mm512_add_epi32(h0, sum[0][c][t]), h1 = _mm512_add_epi32(h1, sum[1][c][t]);
      s0 = _mm512_add_epi32(s0, _mm512_srai_epi32(h0, 4));
      s1 = _mm512_add_epi32(s1, _mm512_srai_epi32(h1, 4));
    }
    acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw[0], as), acc0[t]);
    acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw[1], as), acc1[t]);
  }
}

// The prefetch pointer of block j (wj) in a pass over kTok tokens, after
// fetching the two lines before it (the pair's 2 x 32 scales) on even blocks.
template <DType kT, int kTok, bool kL2 = kPrefetchL2<kTok>>
inline const char* PrefetchStart(const uint8_t* wj, int64_t j) {
  const char* pf = reinterpret_cast<const char*>(wj) + kAhead<kT, kTok>;
  if (j % 2 == 0) PrefetchAhead<kL2>(pf - 128), PrefetchAhead<kL2>(pf - 64);
  return pf;
}

// The 2 x 16 rows' scales of block j of a group.
template <DType kT>
inline void BlockScales(const uint8_t* group, int64_t j, __m512* dw) {
  const uint8_t* s = group + PackedScalesAt(kT, j);
  dw[0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(s)));
  dw[1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(s + 32)));
}

// Tokens per pass over a block: the f32 accumulators of a tile of 8 (16
// zmm) and the int32 sums of both halves for 4 tokens (8) fit the 32
// registers.
constexpr int kSub = 4;

// Block j of tokens [0, kTok) of a tile of kStride tokens, kSub at a time
// (the first pass prefetches).
template <DType kT, int kStride, int kTok, bool kL2>
[[gnu::always_inline]] inline void BlockTile(const uint8_t* wj, const int32_t* aj, const __m512* dw,
                                             __m512* acc0, __m512* acc1, const char* pf) {
  if constexpr (kTok <= kSub) {
    BlockTokens<kT, kStride, kTok, kL2>(wj, aj, 0, dw, acc0, acc1, pf);
  } else {
    BlockTokens<kT, kStride, kSub, kL2>(wj, aj, 0, dw, acc0, acc1, pf);
    // The next tokens load the block's lines again (from L1): with the
    // pointer opaque GCC cannot keep the lines in registers across the
    // passes, which left it too few for the accumulators.
    const uint8_t* again = wj;
    asm("" : "+r"(again));
    BlockTile<kT, kStride, kTok - kSub, kL2>(again, aj + kSub, dw, acc0 + kSub, acc1 + kSub,
                                             nullptr);
  }
}

// Stores the accumulators of one half's tokens (rows [16 h, 16 h + valid)).
template <int kTok>
inline void StoreHalf(const __m512* acc, int valid, float* y, int64_t ldy) {
  if (valid <= 0) return;
#pragma GCC unroll 16
  for (int t = 0; t < kTok; ++t) _mm512_mask_storeu_ps(y + t * ldy, RowsMask(valid), acc[t]);
}

// Rows [32 g, 32 g + valid) of kTok tokens (the tile at `acts`); `group` is
// the group's one stream of block pairs (kernels.h). Inlined into its loop
// over groups, which is its own function, and every loop over the
// accumulators unrolled: inlined into the tile loop, or with the zeroing
// and the stores left as loops, GCC 12 kept the accumulators or the int32
// sums in memory and stored them on every block (seen in objdump; prefill
// ran 4-11% slower with it; a call per group cost prefill about 4%).
template <DType kT, int kTok, bool kL2>
[[gnu::always_inline]] inline void PackedGroup(const uint8_t* group, int64_t nb,
                                               const uint8_t* acts, int valid, float* y,
                                               int64_t ldy) {
  __m512 acc0[kTok], acc1[kTok];  // [token] x rows 0-15, 16-31
#pragma GCC unroll 16
  for (int t = 0; t < kTok; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nb; ++j) {
    const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kPackedActBytes);
    const uint8_t* wj = group + PackedQuantsAt(kT, j);
    const char* pf = PrefetchStart<kT, kTok, kL2>(wj, j);
    __m512 dw[2];
    BlockScales<kT>(group, j, dw);
    BlockTile<kT, kTok, kTok, kL2>(wj, aj, dw, acc0, acc1, pf);
  }
  StoreHalf<kTok>(acc0, valid, y, ldy);
  StoreHalf<kTok>(acc1, valid - 16, y + 16, ldy);
}

// Rows [32 g0, 32 g1) of one tile of kTok tokens (kL2: PrefetchAhead's).
template <DType kT, int kTok, bool kL2 = kPrefetchL2<kTok>>
[[gnu::noinline]] void PackedGroups(const Weight& w, int64_t g0, int64_t g1, const uint8_t* acts,
                                    float* y, int64_t ldy) {
  constexpr int kRows = PackedRows(kT);
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  for (int64_t g = g0; g < g1; ++g) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, w.n - kRows * g));
    PackedGroup<kT, kTok, kL2>(w.packed + g * stride, nb, acts, valid, y + kRows * g, ldy);
  }
}

// Rows [32 g0, 32 g1) of 8 + kTok2 tokens (9-16), both tiles block by
// block: the first tile's accumulators in registers, the second's in memory
// (each read by its FMA and written once per block; the pointer hidden from
// GCC so it does not try to keep them in registers too), so the second tile
// reads each block from L1 just after the first. A group of 32 rows (64 KiB
// of q8_0 at k = 2048) does not fit L1: tile by tile over each group, the
// second tile read L2 while the DRAM stream idled, and ranges of 16 blocks
// per tile did no better (1B q8_0 batch 10 / 12 / 14 0.88 / 0.92 / 0.93x of
// the 16-row groups' kernel, 1.07 / 1.00 / 0.99x this way; BENCHMARKS.md,
// "Fifty-fourth session"). Its own loop rather than a second tile inside
// PackedGroup: that form (the same instructions, other registers) ran 1B
// batch 12 at 0.96x of this one.
template <DType kT, int kTok2>
[[gnu::noinline]] void PairBlocks(const Weight& w, int64_t g0, int64_t g1, const uint8_t* acts,
                                  float* y, int64_t ldy) {
  constexpr int kRows = PackedRows(kT), kTok1 = kPackedTileTokens;
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  const uint8_t* acts2 = acts + kTok1 * nb * kPackedActBytes;
  alignas(64) __m512 acc2[2 * kTok2];  // [half][token] of the second tile
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w.packed + g * stride;
    __m512 acc0[kTok1], acc1[kTok1];
#pragma GCC unroll 16
    for (int t = 0; t < kTok1; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int t = 0; t < 2 * kTok2; ++t) acc2[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; ++j) {
      const int32_t* a1 = reinterpret_cast<const int32_t*>(acts + j * kTok1 * kPackedActBytes);
      const int32_t* a2 = reinterpret_cast<const int32_t*>(acts2 + j * kTok2 * kPackedActBytes);
      const uint8_t* wj = group + PackedQuantsAt(kT, j);
      const char* pf = PrefetchStart<kT, 2 * kPackedTileTokens>(wj, j);
      __m512 dw[2];
      BlockScales<kT>(group, j, dw);
      BlockTile<kT, kTok1, kTok1, kPrefetchL2<2 * kPackedTileTokens>>(wj, a1, dw, acc0, acc1, pf);
      const uint8_t* again = wj;
      __m512* b = acc2;
      asm("" : "+r"(again), "+r"(b));
      BlockTile<kT, kTok2, kTok2, false>(again, a2, dw, b, b + kTok2, nullptr);
    }
    const int valid = static_cast<int>(std::min<int64_t>(kRows, w.n - kRows * g));
    float* yg = y + kRows * g;
    StoreHalf<kTok1>(acc0, valid, yg, ldy);
    StoreHalf<kTok1>(acc1, valid - 16, yg + 16, ldy);
    StoreHalf<kTok2>(acc2, valid, yg + kTok1 * ldy, ldy);
    StoreHalf<kTok2>(acc2 + kTok2, valid - 16, yg + kTok1 * ldy + 16, ldy);
  }
}

// Prefill: every tile of 8 tokens over the range of groups in turn, the
// range (64 rows, matmul.cc) staying in L2 for the later tiles. Batched
// decode over 9 to 16 tokens: PairBlocks.
template <DType kT>
void PackedTiles(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                 int64_t ldy) {
  if (m > kPackedTileTokens && m <= 2 * kPackedTileTokens) {
    auto pair = [&](auto tok, const uint8_t*, float*) {
      PairBlocks<kT, decltype(tok)::value>(w, g0, g1, acts, y, ldy);
    };
    return CallTile<kPackedTileTokens>(static_cast<int>(m - kPackedTileTokens), acts, y, pair);
  }
  if (m == kPackedTileTokens && PrefetchL2InDecodeTile())
    return PackedGroups<kT, kPackedTileTokens, true>(w, g0, g1, acts, y, ldy);
  ForEachTile(w.k / 32, m, acts, y, ldy, [&](auto tok, const uint8_t* a, float* yt) {
    PackedGroups<kT, decltype(tok)::value>(w, g0, g1, a, yt, ldy);
  });
}

}  // namespace

void PackedMatmul(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                  int64_t ldy) {
  if (PackedLayout(w.type) == DType::kQ8_0)
    return PackedTiles<DType::kQ8_0>(w, acts, m, g0, g1, y, ldy);
  if (w.type == DType::kQ4_0) return PackedTiles<DType::kQ4_0>(w, acts, m, g0, g1, y, ldy);
  if (IsPackedK(w.type)) return PackedMatmulK(w, acts, m, g0, g1, y, ldy);
  UnsupportedType(w.type);
}

}  // namespace rotor::ops::internal::avx512
