// Internal helpers of the AVX-512 kernels over row-interleaved weights
// (gemv_packed_avx512.cc: q8_0 / q4_0; gemv_packed_kquant_avx512.cc: q4_K,
// q5_K, q6_K). Include ONLY from *_avx512.cc files (see avx512_util.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/packed_tiles.h"

namespace rotor::ops::internal::avx512 {

// Bytes ahead of the weight stream to prefetch (measured on 2048 x 768:
// 4 KiB leaves the 8-token kernel waiting on DRAM, 16 KiB was the best of
// 2 / 4 / 8 / 16 / 32 KiB for 1 and 8 tokens).
inline constexpr int kPackedPrefetch = 16 << 10;

// Bytes ahead of the weight stream that a second prefetch asks for into L2
// only (prefetcht1), so the L1 prefetch kPackedPrefetch ahead finds its line
// in L2: on an Intel Xeon (family 6 model 207) without it the L1 prefetches'
// misses to memory held the core's fill buffers and decode streamed the
// weights slower than a plain read; with it decode ran 1.13-1.27x faster at
// batch 1 (BENCHMARKS.md, "Weights fetched into L2 ahead of L1").
inline constexpr int kPackedPrefetchL2 = 2 * kPackedPrefetch;

// Prefetches the line at p into L1. Volatile asm stays where it is written: a
// builtin prefetch may be scheduled anywhere, and GCC hoisted most of a
// K-quant record's 36-53 to its top (one-token q6_K: all 53 before the fifth
// of its 64 vpdpbusd), a burst that filled the core's miss buffers
// (end to end q6_K decode 1.16x once they went out with the work).
inline void PrefetchLine(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// Prefetches the line at p into L2 (not L1).
inline void PrefetchLineL2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// The line p (kPackedPrefetch ahead of the weights in use) into L1, and with
// kL2 the one kPackedPrefetchL2 ahead into L2. Passes over 8 or more tokens
// are bound by their arithmetic, not by the read, and the L2 prefetch is one
// more instruction per line: the q8_0 kernel at m = 8 ran 1.08x faster
// without it, weights in cache or in DRAM, on an AMD EPYC (Zen 5), while one
// token ran 0.95-0.97x (BENCHMARKS.md, "Forty-eighth session").
template <bool kL2 = true>
inline void PrefetchAhead(const char* p) {
  PrefetchLine(p);
  if constexpr (kL2) PrefetchLineL2(p + (kPackedPrefetchL2 - kPackedPrefetch));
}
// Whether a pass over kTokens tokens also prefetches into L2 (PrefetchAhead).
template <int kTokens>
inline constexpr bool kPrefetchL2 = kTokens < 8;
// Whether a pass over exactly 8 tokens (a batch-8 decode step; also a
// prompt or prompt chunk of 8) prefetches into L2 too: on Intel CPUs, where the L1 prefetches' misses otherwise hold
// the core's fill buffers (above): 1B q8_0 batch 8 1.02-1.09x in 9 of 10
// alternations (median 1.07; batch 1 0.94-1.07x, the same code), 110M
// 0.97-1.26x (median 1.08) on an Intel Xeon (family 6 model 207), where AMD's
// Zen 5 ran 1.08x faster without it (above). Batches of 9-16 gained nothing
// from it there (0.84-1.19x, median 1.00) and prefill's tiles of 8 keep
// kPrefetchL2 (BENCHMARKS.md, "Seventy-sixth session").
inline bool PrefetchL2InDecodeTile() {
  static const bool intel = GetCpuFeatures().intel;
  return intel;
}

// acc += u8 x s8 products of w and the 4 activation bytes at a, broadcast.
// (GCC 12 does not fold _mm512_set1_epi32 into the instruction's {1to16}
// memory operand; a separate broadcast per product costs a fifth of the time.)
inline void DotBroadcast(__m512i& acc, __m512i w, const int32_t* a) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
}

// Field f of token t in the activation block at aj of a tile of kTok tokens.
template <int kTok>
inline const int32_t* ActField(const int32_t* aj, int f, int t) {
  return aj + f * kTok + t;
}
template <int kTok>
inline float ActFloat(const int32_t* aj, int f, int t) {
  float v;
  __builtin_memcpy(&v, aj + f * kTok + t, 4);
  return v;
}

// The first `valid` of 16 rows.
inline __mmask16 RowsMask(int valid) {
  return valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
}

// q3_K .. q6_K groups [g0, g1) of w.packed for m tokens (PackedMatmul).
void PackedMatmulK(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1,
                   float* y, int64_t ldy);

}  // namespace rotor::ops::internal::avx512
