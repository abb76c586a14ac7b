// AVX2 kernels of the K-quants on rows as stored (one kernel for every m).
// As the AVX-512 kernels (gemv_kquant_avx512.cc) with 32 weights per register:
// the activation quantized once to 8-bit blocks of 32 (qx, dx), weights
// unpacked to unsigned bytes, vpmaddubsw + vpmaddwd give int32 lanes of 4
// products (exact: |w| <= 63, |x| <= 127, pairs <= 16002), scaled in f32 by
// d * sc * dx; q2_K / q4_K / q5_K's mins through the activation block sums
// xsum, q3_K's bias of 4 and q6_K's of 32 in int32 by subtracting bias *
// (4-lane activation sums). 4 rows per pass with software prefetch.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

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
// Rows [r0, r0 + kR) for kTok tokens (token t's activations at qx + t k, dx +
// t k / 32, xsum + t k / 32; y + t ldy): each super-block of a row is unpacked
// once for the kTok tokens, and each (row, token) output takes the same
// operations in the same order for every kR and kTok (batched == alone).
template <bool kQ5, int kR, int kTok>
void GemvK45Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum,
                 int64_t r0, float* y, int64_t ldy) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQs = kQ5 ? 48 : 16;
  const int64_t k = w.k, nsb = k / kQK_K, nb = k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR][kTok], accm[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
  const __m256i nib = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  for (int64_t sb = 0; sb < nsb; ++sb) {
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
      const __m256 mins = _mm256_mul_ps(mn, _mm256_set1_ps(Half(blk + 2)));
      const __m256 scales = _mm256_mul_ps(sc, _mm256_set1_ps(Half(blk)));
      __m256 t8[kTok];  // [kTok] d * sc * dx per sub-block
      for (int t = 0; t < kTok; ++t) {
        accm[r][t] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xsum + t * nb + sb * 8), accm[r][t]);
        t8[t] = _mm256_mul_ps(scales, _mm256_loadu_ps(dx + t * nb + sb * 8));
      }
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
        for (int t = 0; t < kTok; ++t) {
          const int8_t* xb = qx + t * k + sb * kQK_K;
          const __m256i d0 = Dot4(lo, Load32(xb + 64 * c));
          const __m256i d1 = Dot4(hi, Load32(xb + 64 * c + 32));
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), Bcast(t8[t], 2 * c), acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), Bcast(t8[t], 2 * c + 1), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t)
    for (int r = 0; r < kR; ++r) y[t * ldy + r0 + r] = Sum(acc[r][t]) - Sum(accm[r][t]);
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

// Rows and tokens as GemvK45Rows (q2_K's xsum per 16: xsum + t k / 16).
template <DType kT, int kR, int kTok>
void GemvK16Rows(const Weight& w, const int8_t* qx, const float* dx, const float* xsum16,
                 int64_t r0, float* y, int64_t ldy) {
  constexpr int kBytes = kT == DType::kQ2_K   ? sizeof(BlockQ2_K)
                         : kT == DType::kQ3_K ? sizeof(BlockQ3_K)
                                              : sizeof(BlockQ6_K);
  constexpr int kBias = kT == DType::kQ2_K ? 0 : kT == DType::kQ3_K ? 4 : 32;
  const int64_t k = w.k, nsb = k / kQK_K, nb = k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR][kTok], accm[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(kBias));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m256i xv[kTok][8], corr[kTok][8];  // [kTok][8] activations, bias corrections
    for (int t = 0; t < kTok; ++t) {
      const int8_t* xb = qx + t * k + sb * kQK_K;
      for (int g = 0; g < 8; ++g) {
        xv[t][g] = Load32(xb + 32 * g);
        corr[t][g] = kBias ? Dot4(bias, xv[t][g]) : _mm256_setzero_si256();
      }
    }
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + sb * kBytes;
      const char* pf = reinterpret_cast<const char*>(blk) + kPrefetch;
      for (int line = 0; line < (kBytes + 63) / 64; ++line)
        _mm_prefetch(pf + 64 * line, _MM_HINT_T0);
      alignas(32) float s[16], m[16];  // [16] scales, [16] mins (q2_K)
      Scales16<kT>(blk, s, m);
      if constexpr (kT == DType::kQ2_K) {
        for (int t = 0; t < kTok; ++t) {
          const float* xs = xsum16 + t * (k / 16) + sb * 16;
          accm[r][t] = _mm256_fmadd_ps(_mm256_load_ps(m), _mm256_loadu_ps(xs), accm[r][t]);
          accm[r][t] = _mm256_fmadd_ps(_mm256_load_ps(m + 8), _mm256_loadu_ps(xs + 8), accm[r][t]);
        }
      }
      for (int g = 0; g < 8; ++g) {
        const __m256i wq = UnpackGroup<kT>(blk, g);
        for (int t = 0; t < kTok; ++t) {
          const __m256i dot = _mm256_sub_epi32(Dot4(wq, xv[t][g]), corr[t][g]);
          const float dxg = dx[t * nb + sb * 8 + g];
          const __m256 scale =
              _mm256_set_m128(_mm_set1_ps(s[2 * g + 1] * dxg), _mm_set1_ps(s[2 * g] * dxg));
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t)
    for (int r = 0; r < kR; ++r) y[t * ldy + r0 + r] = Sum(acc[r][t]) - Sum(accm[r][t]);
}

// Rows [r0, r1) of tokens [t0, t1): blocks of kRowBlock rows stay in cache
// while the tokens pass, kGemvKTile tokens a call (2 rows), the rest token by
// token (4 rows a call).
template <typename Kernel>
void RunTiles(int64_t t0, int64_t t1, int64_t r0, int64_t r1, Kernel kernel) {
  constexpr int64_t kRowBlock = 16;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    int64_t t = t0;
    for (; t + kGemvKTile <= t1; t += kGemvKTile) {
      int64_t r = rb;
      for (; r + 2 <= re; r += 2)
        kernel(std::integral_constant<int, 2>{}, std::integral_constant<int, kGemvKTile>{}, t, r);
      for (; r < re; ++r)
        kernel(std::integral_constant<int, 1>{}, std::integral_constant<int, kGemvKTile>{}, t, r);
    }
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
    RunTiles(t0, t1, r0, r1, [&](auto rows, auto toks, int64_t t, int64_t r) {
      GemvK16Rows<kT, decltype(rows)::value, decltype(toks)::value>(
          w, qx + t * k, dx + t * (k / 32), xsum + t * xs, r, y + t * ldy, ldy);
    });
  };
  auto run45 = [&](auto q5) {
    RunTiles(t0, t1, r0, r1, [&](auto rows, auto toks, int64_t t, int64_t r) {
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

}  // namespace rotor::ops::internal::avx2
