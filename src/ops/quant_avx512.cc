// AVX-512 row conversions, dot products and activation quantization.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

inline float HalfToFloat(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Calls fn(i, v, mask) for each group of up to 16 elements of row, v holding
// them in f32 (lanes outside mask are 0).
template <typename F>
inline void ForEach16(DType t, const void* row, int64_t n, F&& fn) {
  const uint8_t* src = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        fn(i, _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(src) + i), mk);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(src) + i);
        fn(i, _mm512_cvtph_ps(h), mk);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = TailMask(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(src) + i);
        fn(i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), mk);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ8_0);
        const __m512 d = _mm512_set1_ps(HalfToFloat(blk));
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18));
        fn(b * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))),
           __mmask16{0xffff});
        fn(b * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))),
           __mmask16{0xffff});
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ4_0);
        const __m512 d = _mm512_set1_ps(HalfToFloat(blk));
        const __m512i q =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
        const __m512i eight = _mm512_set1_epi32(8), low = _mm512_set1_epi32(15);
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, low), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
        fn(b * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), __mmask16{0xffff});
        fn(b * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), __mmask16{0xffff});
      }
      return;
    default:
      UnsupportedType(t);
  }
}

// roundf (half away from zero) of each lane, as an int32, for |v| <= 2^22
// (quants: |v| <= 127 and a rounding) and inf / NaN (the integer indefinite,
// as a conversion of roundf's result gives): the truncation of v +- (0.5 -
// 2^-25). Checked against roundf for every float of at most 2^22 in
// magnitude (2.5e9 values; BENCHMARKS.md, "Sixty-seventh session"). The sum
// must not be fused with the product that makes v: this file compiles with
// -ffp-contract=off (src/ops/CMakeLists.txt).
inline __m512i RoundHalfAway(__m512 v) {
  const __m512 half = _mm512_castsi512_ps(_mm512_set1_epi32(0x3EFFFFFF));  // 0.5 - 2^-25
  const __m512 signed_half = _mm512_or_ps(half, _mm512_and_ps(v, _mm512_set1_ps(-0.f)));
  return _mm512_cvttps_epi32(_mm512_add_ps(v, signed_half));
}

// Block x[0, 32) as q8_0 (ref::QuantizeActivations, bit for bit): its scale
// into *d, its 32 quants returned in order.
inline __m256i QuantizeBlock(const float* x, float* d) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
  const float db = amax / 127.f;
  const float id = db != 0.f ? 1.f / db : 0.f;
  *d = db;
  const __m512 vid = _mm512_set1_ps(id);
  const __m128i q0 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v0, vid)));
  const __m128i q1 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v1, vid)));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  ForEach16(t, src, n,
            [&](int64_t i, __m512 v, __mmask16 mk) { _mm512_mask_storeu_ps(dst + i, mk, v); });
}

void F32ToF16Row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, mk, h);
  }
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  ForEach16(t, w_row, n, [&](int64_t i, __m512 v, __mmask16 mk) {
    acc = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(mk, x + i), acc);
  });
  return _mm512_reduce_add_ps(acc);
}

void AxpyRow(DType t, float a, const void* row, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  ForEach16(t, row, n, [&](int64_t i, __m512 v, __mmask16 mk) {
    _mm512_mask_storeu_ps(y + i, mk, _mm512_fmadd_ps(va, v, _mm512_maskz_loadu_ps(mk, y + i)));
  });
}

// Same results as ref::QuantizeActivations, bit for bit.
void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), QuantizeBlock(x + b * 32, d + b));
}

