// AVX2 q8_0 / q4_0 products over row-interleaved weights (PackWeight's
// layout, kernels.h), one kernel for every number of tokens.
//
// A ymm holds 4 weights of each of 8 rows (a quarter of a 128-byte line of
// the 32-row group); the 4 activation bytes of one token are broadcast to every
// lane, so each int32 lane sums a whole block of one row and the f32 scaling
// runs once per block for 8 rows. The natural-layout kernels (matmul_avx2.cc)
// instead reduce 8 lanes of one row and scale every row and block apart:
// about 7 instructions per 32 products against 4 here.
//
// AVX2 has no u8 x s8 -> s32 dot product (vpdpbusd), and vpmaddubsw saturates
// its int16 pair sums, so the stored unsigned q8_0 quants (q + 128) cannot
// meet the activations directly (255 * 127 * 2 > 32767):
// - q8_0: q = stored ^ 0x80, then |q| * sign(x, q) (<= 128 * 127 * 2 = 32512
//   per pair), vpmaddwd with ones to int32, and int32 adds.
// - q4_0: the nibbles (q + 8, <= 15) times x stay <= 15 * 127 * 2 = 3810 per
//   pair, so a block's 8 vpmaddubsw results add up in int16 (<= 30480) before
//   one vpmaddwd; 8 * sum(x) comes off the int32 sum.
// Either way the block sums are the exact integers of the AVX-512 kernel and
// the f32 steps the same (acc = fma(float(s), d_w * d_x, acc), block after
// block), so every output is the same sequence of operations whatever m, the
// tile and the sub-tile: batched == alone, bit for bit, and equal to AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/kernels.h"
#include "ops/packed_tiles.h"

namespace rotor::ops::internal::avx2 {
namespace {

// Bytes ahead of the weight stream to prefetch: 16 KiB (32 KiB, as the
// AVX-512 q8_0 kernel, ran batch 1 about 5% slower here; BENCHMARKS.md,
// "Fifty-third session").
constexpr int kPrefetch = 16 << 10;

// Volatile asm: GCC 12 drops or hoists builtin prefetches in such loops.
inline void PrefetchLine(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

inline __m256i Broadcast(const int32_t* a) { return _mm256_set1_epi32(*a); }

inline float ActFloat(const int32_t* a) {
  float v;
  std::memcpy(&v, a, 4);
  return v;
}

// Rows [32 g + 8 (h0 + h), + 8) for h < kH, tokens [t0, t0 + kN) of a tile of
// kTok tokens at `acts`, blocks [j0, j1) into acc; `group` is the group's
// stream of block pairs. `prefetch`: this pass is the first over the blocks
// (it reads DRAM).
template <DType kT, int kTok, int kH, int kN>
[[gnu::always_inline]] inline void PassBlocks(const uint8_t* group, int64_t j0, int64_t j1,
                                              const uint8_t* acts, int h0, int t0, bool prefetch,
                                              __m256 (&acc)[kH][kN]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j = j0; j < j1; ++j) {
    const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kPackedActBytes) + t0;
    const uint8_t* wj = group + PackedQuantsAt(kT, j);
    const char* pf = reinterpret_cast<const char*>(wj) + kPrefetch;
    if (prefetch && j % 2 == 0) PrefetchLine(pf - 128), PrefetchLine(pf - 64);  // the scales
    __m256i sum[kH][kN];                                // int32 block sums
    if constexpr (kT == DType::kQ8_0) {
      const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        if (prefetch) PrefetchLine(pf + kPackedLine * q), PrefetchLine(pf + kPackedLine * q + 64);
#pragma GCC unroll 4
        for (int h = 0; h < kH; ++h) {
          const __m256i w = _mm256_xor_si256(
              _mm256_load_si256(
                  reinterpret_cast<const __m256i*>(wj + kPackedLine * q + 32 * (h0 + h))),
              bias);
          const __m256i aw = _mm256_sign_epi8(w, w);  // |q|, 128 for -128 (unsigned)
#pragma GCC unroll 4
          for (int t = 0; t < kN; ++t) {
            const __m256i x = _mm256_sign_epi8(Broadcast(aj + q * kTok + t), w);
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones);
            sum[h][t] = q == 0 ? p : _mm256_add_epi32(sum[h][t], p);
          }
        }
      }
    } else {
      const __m256i low4 = _mm256_set1_epi8(0x0F);
      __m256i s16[kH][kN];  // int16 pair sums of the block, <= 8 * 3810
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        if (prefetch) PrefetchLine(pf + kPackedLine * q), PrefetchLine(pf + kPackedLine * q + 64);
#pragma GCC unroll 4
        for (int h = 0; h < kH; ++h) {
          const __m256i v = _mm256_load_si256(
              reinterpret_cast<const __m256i*>(wj + kPackedLine * q + 32 * (h0 + h)));
          const __m256i lo = _mm256_and_si256(v, low4);                        // elements 4q..
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);  // 16 + 4q..
#pragma GCC unroll 4
          for (int t = 0; t < kN; ++t) {
            const __m256i p =
                _mm256_add_epi16(_mm256_maddubs_epi16(lo, Broadcast(aj + q * kTok + t)),
                                 _mm256_maddubs_epi16(hi, Broadcast(aj + (4 + q) * kTok + t)));
            s16[h][t] = q == 0 ? p : _mm256_add_epi16(s16[h][t], p);
          }
        }
      }
      for (int h = 0; h < kH; ++h)
        for (int t = 0; t < kN; ++t)
          sum[h][t] = _mm256_sub_epi32(_mm256_madd_epi16(s16[h][t], ones),
                                       _mm256_set1_epi32(8 * aj[kActSum * kTok + t]));
    }
    const uint8_t* scales = group + PackedScalesAt(kT, j);  // 32 f16, rows of the group
