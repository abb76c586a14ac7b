// AVX-512 machines' V pass of FoldAvx2Vnni over block-type V rows in blocks
// of 32: each block's 32 integers extended 16 at a time into 512-bit
// vectors, where fold_avx2.cc's AccumulateV32 (one query head per KV head)
// and AccumulateV32Group (up to 4 heads of a group, weights from a table)
// take 256-bit quarters. Every lane takes the AVX2 pass's operations in the
// same order (acc * corr; per key in key order one FMA of the integer by the
// weight p[j] * d; the nibble types' offset times the sum of the weights off
// at the end), so the result is the same bit for bit. On Zen 5 the
// quantized attention ran 1.05-1.35x faster (BENCHMARKS.md, thirty-ninth
// session); on an Intel Xeon the one-head version measured within the noise
// (thirty-seventh session).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"
#include "attention/fold_avx512_exp.h"

namespace rotor::attn {
namespace {

// Elements [16 half, 16 half + 16) of a 32-element block as f32: q8_0's
// integers, the nibble types' unsigned quants n (q = n - QuantOffset).
template <Elem T>
inline __m512 Half16(const uint8_t* blk, int half) {
  __m512i x;
  if constexpr (T == Elem::kQ8_0) {
    x = _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * half)));
  } else {
    // byte i of the quants: n of element i (low nibble), i + 16 (high nibble)
    constexpr int qs = T == Elem::kQ5_0 ? 6 : 2;
    const __m512i z =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs)));
    x = half == 0 ? _mm512_and_si512(z, _mm512_set1_epi32(15)) : _mm512_srli_epi32(z, 4);
    if constexpr (T == Elem::kQ5_0) {  // element e's fifth bit: bit e of qh
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      x = _mm512_mask_or_epi32(x, static_cast<__mmask16>(qh >> (16 * half)), x,
                               _mm512_set1_epi32(16));
    }
  }
  return _mm512_cvtepi32_ps(x);
}

// Blocks [k0, k0 + NB) of the head (elements [32 k0, 32 (k0 + NB))).
template <Elem T, int NB>
void Blocks(const KeyBlock& b, const float* p, size_t v0, int k0, float corr, float* acc) {
  __m512 a[2 * NB];
  float wsum[NB] = {};
  const __m512 vcorr = _mm512_set1_ps(corr);
  for (int i = 0; i < 2 * NB; ++i)
    a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + 32 * k0 + 16 * i), vcorr);
  for (int j = 0; j < b.n; ++j) {
    const uint8_t* head = static_cast<const uint8_t*>(b.v[j]) + v0;
    for (int k = 0; k < NB; ++k) {
      const uint8_t* blk = head + (k0 + k) * BlockBytes<T, 32>();
      const float w = p[j] * Scale<T, 32>(blk, 0);
      if constexpr (QuantOffset<T>() != 0) wsum[k] += w;
      const __m512 wj = _mm512_set1_ps(w);
      a[2 * k] = _mm512_fmadd_ps(wj, Half16<T>(blk, 0), a[2 * k]);
      a[2 * k + 1] = _mm512_fmadd_ps(wj, Half16<T>(blk, 1), a[2 * k + 1]);
    }
  }
  if constexpr (QuantOffset<T>() != 0)
    for (int k = 0; k < NB; ++k) {
      const __m512 off = _mm512_set1_ps(QuantOffset<T>() * wsum[k]);
      a[2 * k] = _mm512_sub_ps(a[2 * k], off);
      a[2 * k + 1] = _mm512_sub_ps(a[2 * k + 1], off);
    }
  for (int i = 0; i < 2 * NB; ++i) _mm512_storeu_ps(acc + 32 * k0 + 16 * i, a[i]);
}

// Block k of G query heads that share a KV head: w [G, nb, kBlock] their
// weights (p times the block's scale), wsum [G, nb] their sums.
template <Elem T, int G>
void GroupBlock(const KeyBlock& b, const float* w, const float* wsum, int nb, size_t v0, int k,
                const float* corr, float* const* acc) {
  __m512 a[G][2];
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < 2; ++i)
      a[u][i] = _mm512_mul_ps(_mm512_loadu_ps(acc[u] + 32 * k + 16 * i), _mm512_set1_ps(corr[u]));
  for (int j = 0; j < b.n; ++j) {
    const uint8_t* blk = static_cast<const uint8_t*>(b.v[j]) + v0 + k * BlockBytes<T, 32>();
    const __m512 x0 = Half16<T>(blk, 0), x1 = Half16<T>(blk, 1);
    for (int u = 0; u < G; ++u) {
      const __m512 wj = _mm512_set1_ps(w[(static_cast<size_t>(u) * nb + k) * kBlock + j]);
      a[u][0] = _mm512_fmadd_ps(wj, x0, a[u][0]);
      a[u][1] = _mm512_fmadd_ps(wj, x1, a[u][1]);
    }
  }
  if constexpr (QuantOffset<T>() != 0)
    for (int u = 0; u < G; ++u) {
      const __m512 off = _mm512_set1_ps(QuantOffset<T>() * wsum[u * nb + k]);
      for (int i = 0; i < 2; ++i) a[u][i] = _mm512_sub_ps(a[u][i], off);
    }
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < 2; ++i) _mm512_storeu_ps(acc[u] + 32 * k + 16 * i, a[u][i]);
}

}  // namespace

