// AVX-512 elementwise kernels. 16 lanes; tails through masked loads/stores.
#include <immintrin.h>

#include <cmath>  // INFINITY

#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// exp(x): x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial for e^r
// (truncation < 2e-9 relative), then scalef by 2^n (handles over/underflow).
// Max error about 2 ulp.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.8f)), _mm512_set1_ps(-104.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(n - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float ss = _mm512_reduce_add_ps(acc);
  const float rms = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss / static_cast<float>(n) + eps)));
  const __m512 scale = _mm512_set1_ps(1.f / rms);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
    const __m512 w = _mm512_maskz_loadu_ps(mk, weight + i);
    _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(_mm512_mul_ps(v, scale), w));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), TailMask(n - i), x + i));
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), max));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mk, e));
    _mm512_mask_storeu_ps(x + i, mk, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), inv));
  }
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mk, up + i);
    const __m512 silu =
        _mm512_div_ps(g, _mm512_add_ps(one, Exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(silu, u));
  }
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    _mm512_mask_storeu_ps(
        x + i, mk,
        _mm512_add_ps(_mm512_maskz_loadu_ps(mk, x + i), _mm512_maskz_loadu_ps(mk, y + i)));
  }
}

void Scale(float* x, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), vs));
  }
}

}  // namespace rotor::ops::internal::avx512
