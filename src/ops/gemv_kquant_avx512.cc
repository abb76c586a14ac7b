// AVX-512 matrix-vector kernels of the K-quants (unpacked rows: q2_K and q3_K
// in a model, every K-quant in tests), one kernel for every number of tokens.
// The activation is quantized once per step to 8-bit blocks of 32 (qx, f32
// scales dx, as for q8_0); each weight super-block (256 values) is unpacked to
// unsigned bytes in registers straight from 64-byte loads and multiplied with
// vpdpbusd (4 products per int32 lane), 4 rows per pass with software
// prefetch. Every int32 lane lies inside one sub-block and one activation
// block, so it is scaled in f32 by d * sc(sub-block) * dx(block) (a lane
// pattern built with vpermps). The q4_K / q5_K min term, dmin * m_i * sum(x
// over sub-block i), uses the per-block activation sums xsum = dx * sum(qx);
// q6_K's bias of 32 (q3_K's 4) is removed in int32 by starting vpdpbusd from
// -32 * (4-lane activation sums), shared by the rows of a pass; q2_K's mins
// use activation sums per 16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/kquant_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

constexpr int kPrefetch = 16 << 10;

// q4_K (kQ5 false) / q5_K, registers as UnpackK45: rows [r0, r0 + kR) for
// kTok tokens (token t's activations at qx + t k, dx + t k / 32, xsum + t k /
// 32; y + t ldy). Each super-block of a row is unpacked once for the kTok
// tokens, and each (row, token) output takes the same operations in the same
// order for every kR and kTok (batched == alone, bit for bit).
template <bool kQ5, int kR, int kTok>
void GemvK45Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum,
                 int64_t r0, float* y, int64_t ldy) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const int64_t k = w.k, nsb = k / kQK_K, nb = k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR][kTok];
  __m256 accm[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      accm[r][t] = _mm256_setzero_ps();
    }
  const __m512i pat[4] = {Idx2(0, 2), Idx2(1, 3), Idx2(4, 6), Idx2(5, 7)};
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512i xv[kTok][4];  // [kTok][4] the super-block's activations (UnpackK45 order)
    __m256 dx8[kTok], xs8[kTok];
    for (int t = 0; t < kTok; ++t) {
      const int8_t* xb = qx + t * k + sb * kQK_K;
      xv[t][0] = Join(xb, xb + 64);
      xv[t][1] = Join(xb + 32, xb + 96);
      xv[t][2] = Join(xb + 128, xb + 192);
      xv[t][3] = Join(xb + 160, xb + 224);
      dx8[t] = _mm256_loadu_ps(dx + t * nb + sb * 8);
      xs8[t] = _mm256_loadu_ps(xsum + t * nb + sb * 8);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 128, _MM_HINT_T0);
      __m256 sc, mn;
      ScalesMins(blk + 4, &sc, &mn);
      const __m256 mins = _mm256_mul_ps(mn, _mm256_set1_ps(Half(blk + 2)));
      const __m256 scales = _mm256_mul_ps(sc, _mm256_set1_ps(Half(blk)));
      __m512i wq[4];
      UnpackK45<kQ5>(blk, wq);
#pragma GCC unroll 4
      for (int t = 0; t < kTok; ++t) {
        accm[r][t] = _mm256_fmadd_ps(mins, xs8[t], accm[r][t]);
        const __m512 t16 = _mm512_castps256_ps512(_mm256_mul_ps(scales, dx8[t]));
        for (int v = 0; v < 4; ++v) {
          const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[v], xv[t][v]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(pat[v], t16),
                                      acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    __m512 a[kR];
    float mins[kR];  // [kR] min terms per row
    for (int r = 0; r < kR; ++r) {
      a[r] = acc[r][t];
      mins[r] = Sum8(accm[r][t]);
    }
    Store(a, mins, kR, r0, y + t * ldy);
  }
}