#pragma GCC unroll 4
    for (int h = 0; h < kH; ++h) {
      const __m256 dw =
          _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + 16 * (h0 + h))));
#pragma GCC unroll 4
      for (int t = 0; t < kN; ++t)
        acc[h][t] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(sum[h][t]),
            _mm256_mul_ps(dw, _mm256_set1_ps(ActFloat(aj + kActScale * kTok + t))), acc[h][t]);
    }
  }
}

// The outputs of a pass's accumulators acc ([kH][kN] x 8 rows): rows [32 g +
// 8 (h0 + h), + 8) of tokens [t0, t0 + kN) (y at row 32 g), none from `valid` on.
template <int kH, int kN>
void StorePass(const __m256 (&acc)[kH][kN], int h0, int t0, int valid, float* y, int64_t ldy) {
  for (int h = 0; h < kH; ++h) {
    const int rows = std::clamp(valid - 8 * (h0 + h), 0, 8);
    for (int t = 0; t < kN; ++t) {
      float* out = y + (t0 + t) * ldy + 8 * (h0 + h);
      if (rows == 8) {
        _mm256_storeu_ps(out, acc[h][t]);
      } else {
        alignas(32) float lanes[8];  // [8 rows]
        _mm256_store_ps(lanes, acc[h][t]);
        std::memcpy(out, lanes, sizeof(float) * rows);
      }
    }
  }
}

// One token: every quarter of the group in one pass over all its blocks,
// which reads the group once.
template <DType kT>
[[gnu::noinline]] void WholeGroup(const uint8_t* group, int64_t nb, const uint8_t* acts, int valid,
                                  float* y, int64_t ldy) {
  __m256 acc[4][1];  // [quarter][token] x 8 rows
  for (auto& a : acc) a[0] = _mm256_setzero_ps();
  PassBlocks<kT, 1, 4, 1>(group, 0, nb, acts, 0, 0, true, acc);
  StorePass<4, 1>(acc, 0, 0, valid, y, ldy);
}

// PassBlocks over blocks [j0, j1) with the accumulators taken from io
// ([kH][kN] x 8 rows) and put back, stored and loaded as they are: every
// output sees the same operations however the blocks are cut. A function
// of its own: inlined into the tile loop, the passes of 5-8 tokens ran
// batch 8 and 16 at 0.84-0.91x.
template <DType kT, int kTok, int kH, int kN>
[[gnu::noinline]] void Pass(const uint8_t* group, int64_t j0, int64_t j1, const uint8_t* acts,
                            int h0, int t0, bool prefetch, __m256 (&io)[kH][kN]) {
  __m256 acc[kH][kN];  // [quarter][token] x 8 rows
  for (int h = 0; h < kH; ++h)
    for (int t = 0; t < kN; ++t) acc[h][t] = io[h][t];
  PassBlocks<kT, kTok, kH, kN>(group, j0, j1, acts, h0, t0, prefetch, acc);
  for (int h = 0; h < kH; ++h)
    for (int t = 0; t < kN; ++t) io[h][t] = acc[h][t];
}

// Up to kMaxN tokens per pass over a quarter group: the accumulators of kN
// tokens and their block sums stay in the 16 ymm registers.
constexpr int kMaxN = 4;

