// AVX2 matrix-vector kernels of the K-quants (m == 1, memory-bound).
// As the AVX-512 kernels (gemv_kquant_avx512.cc) with 32 weights per register:
// the activation quantized once to 8-bit blocks of 32 (qx, dx), weights
// unpacked to unsigned bytes, vpmaddubsw + vpmaddwd give int32 lanes of 4
// products (exact: |w| <= 63, |x| <= 127, pairs <= 16002), scaled in f32 by
// d * sc * dx; q2_K / q4_K / q5_K's mins through the activation block sums
// xsum, q3_K's bias of 4 and q6_K's of 32 in int32 by subtracting bias *
// (4-lane activation sums). 4 rows per pass with software prefetch.
#include <immintrin.h>

#include <cstring>

#include "ops/kernels.h"

namespace rotor::ops::internal::avx2 {
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

inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// int32 lanes of 4 products of unsigned w and signed x.
inline __m256i Dot4(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

inline float Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 Bcast(__m256 v, int i) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i)); }

// Sub-block j (elements 32 j .. 32 j + 31) of a q4_K / q5_K super-block:
// chunk c = j / 2 of qs, low nibbles for even j; q5_K adds bit j of qh[l].
template <bool kQ5, int kR>
void GemvK45Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum,
                 int64_t r0, float* y) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQs = kQ5 ? 48 : 16;
  const int64_t nsb = w.k / kQK_K;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR], accm[kR];
  for (int r = 0; r < kR; ++r) acc[r] = accm[r] = _mm256_setzero_ps();
  const __m256i nib = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* xb = qx + sb * kQK_K;
    const __m256 dx8 = _mm256_loadu_ps(dx + sb * 8), xs8 = _mm256_loadu_ps(xsum + sb * 8);
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 128, _MM_HINT_T0);
      const uint32_t w0 = LoadU32(blk + 4), w1 = LoadU32(blk + 8), w2 = LoadU32(blk + 12);
      const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
      const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
      const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(sc_hi) << 32 | sc_lo))));
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(m_hi) << 32 | m_lo))));
      accm[r] = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(Half(blk + 2))), xs8, accm[r]);
      const __m256 t8 = _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(Half(blk))), dx8);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kQ5) qh = Load32(blk + 16);
      for (int c = 0; c < 4; ++c) {
        const __m256i q = Load32(blk + kQs + 32 * c);
        __m256i lo = _mm256_and_si256(q, nib);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
        if constexpr (kQ5) {
          const __m256i b0 = _mm256_min_epu8(
              _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c)))), one);
          const __m256i b1 = _mm256_min_epu8(
              _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)))), one);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
        }
        const __m256i d0 = Dot4(lo, Load32(xb + 64 * c));
        const __m256i d1 = Dot4(hi, Load32(xb + 64 * c + 32));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), Bcast(t8, 2 * c), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), Bcast(t8, 2 * c + 1), acc[r]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) y[r0 + r] = Sum(acc[r]) - Sum(accm[r]);
}

// q2_K / q3_K / q6_K (sub-blocks of 16): group g = 4 h + j holds elements
// 32 g .. 32 g + 31 (lane l: element 32 g + l); int32 lanes 0..3 are
// sub-block 2 g, lanes 4..7 sub-block 2 g + 1.
// q2_K / q3_K: 2 bits at 2 j of qs[32 h + l]; q3_K adds 4 where bit 4 h + j of
// hmask[l] is set (bias 4). q6_K: low 4 bits of ql[64 h + 32 (j & 1) + l] (low
// nibble for j < 2), 2 high bits at 2 j of qh[32 h + l] (bias 32).
template <DType kT>
inline __m256i UnpackGroup(const uint8_t* blk, int g) {
  const int h = g / 4, j = g % 4;
  const __m128i sh = _mm_cvtsi32_si128(2 * j);
  if constexpr (kT == DType::kQ6_K) {
    const __m256i ql = Load32(blk + 64 * h + 32 * (j & 1));
    const __m256i qh = Load32(blk + 128 + 32 * h);
    const __m256i lo = _mm256_and_si256(j < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(15));
    const __m256i hi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, sh), 4),
                                        _mm256_set1_epi8(0x30));
    return _mm256_or_si256(lo, hi);
  } else {
    const int qs = kT == DType::kQ2_K ? 16 : 32;
    const __m256i q = _mm256_and_si256(_mm256_srl_epi16(Load32(blk + qs + 32 * h), sh),
                                       _mm256_set1_epi8(3));
    if constexpr (kT == DType::kQ2_K) return q;
    const __m256i bit = _mm256_min_epu8(
        _mm256_and_si256(Load32(blk), _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j)))),
        _mm256_set1_epi8(1));
    return _mm256_or_si256(q, _mm256_slli_epi16(bit, 2));
  }
}