float SoftmaxAvx512(FoldState& s, const KeyBlock& b, int h, float* p) {
  const __m512 scale = _mm512_set1_ps(s.scale);
  // Vectors of 16 keys; the lanes past b.n are in the scratch row (kBlock
  // wide, a multiple of 16) but hold no score: scaled and stored whole, as
  // the AVX2 pass does within its vectors of 8, then masked out of the max
  // and the weights.
  float* sc = s.scores + h * kBlock;
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int c = 0; c < b.n; c += 16) {
    const __mmask16 valid = static_cast<__mmask16>(b.n - c >= 16 ? 0xFFFF : (1u << (b.n - c)) - 1);
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(sc + c), scale);
    _mm512_storeu_ps(sc + c, x);
    vmax = _mm512_mask_max_ps(vmax, valid, vmax, x);
  }
  const float new_max = std::max(s.m[h], _mm512_reduce_max_ps(vmax));
  const float corr = std::exp(s.m[h] - new_max);  // 0 on the first block (m = -inf)
  const __m512 vm = _mm512_set1_ps(new_max);
  // The weights' sum 8 lanes at a time in key order, as the AVX2 pass adds
  // them (a vector past b.n adds zeros: the same sum).
  __m256 vsum = _mm256_setzero_ps();
  for (int c = 0; c < b.n; c += 16) {
    const __mmask16 valid = static_cast<__mmask16>(b.n - c >= 16 ? 0xFFFF : (1u << (b.n - c)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(valid, Exp(_mm512_sub_ps(_mm512_loadu_ps(sc + c), vm)));
    _mm512_storeu_ps(p + c, e);
    vsum = _mm256_add_ps(vsum, _mm512_castps512_ps256(e));
    vsum = _mm256_add_ps(vsum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  s.l[h] = s.l[h] * corr + Hsum(vsum);
  s.m[h] = new_max;
  return corr;
}

template <Elem T>
void AccumulateV32Avx512(const KeyBlock& b, const float* p, size_t v0, int head_dim, float corr,
                         float* acc) {
  int k0 = 0;
  const int nb = head_dim / 32;
  for (; k0 + 4 <= nb; k0 += 4) Blocks<T, 4>(b, p, v0, k0, corr, acc);
  if (k0 + 2 <= nb) Blocks<T, 2>(b, p, v0, k0, corr, acc), k0 += 2;
  if (k0 < nb) Blocks<T, 1>(b, p, v0, k0, corr, acc);
}

template <Elem T, int G>
void AccumulateV32GroupAvx512(const KeyBlock& b, const float* w, const float* wsum, size_t v0,
                              int head_dim, const float* corr, float* const* acc) {
  const int nb = head_dim / 32;
  for (int k = 0; k < nb; ++k) GroupBlock<T, G>(b, w, wsum, nb, v0, k, corr, acc);
}

// The block types' instances (fold_avx2.cc calls them for these only).
#define ROTOR_V32_AVX512(T)                                                                        \
  template void AccumulateV32Avx512<T>(const KeyBlock&, const float*, size_t, int, float, float*); \
  template void AccumulateV32GroupAvx512<T, 2>(const KeyBlock&, const float*, const float*,        \
                                               size_t, int, const float*, float* const*);          \
  template void AccumulateV32GroupAvx512<T, 3>(const KeyBlock&, const float*, const float*,        \
                                               size_t, int, const float*, float* const*);          \
  template void AccumulateV32GroupAvx512<T, 4>(const KeyBlock&, const float*, const float*,        \
                                               size_t, int, const float*, float* const*);
ROTOR_V32_AVX512(Elem::kQ8_0)
ROTOR_V32_AVX512(Elem::kQ4_0)
ROTOR_V32_AVX512(Elem::kQ5_0)
#undef ROTOR_V32_AVX512

}  // namespace rotor::attn