// Blocks per turn of a group's passes: a range the later passes read from
// L1 (8 KiB of q8_0 quants; the first pass fetches the next 16 KiB). A
// group of 32 rows (64 KiB of q8_0 at k = 2048) does not fit L1: pass after
// pass over the whole group, 1B batch 4 ran 0.87-0.89x of the 16-row
// groups' kernel; ranges of 16 blocks gained less at batch 2 and 4 and lost
// at 8 and 16 (BENCHMARKS.md, "Fifty-fourth session").
constexpr int64_t kRangeBlocks = 8;

// Every quarter and token of a tile of kTok tokens for groups [g0, g1): one
// token in one pass per group, more in passes taken in turn over each range
// of kRangeBlocks blocks.
template <DType kT, int kTok>
void Tile(const Weight& w, const uint8_t* acts, int64_t g0, int64_t g1, float* y, int64_t ldy) {
  constexpr int kRows = PackedRows(kT);
  const int64_t nb = w.k / 32, stride = PackedGroupBytes(kT, w.k);
  if constexpr (kTok == 1) {
    for (int64_t g = g0; g < g1; ++g)
      WholeGroup<kT>(w.packed + g * stride, nb, acts,
                     static_cast<int>(std::min<int64_t>(kRows, w.n - kRows * g)), y + kRows * g,
                     ldy);
    return;
  }
  alignas(32) __m256 io[kRows / 8 * kTok];  // the passes' accumulators x 8 rows
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w.packed + g * stride;
    const int valid = static_cast<int>(std::min<int64_t>(kRows, w.n - kRows * g));
    // One pass of kH quarters from h0 and kN tokens from t0 over the blocks
    // [j0, j1) (`first`: it reads DRAM), or with `store` its outputs; its
    // accumulators at io + h0 kTok + t0 kH, apart from every other pass's.
    int64_t j0 = 0, j1 = 0;
    bool store = false;
    for (__m256& a : io) a = _mm256_setzero_ps();
    auto pass = [&](auto kh, auto kn, int h0, int t0, bool first) {
      constexpr int kH = decltype(kh)::value, kN = decltype(kn)::value;
      auto& slot = *reinterpret_cast<__m256(*)[kH][kN]>(io + h0 * kTok + t0 * kH);
      if (store) return StorePass<kH, kN>(slot, h0, t0, valid, y + kRows * g, ldy);
      Pass<kT, kTok, kH, kN>(group, j0, j1, acts, h0, t0, first, slot);
    };
    using std::integral_constant;
    auto passes = [&] {
      if constexpr (kTok == 2) {  // two quarters of the group per pass
        pass(integral_constant<int, 2>{}, integral_constant<int, kTok>{}, 0, 0, true);
        if (valid > 16)
          pass(integral_constant<int, 2>{}, integral_constant<int, kTok>{}, 2, 0, false);
      } else {
        for (int h = 0; h < kRows / 8 && 8 * h < valid; ++h) {
          int t0 = 0;
          for (; t0 + kMaxN <= kTok; t0 += kMaxN)
            pass(integral_constant<int, 1>{}, integral_constant<int, kMaxN>{}, h, t0,
                 h == 0 && t0 == 0);
          constexpr int kRest = kTok % kMaxN;
          if constexpr (kRest > 0)
            pass(integral_constant<int, 1>{}, integral_constant<int, kRest>{}, h, t0,
                 h == 0 && t0 == 0);
        }
      }
    };
    for (j0 = 0; j0 < nb; j0 += kRangeBlocks) {
      j1 = std::min(nb, j0 + kRangeBlocks);
      passes();
    }
    store = true;
    passes();
  }
}

template <DType kT>
void Tiles(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
           int64_t ldy) {
  ForEachTile(w.k / 32, m, acts, y, ldy, [&](auto tok, const uint8_t* a, float* yt) {
    Tile<kT, decltype(tok)::value>(w, a, g0, g1, yt, ldy);
  });
}

}  // namespace

void PackedMatmul(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                  int64_t ldy) {
  if (PackedLayout(w.type) == DType::kQ8_0) return Tiles<DType::kQ8_0>(w, acts, m, g0, g1, y, ldy);
  if (w.type == DType::kQ4_0) return Tiles<DType::kQ4_0>(w, acts, m, g0, g1, y, ldy);
  if (IsPackedK(w.type)) return PackedMatmulK(w, acts, m, g0, g1, y, ldy);
  UnsupportedType(w.type);
}

}  // namespace rotor::ops::internal::avx2