// s[16] = d * sub-block scale; q2_K also m[16] = dmin * sub-block min.
template <DType kT>
inline void Scales16(const uint8_t* blk, float* s, float* m) {
  if constexpr (kT == DType::kQ6_K) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const __m256 d = _mm256_set1_ps(Half(blk + 208));
    _mm256_store_ps(s, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), d));
    _mm256_store_ps(s + 8, _mm256_mul_ps(
                               _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))), d));
  } else if constexpr (kT == DType::kQ3_K) {
    const uint32_t w0 = LoadU32(blk + 96), w1 = LoadU32(blk + 100), w2 = LoadU32(blk + 104);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const __m128i sc = _mm_set_epi32(
        static_cast<int>(((w1 >> 4) & m4) | ((w2 >> 6) & m2) << 4),
        static_cast<int>(((w0 >> 4) & m4) | ((w2 >> 4) & m2) << 4),
        static_cast<int>((w1 & m4) | ((w2 >> 2) & m2) << 4), static_cast<int>((w0 & m4) | (w2 & m2) << 4));
    const __m256 d = _mm256_set1_ps(Half(blk + 108));
    const __m256i k32 = _mm256_set1_epi32(32);
    _mm256_store_ps(s, _mm256_mul_ps(
                           _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(sc), k32)), d));
    _mm256_store_ps(s + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(
                                             _mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8)), k32)),
                                         d));
  } else {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    const __m256 d = _mm256_set1_ps(Half(blk + 80)), dmin = _mm256_set1_ps(Half(blk + 82));
    for (int half = 0; half < 2; ++half) {
      const __m256i v = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(sc, 8) : sc);
      _mm256_store_ps(s + 8 * half, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(
                                                      v, _mm256_set1_epi32(15))),
                                                  d));
      _mm256_store_ps(m + 8 * half,
                      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), dmin));
    }
  }
}

template <DType kT, int kR>
void GemvK16Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum16,
                 int64_t r0, float* y) {
  constexpr int kBytes = kT == DType::kQ2_K   ? sizeof(BlockQ2_K)
                         : kT == DType::kQ3_K ? sizeof(BlockQ3_K)
                                              : sizeof(BlockQ6_K);
  constexpr int kBias = kT == DType::kQ2_K ? 0 : kT == DType::kQ3_K ? 4 : 32;
  const int64_t nsb = w.k / kQK_K;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR], accm[kR];
  for (int r = 0; r < kR; ++r) acc[r] = accm[r] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(kBias));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* xb = qx + sb * kQK_K;
    __m256i xv[8], corr[8];
    for (int g = 0; g < 8; ++g) {
      xv[g] = Load32(xb + 32 * g);
      corr[g] = kBias ? Dot4(bias, xv[g]) : _mm256_setzero_si256();
    }
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      for (int line = 0; line < (kBytes + 63) / 64; ++line)
        _mm_prefetch(pf + 64 * line, _MM_HINT_T0);
      alignas(32) float s[16], m[16];  // [16] scales, [16] mins (q2_K)
      Scales16<kT>(blk, s, m);
      if constexpr (kT == DType::kQ2_K) {
        accm[r] = _mm256_fmadd_ps(_mm256_load_ps(m), _mm256_loadu_ps(xsum16 + sb * 16), accm[r]);
        accm[r] = _mm256_fmadd_ps(_mm256_load_ps(m + 8), _mm256_loadu_ps(xsum16 + sb * 16 + 8),
                                  accm[r]);
      }
      for (int g = 0; g < 8; ++g) {
        const __m256i dot = _mm256_sub_epi32(Dot4(UnpackGroup<kT>(blk, g), xv[g]), corr[g]);
        const float dxg = dx[sb * 8 + g];
        const __m256 scale =
            _mm256_set_m128(_mm_set1_ps(s[2 * g + 1] * dxg), _mm_set1_ps(s[2 * g] * dxg));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) y[r0 + r] = Sum(acc[r]) - Sum(accm[r]);
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
    case DType::kQ2_K:
      for (; r + 4 <= r1; r += 4) GemvK16Rows<DType::kQ2_K, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK16Rows<DType::kQ2_K, 1>(w, qx, dx, xsum, r, y);
      return;
    case DType::kQ3_K:
      for (; r + 4 <= r1; r += 4) GemvK16Rows<DType::kQ3_K, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK16Rows<DType::kQ3_K, 1>(w, qx, dx, xsum, r, y);
      return;
    case DType::kQ6_K:
      for (; r + 4 <= r1; r += 4) GemvK16Rows<DType::kQ6_K, 4>(w, qx, dx, xsum, r, y);
      for (; r < r1; ++r) GemvK16Rows<DType::kQ6_K, 1>(w, qx, dx, xsum, r, y);
      return;
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx2
