// AVX2 row conversions, dot products and activation quantization.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "ops/kernels.h"
#include "tensor/fp16.h"

namespace rotor::ops::internal::avx2 {
namespace {

inline float HalfToFloat(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 Load8(DType t, const uint8_t* src, int64_t i) {
  switch (t) {
    case DType::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    case DType::kBF16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))),
          16));
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(src) + i);
  }
}

inline float LoadOne(DType t, const uint8_t* src, int64_t i) {
  switch (t) {
    case DType::kF16:
      return HalfToFloat(src + 2 * i);
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, src + 2 * i, 2);
      const uint32_t u = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: {
      float f;
      std::memcpy(&f, src + 4 * i, 4);
      return f;
    }
  }
}

// Calls vec(i, v) for groups of 8 elements in f32 and one(i, f) for a tail.
template <typename V, typename S>
inline void ForEach8(DType t, const void* row, int64_t n, V&& vec, S&& one) {
  const uint8_t* src = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) vec(i, Load8(t, src, i));
      for (; i < n; ++i) one(i, LoadOne(t, src, i));
      return;
    }
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ8_0);
        const __m256 d = _mm256_set1_ps(HalfToFloat(blk));
        for (int j = 0; j < 4; ++j) {
          const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j));
          vec(b * 32 + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const uint8_t* blk = src + b * sizeof(BlockQ4_0);
        const __m256 d = _mm256_set1_ps(HalfToFloat(blk));
        const __m256i eight = _mm256_set1_epi32(8), low = _mm256_set1_epi32(15);
        for (int j = 0; j < 2; ++j) {
          const __m256i q = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j)));
          const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, low), eight);
          const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
          vec(b * 32 + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
          vec(b * 32 + 16 + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
        }
      }
      return;
    default:
      UnsupportedType(t);
  }
}

// roundf of each lane as an int32 for |v| <= 2^22 and inf / NaN: the
// truncation of v +- (0.5 - 2^-25), as quant_avx512.cc's (which says how it
// was checked); this file compiles with -ffp-contract=off for it.
inline __m256i RoundHalfAway(__m256 v) {
  const __m256 half = _mm256_castsi256_ps(_mm256_set1_epi32(0x3EFFFFFF));  // 0.5 - 2^-25
  const __m256 signed_half = _mm256_or_ps(half, _mm256_and_ps(v, _mm256_set1_ps(-0.f)));
  return _mm256_cvttps_epi32(_mm256_add_ps(v, signed_half));
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  ForEach8(
      t, src, n, [&](int64_t i, __m256 v) { _mm256_storeu_ps(dst + i, v); },
      [&](int64_t i, float f) { dst[i] = f; });
}

void F32ToF16Row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  float tail = 0.f;
  ForEach8(
      t, w_row, n,
      [&](int64_t i, __m256 v) { acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + i), acc); },
      [&](int64_t i, float f) { tail += f * x[i]; });
  return HorizontalSum(acc) + tail;
}

void AxpyRow(DType t, float a, const void* row, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  ForEach8(
      t, row, n,
      [&](int64_t i, __m256 v) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, v, _mm256_loadu_ps(y + i)));
      },
      [&](int64_t i, float f) { y[i] += a * f; });
}

namespace {

// One q8_0 block of 8 kRegs values (kRegs = 1, 2 or 4) into q[8 kRegs]: d =
// amax / 127 (returned, f32), q = roundf(x / d); ref's QuantizeQ8, bit for bit.
template <int kRegs>
float QuantizeQ8(const float* x, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[kRegs];  // [kRegs][8] the block
  __m256 mx = _mm256_setzero_ps();
  for (int j = 0; j < kRegs; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v[j], abs_mask));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float d = _mm_cvtss_f32(m4) / 127.f;
  const __m256 id = _mm256_set1_ps(d != 0.f ? 1.f / d : 0.f);
  __m256i i32[kRegs];  // [kRegs][8] in [-127, 127]
  for (int j = 0; j < kRegs; ++j) i32[j] = RoundHalfAway(_mm256_mul_ps(v[j], id));
  if constexpr (kRegs == 4) {  // one 32-byte store
    const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), i8);
  } else {
    for (int j = 0; j < kRegs; ++j) {
      const __m128i q16 =
          _mm_packs_epi32(_mm256_castsi256_si128(i32[j]), _mm256_extracti128_si256(i32[j], 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 8 * j), _mm_packs_epi16(q16, q16));
    }
  }
  return d;
}

template <int kRegs>
void QuantizeQ8BlocksOf(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / (8 * kRegs); ++b, x += 8 * kRegs, out += 2 + 8 * kRegs) {
    const uint16_t dh = F32ToF16(QuantizeQ8<kRegs>(x, reinterpret_cast<int8_t*>(out + 2)));
    std::memcpy(out, &dh, 2);
  }
}

}  // namespace

// Same results as ref::QuantizeActivations, bit for bit.
void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k) {
  QuantizeQ8BlocksF32(x, k, 32, q, d);
}

// The AVX2 integer kernels read the natural order.
void QuantizeActivationsPacked(const float* x, int8_t* q, float* d, int64_t k) {
  QuantizeActivations(x, q, d, k);
}

// Blocks of 8, 16 or 32: the same bytes as ref::QuantizeQ8Blocks.
void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out) {
  switch (block) {
    case 8: return QuantizeQ8BlocksOf<1>(x, n, out);
    case 16: return QuantizeQ8BlocksOf<2>(x, n, out);
    default: return QuantizeQ8BlocksOf<4>(x, n, out);
  }
}

// Blocks of 8, 16 or 32: the same values as ref::QuantizeQ8BlocksF32.
void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d) {
  auto blocks = [&](auto regs) {  // one loop per block size
    constexpr int kRegs = decltype(regs)::value;
    for (int64_t b = 0; b < n / (8 * kRegs); ++b)
      d[b] = QuantizeQ8<kRegs>(x + b * 8 * kRegs, q + b * 8 * kRegs);
  };
  switch (block) {
    case 8: return blocks(std::integral_constant<int, 1>());
    case 16: return blocks(std::integral_constant<int, 2>());
    default: return blocks(std::integral_constant<int, 4>());
  }
}

}  // namespace rotor::ops::internal::avx2