namespace {

constexpr int kFields = kPackedActBytes / 4;

// The fields after the quads of T tokens' block at aj ([kFields][T] int32),
// from their sums of q + 128 over quads [0, 4) and [4, 8) (lanes >= T unused):
// sum(q), the scale d, the first 16 q's sum, d * sum(q), -128 and -8 sum(q),
// d times the first and the last 16 q's sums.
template <int T>
inline void StoreFields(int32_t* aj, __m256i sum_lo128, __m256i sum_hi128, __m256 d) {
  constexpr __mmask8 kMask = static_cast<__mmask8>((1u << T) - 1);
  const __m256i off = _mm256_set1_epi32(16 * 128);
  const __m256i lo = _mm256_sub_epi32(sum_lo128, off), hi = _mm256_sub_epi32(sum_hi128, off);
  const __m256i sum = _mm256_add_epi32(lo, hi);
  _mm256_mask_storeu_epi32(aj + kActSum * T, kMask, sum);
  _mm256_mask_storeu_ps(aj + kActScale * T, kMask, d);
  _mm256_mask_storeu_epi32(aj + kActSumLo * T, kMask, lo);
  _mm256_mask_storeu_ps(aj + kActXsum * T, kMask, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sum)));
  const __m256i bias_q8 = _mm256_mullo_epi32(sum, _mm256_set1_epi32(-128));
  _mm256_mask_storeu_epi32(aj + kActBiasQ8 * T, kMask, bias_q8);
  const __m256i bias_q4 = _mm256_mullo_epi32(sum, _mm256_set1_epi32(-8));
  _mm256_mask_storeu_epi32(aj + kActBiasQ4 * T, kMask, bias_q4);
  _mm256_mask_storeu_ps(aj + kActXsumLo * T, kMask, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
  _mm256_mask_storeu_ps(aj + kActXsumHi * T, kMask, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
}

// The sums of q + 128 over a block's first and last 16 quants.
inline void HalfSums(__m256i q, int32_t* lo, int32_t* hi) {
  // per 8 bytes: [0, 8), [8, 16) | [16, 24), [24, 32)
  const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))),
                                    _mm256_setzero_si256());
  const __m128i s_lo = _mm256_castsi256_si128(s), s_hi = _mm256_extracti128_si256(s, 1);
  *lo = _mm_cvtsi128_si32(s_lo) + _mm_extract_epi32(s_lo, 2);
  *hi = _mm_cvtsi128_si32(s_hi) + _mm_extract_epi32(s_hi, 2);
}

// One block of T (1 or 2) tokens, token t's at x + t * k, at aj
// ([kFields][T]): each token quantized alone (QuantizeBlock), the two
// tokens' quads interleaved. Fewer operations than PackBlockTile's shared
// reductions when two tokens or one fill the tile.
template <int T>
inline void PackBlockFew(const float* x, int64_t k, int32_t* aj) {
  static_assert(T == 1 || T == 2);
  float d[2] = {};
  int32_t lo[2] = {}, hi[2] = {};
  __m256i q[T];  // token t's 32 quants
  for (int t = 0; t < T; ++t) {
    q[t] = QuantizeBlock(x + t * k, &d[t]);
    HalfSums(q[t], &lo[t], &hi[t]);
  }
  if constexpr (T == 1) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(aj), q[0]);
  } else {
    const __m256i a = _mm256_unpacklo_epi32(q[0], q[1]);  // quads 0 1 | 4 5, tokens alternating
    const __m256i b = _mm256_unpackhi_epi32(q[0], q[1]);  // quads 2 3 | 6 7
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(aj), _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(aj + 8), _mm256_permute2x128_si256(a, b, 0x31));
  }
  // Built in registers: a vector load of the scalars just stored would wait
  // for them (no store forwarding from two stores to one load).
  StoreFields<T>(aj, _mm256_castsi128_si256(_mm_setr_epi32(lo[0], lo[1], 0, 0)),
                 _mm256_castsi128_si256(_mm_setr_epi32(hi[0], hi[1], 0, 0)),
                 _mm256_castps128_ps256(_mm_setr_ps(d[0], d[1], 0.f, 0.f)));
}

