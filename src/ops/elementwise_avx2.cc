// AVX2 elementwise kernels. 8 lanes; a tail goes through a padded copy so it
// takes exactly the vector math.
#include <immintrin.h>

#include <cmath>  // INFINITY

#include "ops/kernels.h"

namespace rotor::ops::internal::avx2 {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Loads min(8, left) floats, the rest `fill`.
inline __m256 LoadTail(const float* p, int64_t left, float fill) {
  if (left >= 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8];  // [8]
  for (int i = 0; i < 8; ++i) buf[i] = i < left ? p[i] : fill;
  return _mm256_load_ps(buf);
}

inline void StoreTail(float* p, int64_t left, __m256 v) {
  if (left >= 8) return _mm256_storeu_ps(p, v);
  alignas(32) float buf[8];  // [8]
  _mm256_store_ps(buf, v);
  for (int i = 0; i < left; ++i) p[i] = buf[i];
}

// exp(x) as in the AVX-512 path: Cody-Waite reduction, degree-7 Taylor
// polynomial, 2^n built in the exponent bits (n clamped to [-126, 127]; below
// -87.3 the result is flushed to 0, above 88.7 it is +inf).
inline __m256 Exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33f), hi = _mm256_set1_ps(88.72f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040.f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  // n in [-126, 128]: 2^n as 2^(n/2) * 2^(n - n/2) so 128 does not overflow the bits.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  e = _mm256_andnot_ps(under, e);
  return _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), over);
}

}  // namespace

void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = LoadTail(x + i, n - i, 0.f);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  const float ss = HorizontalSum(acc);
  const float rms = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss / static_cast<float>(n) + eps)));
  const __m256 scale = _mm256_set1_ps(1.f / rms);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = LoadTail(x + i, n - i, 0.f);
    const __m256 w = LoadTail(weight + i, n - i, 0.f);
    StoreTail(out + i, n - i, _mm256_mul_ps(_mm256_mul_ps(v, scale), w));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, LoadTail(x + i, n - i, -INFINITY));
  const __m256 max = _mm256_set1_ps(HorizontalMax(mx));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    // Padding lanes are -inf: exp gives 0 and adds nothing to the sum.
    const __m256 e = Exp(_mm256_sub_ps(LoadTail(x + i, n - i, -INFINITY), max));
    sum = _mm256_add_ps(sum, e);
    StoreTail(x + i, n - i, e);
  }
  const __m256 inv = _mm256_set1_ps(1.f / HorizontalSum(sum));
  for (int64_t i = 0; i < n; i += 8)
    StoreTail(x + i, n - i, _mm256_mul_ps(LoadTail(x + i, n - i, 0.f), inv));
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 g = LoadTail(gate + i, n - i, 0.f);
    const __m256 u = LoadTail(up + i, n - i, 0.f);
    const __m256 silu =
        _mm256_div_ps(g, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    StoreTail(out + i, n - i, _mm256_mul_ps(silu, u));
  }
}

void Add(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

void Scale(float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

namespace {

// One stage of butterflies of stride 1, 2 or 4 inside a register: lane j with
// partner p (= j ^ stride) becomes v[j] + v[p] where j < p, else v[p] - v[j]:
// the partner's value plus ours with its sign flipped (exact, so the same
// sums and differences as ref::Hadamard).
template <int kStride>
inline __m256 ButterflyIn(__m256 v) {
  __m256 partner, flip;
  if constexpr (kStride == 1) {
    partner = _mm256_permute_ps(v, 0xB1);  // [1, 0, 3, 2] per 128 bits
    flip = _mm256_setr_ps(0.f, -0.f, 0.f, -0.f, 0.f, -0.f, 0.f, -0.f);
  } else if constexpr (kStride == 2) {
    partner = _mm256_permute_ps(v, 0x4E);  // [2, 3, 0, 1] per 128 bits
    flip = _mm256_setr_ps(0.f, 0.f, -0.f, -0.f, 0.f, 0.f, -0.f, -0.f);
  } else {
    partner = _mm256_permute2f128_ps(v, v, 1);  // the halves swapped
    flip = _mm256_setr_ps(0.f, 0.f, 0.f, 0.f, -0.f, -0.f, -0.f, -0.f);
  }
  return _mm256_add_ps(partner, _mm256_xor_ps(v, flip));
}

// Stride 8 * kRegs between registers r and r + kRegs.
template <int kN, int kRegs>
inline void ButterflyAcross(__m256* r) {
  for (int i = 0; i < kN; i += 2 * kRegs)
    for (int j = i; j < i + kRegs; ++j) {
      const __m256 a = r[j], c = r[j + kRegs];
      r[j] = _mm256_add_ps(a, c), r[j + kRegs] = _mm256_sub_ps(a, c);
    }
}

// kN registers (a block of 8 kN values) per step.
template <int kN>
void HadamardBlocks(float* x, int64_t n) {
  const __m256 norm = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(8 * kN)));
  for (float* v = x; v < x + n; v += 8 * kN) {
    __m256 r[kN];  // [kN][8] the block
    for (int j = 0; j < kN; ++j)
      r[j] = ButterflyIn<4>(ButterflyIn<2>(ButterflyIn<1>(_mm256_loadu_ps(v + 8 * j))));
    if constexpr (kN >= 2) ButterflyAcross<kN, 1>(r);
    if constexpr (kN >= 4) ButterflyAcross<kN, 2>(r);
    for (int j = 0; j < kN; ++j) _mm256_storeu_ps(v + 8 * j, _mm256_mul_ps(r[j], norm));
  }
}

}  // namespace

// Blocks of 8, 16 or 32: the same bits as ref::Hadamard.
void Hadamard(float* x, int64_t n, int block) {
  switch (block) {
    case 8: return HadamardBlocks<1>(x, n);
    case 16: return HadamardBlocks<2>(x, n);
    default: return HadamardBlocks<4>(x, n);
  }
}

}  // namespace rotor::ops::internal::avx2
