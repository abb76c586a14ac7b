// AVX-512 matrix-vector kernels of q4_K, q5_K and q6_K (m == 1, memory-bound).
// The activation is quantized once per step to 8-bit blocks of 32 (qx, f32
// scales dx, as for q8_0); each weight super-block (256 values) is unpacked to
// unsigned bytes in registers straight from 64-byte loads and multiplied with
// vpdpbusd (4 products per int32 lane), 4 rows per pass with software
// prefetch. Every int32 lane lies inside one sub-block and one activation
// block, so it is scaled in f32 by d * sc(sub-block) * dx(block) (a lane
// pattern built with vpermps). The q4_K / q5_K min term, dmin * m_i * sum(x
// over sub-block i), uses the per-block activation sums xsum = dx * sum(qx);
// q6_K's bias of 32 is removed in int32 by starting vpdpbusd from -32 *
// (4-lane activation sums), shared by the rows of a pass.
#include <immintrin.h>

#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

constexpr int kPrefetch = 16 << 10;

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 64 int8 activations: the 32 at a, then the 32 at b.
inline __m512i Join(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// Lane index pattern {a x8, b x8}.
inline __m512i Idx2(int a, int b) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}

// Byte pattern {a x32, b x32}.
inline __m512i Bytes2(int a, int b) {
  return _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(static_cast<char>(a)),
                                _mm512_set1_epi8(static_cast<char>(b)));
}

// The eight 6-bit scales and mins of a q4_K / q5_K block, as f32 lanes.
inline void ScalesMins(const uint8_t* s, __m256* sc, __m256* mn) {
  const uint32_t w0 = LoadU32(s), w1 = LoadU32(s + 4), w2 = LoadU32(s + 8);
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
  const auto to_f32 = [](uint32_t lo, uint32_t hi) {
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(hi) << 32 | lo));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  };
  *sc = to_f32(sc_lo, sc_hi);
  *mn = to_f32(m_lo, m_hi);
}

inline void Store(const __m512* acc, const float* sub, int kR, int64_t r0, float* y) {
  __m512 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r] : _mm512_setzero_ps();
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r] - (sub ? sub[r] : 0.f);
}

inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// q4_K (kQ5 false) / q5_K. Register v in 0..3 of a super-block holds the
// elements {0..31, 64..95}, {32..63, 96..127}, {128..159, 192..223},
// {160..191, 224..255}: the low / high nibbles of qs[0..63] and qs[64..127].
template <bool kQ5, int kR>
void GemvK45Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum,
                 int64_t r0, float* y) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQs = kQ5 ? 48 : 16;  // offset of qs
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
  const __m512i nib = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
  const __m512i pat[4] = {Idx2(0, 2), Idx2(1, 3), Idx2(4, 6), Idx2(5, 7)};
  const __m512i hbit[4] = {Bytes2(1, 4), Bytes2(2, 8), Bytes2(16, 64), Bytes2(32, 128)};
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
      const __m512i qa = _mm512_loadu_si512(blk + kQs), qb = _mm512_loadu_si512(blk + kQs + 64);
      __m512i wq[4] = {_mm512_and_si512(qa, nib), _mm512_and_si512(_mm512_srli_epi16(qa, 4), nib),
                       _mm512_and_si512(qb, nib), _mm512_and_si512(_mm512_srli_epi16(qb, 4), nib)};
      if constexpr (kQ5) {
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)));
        for (int v = 0; v < 4; ++v)
          wq[v] = _mm512_mask_add_epi8(wq[v], _mm512_test_epi8_mask(qh, hbit[v]), wq[v], sixteen);
      }
      for (int v = 0; v < 4; ++v) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[v], xv[v]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(pat[v], t16), acc[r]);
      }
    }
  }
  float mins[kR];
  for (int r = 0; r < kR; ++r) mins[r] = Sum8(accm[r]);
  Store(acc, mins, kR, r0, y);
}

// q6_K. Register v in 0..3 holds elements 64 v .. 64 v + 63 in order: the low
// (v even) / high nibbles of ql[64 (v / 2) ..], two bits of qh[32 (v / 2) ..]
// each. Lane i covers sub-block 4 v + i / 4 and activation block 2 v + i / 8.
template <int kR>
void GemvQ6KRows(const Weight& w, const int8_t* qx, const float* dx, int64_t r0, float* y) {
  const int64_t nsb = w.k / kQK_K;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i nib = _mm512_set1_epi8(15), hmask = _mm512_set1_epi8(0x30);
  const __m512i bias = _mm512_set1_epi8(32);
  const __m512i shl = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
  const __m512i shr = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
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
      corr[v] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv[v]));
      dxp[v] = _mm512_permutexvar_ps(Idx2(2 * v, 2 * v + 1), dx8);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * sizeof(BlockQ6_K);
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 128, _MM_HINT_T0);
      _mm_prefetch(pf + 192, _MM_HINT_T0);
      const __m512 s16 = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))),
          _mm512_set1_ps(Half(blk + 208)));
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
        const __m512i wl = _mm512_or_si512(_mm512_and_si512(ql, nib),
                                           _mm512_and_si512(_mm512_sllv_epi16(qh, shl), hmask));
        const __m512i wh =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nib),
                            _mm512_and_si512(_mm512_srlv_epi16(qh, shr), hmask));
        const __m512i d0 = _mm512_dpbusd_epi32(corr[2 * h], wl, xv[2 * h]);
        const __m512i d1 = _mm512_dpbusd_epi32(corr[2 * h + 1], wh, xv[2 * h + 1]);
        acc[r] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(d0),
            _mm512_mul_ps(_mm512_permutexvar_ps(sub[2 * h], s16), dxp[2 * h]), acc[r]);
        acc[r] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(d1),
            _mm512_mul_ps(_mm512_permutexvar_ps(sub[2 * h + 1], s16), dxp[2 * h + 1]), acc[r]);
      }
    }
  }
  Store(acc, nullptr, kR, r0, y);
}

}  // namespace

void GemvK(const Weight& w, const int8_t* qx, const float* dx, const float* xsum, int64_t r0,
           int64_t r1, float* y) {
  int64_t r = r0;
  switch (w.type) {
    case DType::kQ4_K:
      for (; r + 4 <= r1; r += 4) GemvK45Rows<false, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK45Rows<false, 1>(w, qx, dx, xsum, r, y);
      return;
    case DType::kQ5_K:
      for (; r + 4 <= r1; r += 4) GemvK45Rows<true, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK45Rows<true, 1>(w, qx, dx, xsum, r, y);
      return;
    case DType::kQ6_K:
      for (; r + 4 <= r1; r += 4) GemvQ6KRows<4>(w, qx, dx, r, y);
      for (; r < r1; ++r) GemvQ6KRows<1>(w, qx, dx, r, y);
      return;
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