// One block of T (3..8) tokens, token t's at x + t * k, at aj ([kFields][T]):
// the tokens' maxima reduced together (16 -> 8 -> 4 -> 1 lanes), their
// scales in one division, and the quads transposed in registers into rows of
// T tokens. The same bytes as QuantizeBlock and ref::PackActivations per token.
template <int T>
inline void PackBlockTile(const float* x, int64_t k, int32_t* aj) {
  static_assert(kPackedTileTokens == 8 && T >= 3 && T <= 8);
  constexpr __mmask8 kMask = static_cast<__mmask8>((1u << T) - 1);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 mx[8];  // token t's |x| maxima over both halves, 16 lanes
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t)
    mx[t] = t < T ? _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + t * k), abs_mask),
                                  _mm512_and_ps(_mm512_loadu_ps(x + t * k + 16), abs_mask))
                  : _mm512_setzero_ps();
  __m512 p[4];  // tokens 2 i, 2 i + 1: 8 lanes each
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    p[i] = _mm512_max_ps(_mm512_shuffle_f32x4(mx[2 * i], mx[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(mx[2 * i], mx[2 * i + 1], 0xEE));
  __m512 r[2];  // tokens 4 i .. 4 i + 3: a 128-bit lane each
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    r[i] = _mm512_max_ps(_mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0xDD));
  // 128-bit lane l: element 0 token l, element 1 token l + 4
  __m512 u = _mm512_max_ps(_mm512_unpacklo_ps(r[0], r[1]), _mm512_unpackhi_ps(r[0], r[1]));
  u = _mm512_max_ps(u, _mm512_permute_ps(u, 0x4E));
  const __m256 amax = _mm512_castps512_ps256(_mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), u));
  const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.f));
  const __mmask8 nonzero = _mm256_cmp_ps_mask(d, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  alignas(32) float id[8];
  _mm256_store_ps(id, _mm256_maskz_div_ps(nonzero, _mm256_set1_ps(1.f), d));
  __m256i q[8];  // token t's 8 quads
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    if (t >= T) {
      q[t] = _mm256_setzero_si256();
      continue;
    }
    const __m512 vid = _mm512_set1_ps(id[t]);
    const __m512 v0 = _mm512_loadu_ps(x + t * k), v1 = _mm512_loadu_ps(x + t * k + 16);
    const __m128i q0 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v0, vid)));
    const __m128i q1 = _mm512_cvtepi32_epi8(RoundHalfAway(_mm512_mul_ps(v1, vid)));
    q[t] = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  }
  // 8 x 8 transpose of the quads: row i = quad i of tokens 0..7.
  __m256i a[8], b[8], row[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(q[2 * i], q[2 * i + 1]);      // quads 0 1 | 4 5 of a pair
    a[2 * i + 1] = _mm256_unpackhi_epi32(q[2 * i], q[2 * i + 1]);  // quads 2 3 | 6 7
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {  // tokens 4 h .. 4 h + 3
    b[4 * h + 0] = _mm256_unpacklo_epi64(a[4 * h], a[4 * h + 2]);      // quad 0 | 4
    b[4 * h + 1] = _mm256_unpackhi_epi64(a[4 * h], a[4 * h + 2]);      // quad 1 | 5
    b[4 * h + 2] = _mm256_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]);  // quad 2 | 6
    b[4 * h + 3] = _mm256_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]);  // quad 3 | 7
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    row[i] = _mm256_permute2x128_si256(b[i], b[4 + i], 0x20);
    row[i + 4] = _mm256_permute2x128_si256(b[i], b[4 + i], 0x31);
  }
  // Sums of q + 128 over quads [0, 4) and [4, 8), each token in its lane.
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi8(1);
  __m256i sum_lo = _mm256_setzero_si256(), sum_hi = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    sum_lo = _mm256_dpbusd_epi32(sum_lo, _mm256_xor_si256(row[i], flip), ones);
    sum_hi = _mm256_dpbusd_epi32(sum_hi, _mm256_xor_si256(row[i + 4], flip), ones);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm256_mask_storeu_epi32(aj + i * T, kMask, row[i]);
  StoreFields<T>(aj, sum_lo, sum_hi, d);
}

template <int T>
void PackTile(const float* x, int64_t k, int64_t j0, int64_t j1, int32_t* tile) {
  for (int64_t j = j0; j < j1; ++j) {
    int32_t* aj = tile + j * T * kFields;  // [kFields][T]
    if constexpr (T <= 2)
      PackBlockFew<T>(x + j * 32, k, aj);
    else
      PackBlockTile<T>(x + j * 32, k, aj);
  }
}

}  // namespace

void PackActivationTiles(const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1,
                         uint8_t* acts) {
  const int64_t nb = k / 32;
  for (int64_t t0 = 0; t0 < m; t0 += kPackedTileTokens) {
    const int tokens = static_cast<int>(std::min<int64_t>(kPackedTileTokens, m - t0));
    const float* xt = x + t0 * k;  // [tokens, k]
    int32_t* tile = reinterpret_cast<int32_t*>(acts + t0 * nb * kPackedActBytes);
    switch (tokens) {
      case 1: PackTile<1>(xt, k, j0, j1, tile); break;
      case 2: PackTile<2>(xt, k, j0, j1, tile); break;
      case 3: PackTile<3>(xt, k, j0, j1, tile); break;
      case 4: PackTile<4>(xt, k, j0, j1, tile); break;
      case 5: PackTile<5>(xt, k, j0, j1, tile); break;
      case 6: PackTile<6>(xt, k, j0, j1, tile); break;
      case 7: PackTile<7>(xt, k, j0, j1, tile); break;
      default: PackTile<8>(xt, k, j0, j1, tile); break;
    }
  }
}

}  // namespace rotor::ops::internal::avx512
