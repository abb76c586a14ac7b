// AVX-512 matrix-vector kernels of the K-quants (m == 1, memory-bound).
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

#include <cstring>
#include <type_traits>

#include "ops/avx512_util.h"
#include "ops/kernels.h"
#include "ops/kquant_avx512.h"

namespace rotor::ops::internal::avx512 {
namespace {

constexpr int kPrefetch = 16 << 10;

// q4_K (kQ5 false) / q5_K, registers as UnpackK45.
template <bool kQ5, int kR>
void GemvK45Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum,
                 int64_t r0, float* y) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const int64_t nsb = w.k / kQK_K;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR];
  __m256 accm[kR];
  for (int r = 0; r < kR; ++r) {
    acc[r] = _mm512_setzero_ps();
    accm[r] = _mm256_setzero_ps();
  }
  const __m512i pat[4] = {Idx2(0, 2), Idx2(1, 3), Idx2(4, 6), Idx2(5, 7)};
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* xb = qx + sb * kQK_K;
    const __m512i xv[4] = {Join(xb, xb + 64), Join(xb + 32, xb + 96), Join(xb + 128, xb + 192),
                           Join(xb + 160, xb + 224)};
    const __m256 dx8 = _mm256_loadu_ps(dx + sb * 8), xs8 = _mm256_loadu_ps(xsum + sb * 8);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 128, _MM_HINT_T0);
      __m256 sc, mn;
      ScalesMins(blk + 4, &sc, &mn);
      accm[r] = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(Half(blk + 2))), xs8, accm[r]);
      const __m512 t16 = _mm512_castps256_ps512(
          _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(Half(blk))), dx8));
      __m512i wq[4];
      UnpackK45<kQ5>(blk, wq);
      for (int v = 0; v < 4; ++v) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[v], xv[v]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(pat[v], t16), acc[r]);
      }
    }
  }
  float mins[kR];  // [kR] min terms per row
  for (int r = 0; r < kR; ++r) mins[r] = Sum8(accm[r]);
  Store(acc, mins, kR, r0, y);
}

template <DType kT, int kR>
void GemvK16Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum16,
                 int64_t r0, float* y) {
  using P = K16<kT>;
  const int64_t nsb = w.k / kQK_K;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR], accm[kR];
  for (int r = 0; r < kR; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(P::kBias));
  __m512i sub[4];
  for (int v = 0; v < 4; ++v)
    sub[v] = _mm512_set_epi32(4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 3, 4 * v + 2, 4 * v + 2,
                              4 * v + 2, 4 * v + 2, 4 * v + 1, 4 * v + 1, 4 * v + 1, 4 * v + 1,
                              4 * v, 4 * v, 4 * v, 4 * v);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* xb = qx + sb * kQK_K;
    __m512i xv[4], corr[4];
    __m512 dxp[4];
    const __m512 dx8 = _mm512_castps256_ps512(_mm256_loadu_ps(dx + sb * 8));
    for (int v = 0; v < 4; ++v) {
      xv[v] = _mm512_loadu_si512(xb + 64 * v);
      corr[v] = P::kBias == 0 ? _mm512_setzero_si512()
                              : _mm512_sub_epi32(_mm512_setzero_si512(),
                                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias,
                                                                     xv[v]));
      dxp[v] = _mm512_permutexvar_ps(Idx2(2 * v, 2 * v + 1), dx8);
    }
    __m512 xs16 = _mm512_setzero_ps();
    if constexpr (kT == DType::kQ2_K) xs16 = _mm512_loadu_ps(xsum16 + sb * 16);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * P::kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      for (int line = 0; line < P::kLines; ++line) _mm_prefetch(pf + 64 * line, _MM_HINT_T0);
      __m512i wq[4];
      __m512 s16, m16;
      UnpackK16<kT>(blk, wq, &s16, &m16);
      if constexpr (kT == DType::kQ2_K) accm[r] = _mm512_fmadd_ps(m16, xs16, accm[r]);
      for (int v = 0; v < 4; ++v) {
        const __m512i d = _mm512_dpbusd_epi32(corr[v], wq[v], xv[v]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                 _mm512_mul_ps(_mm512_permutexvar_ps(sub[v], s16), dxp[v]), acc[r]);
      }
    }
  }
  if constexpr (kT == DType::kQ2_K) {
    float mins[kR];  // [kR] min terms per row
    for (int r = 0; r < kR; ++r) mins[r] = _mm512_reduce_add_ps(accm[r]);
    Store(acc, mins, kR, r0, y);
  } else {
    Store(acc, nullptr, kR, r0, y);
  }
}

}  // namespace

void GemvK(const Weight& w, const int8_t* qx, const float* dx, const float* xsum, int64_t r0,
           int64_t r1, float* y) {
  int64_t r = r0;
  if (w.type == DType::kQ2_K || w.type == DType::kQ3_K || w.type == DType::kQ6_K) {
    auto run = [&](auto tag) {
      constexpr DType kT = decltype(tag)::value;
      for (; r + 4 <= r1; r += 4) GemvK16Rows<kT, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK16Rows<kT, 1>(w, qx, dx, xsum, r, y);
    };
    if (w.type == DType::kQ2_K) return run(std::integral_constant<DType, DType::kQ2_K>{});
    if (w.type == DType::kQ3_K) return run(std::integral_constant<DType, DType::kQ3_K>{});
    return run(std::integral_constant<DType, DType::kQ6_K>{});
  }
  switch (w.type) {
    case DType::kQ4_K:
      for (; r + 4 <= r1; r += 4) GemvK45Rows<false, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK45Rows<false, 1>(w, qx, dx, xsum, r, y);
      return;
    case DType::kQ5_K:
      for (; r + 4 <= r1; r += 4) GemvK45Rows<true, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK45Rows<true, 1>(w, qx, dx, xsum, r, y);
      return;
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