// q2_K / q3_K / q6_K, rows and tokens as GemvK45Rows (q2_K's xsum per 16:
// xsum + t k / 16).
template <DType kT, int kR, int kTok>
void GemvK16Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum16,
                 int64_t r0, float* y, int64_t ldy) {
  using P = K16<kT>;
  const int64_t k = w.k, nsb = k / kQK_K, nb = k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR][kTok], accm[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = accm[r][t] = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(P::kBias));
  __m512i sub[4];
  for (int v = 0; v < 4; ++v)
    sub[v] = _mm512_set_epi32(4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 2, 4 * v + 2,
                              4 * v + 2, 4 * v + 2, 4 * v + 1, 4 * v + 1, 4 * v + 1, 4 * v + 1,
                              4 * v, 4 * v, 4 * v, 4 * v);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    // [kTok][4] the super-block's activations, bias corrections and scale lanes
    __m512i xv[kTok][4], corr[kTok][4];
    __m512 dxp[kTok][4], xs16[kTok];
    for (int t = 0; t < kTok; ++t) {
      const int8_t* xb = qx + t * k + sb * kQK_K;
      const __m512 dx8 = _mm512_castps256_ps512(_mm256_loadu_ps(dx + t * nb + sb * 8));
      for (int v = 0; v < 4; ++v) {
        xv[t][v] = _mm512_loadu_si512(xb + 64 * v);
        corr[t][v] = P::kBias == 0
                         ? _mm512_setzero_si512()
                         : _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias,
                                                                xv[t][v]));
        dxp[t][v] = _mm512_permutexvar_ps(Idx2(2 * v, 2 * v + 1), dx8);
      }
      xs16[t] = _mm512_setzero_ps();
      if constexpr (kT == DType::kQ2_K) xs16[t] = _mm512_loadu_ps(xsum16 + t * (k / 16) + sb * 16);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * P::kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      for (int line = 0; line < P::kLines; ++line) _mm_prefetch(pf + 64 * line, _MM_HINT_T0);
      __m512i wq[4];
      __m512 s16, m16;
      UnpackK16<kT>(blk, wq, &s16, &m16);
      __m512 sp[4];  // [4] each lane's sub-block scale
      for (int v = 0; v < 4; ++v) sp[v] = _mm512_permutexvar_ps(sub[v], s16);
#pragma GCC unroll 4
      for (int t = 0; t < kTok; ++t) {
        if constexpr (kT == DType::kQ2_K) accm[r][t] = _mm512_fmadd_ps(m16, xs16[t], accm[r][t]);
        for (int v = 0; v < 4; ++v) {
          const __m512i d = _mm512_dpbusd_epi32(corr[t][v], wq[v], xv[t][v]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sp[v], dxp[t][v]),
                                      acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    __m512 a[kR];
    float mins[kR];  // [kR] min terms per row (q2_K)
    for (int r = 0; r < kR; ++r) {
      a[r] = acc[r][t];
      mins[r] = kT == DType::kQ2_K ? _mm512_reduce_add_ps(accm[r][t]) : 0.f;
    }
    Store(a, kT == DType::kQ2_K ? mins : nullptr, kR, r0, y + t * ldy);
  }
}

// Rows [r0, r1) of tokens [t0, t1) of one type: blocks of kRowBlock rows stay
// in cache while the tokens pass, kTile tokens a call (2 rows), then
// kGemvKTile, then the rest token by token (4 rows a call).
template <int kTile, typename Kernel>
void RunTiles(int64_t t0, int64_t t1, int64_t r0, int64_t r1, Kernel kernel) {
  constexpr int64_t kRowBlock = 16;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    int64_t t = t0;
    auto tiles = [&](auto tile) {
      for (; t + decltype(tile)::value <= t1; t += decltype(tile)::value) {
        int64_t r = rb;
        for (; r + 2 <= re; r += 2) kernel(std::integral_constant<int, 2>{}, tile, t, r);
        for (; r < re; ++r) kernel(std::integral_constant<int, 1>{}, tile, t, r);
      }
    };
    tiles(std::integral_constant<int, kTile>{});
    if constexpr (kTile > kGemvKTile) tiles(std::integral_constant<int, kGemvKTile>{});
    for (; t < t1; ++t) {
      int64_t r = rb;
      for (; r + 4 <= re; r += 4)
        kernel(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{}, t, r);
      for (; r < re; ++r)
        kernel(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{}, t, r);
    }
  }
}

}  // namespace

void GemvK(const Weight& w, const int8_t* qx, const float* dx, const float* xsum, int64_t t0,
           int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t k = w.k, xs = KXsumStride(w.type, k);
  auto run16 = [&](auto type) {
    constexpr DType kT = decltype(type)::value;
    // q3_K / q6_K: 2 rows x 8 tokens (16 accumulators); q2_K's mins double them.
    constexpr int kTile = kT == DType::kQ2_K ? 4 : 8;
    RunTiles<kTile>(t0, t1, r0, r1, [&](auto rows, auto toks, int64_t t, int64_t r) {
      GemvK16Rows<kT, decltype(rows)::value, decltype(toks)::value>(
          w, qx + t * k, dx + t * (k / 32), xsum + t * xs, r, y + t * ldy, ldy);
    });
  };
  auto run45 = [&](auto q5) {
    RunTiles<4>(t0, t1, r0, r1, [&](auto rows, auto toks, int64_t t, int64_t r) {
      GemvK45Rows<decltype(q5)::value, decltype(rows)::value, decltype(toks)::value>(
          w, qx + t * k, dx + t * (k / 32), xsum + t * xs, r, y + t * ldy, ldy);
    });
  };
  switch (w.type) {
    case DType::kQ2_K:
      return run16(std::integral_constant<DType, DType::kQ2_K>{});
    case DType::kQ3_K:
      return run16(std::integral_constant<DType, DType::kQ3_K>{});
    case DType::kQ6_K:
      return run16(std::integral_constant<DType, DType::kQ6_K>{});
    case DType::kQ4_K:
      return run45(std::false_type{});
    case DType::kQ5_K:
      return run45(std::true_type{});
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
