// AVX-512 online-softmax fold for head_dim % 16 == 0 (up to 256): keys rotated
// in registers (deferred RoPE, adjacent pairs), vectorized exp.
#include <immintrin.h>


#include "attention/fold.h"
#include "attention/fold_avx512_exp.h"

namespace rotor::attn {
namespace {

// 16 values of a K or V row from element 16 * i on, as f32.
template <bool F16>
inline __m512 Load16(const void* row, int64_t i) {
  if constexpr (F16)
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + 16 * i)));
  else
    return _mm512_loadu_ps(static_cast<const float*>(row) + 16 * i);
}

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use

// NV = head_dim / 16, a compile-time constant so the key, rotation and
// accumulator vectors stay in registers. F16: the rows hold f16 values.
template <int NV, bool F16>
void Fold(FoldState& s, const KeyBlock& b) {
  constexpr int nv = NV, hd = 16 * NV;
  const int group = s.n_head / s.n_head_kv;
  __m512 k[NV];
  __m512 cr[NV], sr[NV];
  // Bytes of one key's K or V row (every kv head of the fold).
  const int v_bytes = s.n_head_kv * hd * static_cast<int>(F16 ? sizeof(uint16_t) : sizeof(float));
  for (int j = 0; j < b.n; ++j) {
    // The V pass below walks the block head by head, a stride of v_bytes
    // between keys that the hardware prefetchers do not follow: fetch each
    // key's V row now, while its K row is being used.
    for (int o = 0; o < v_bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
    if (j + kAheadK < b.n)
      for (int o = 0; o < v_bytes; o += 64)
        _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
    const bool rotate = b.cos[j] != nullptr;
    if (rotate) {  // this key's rotation row, once for every head
      for (int i = 0; i < nv; ++i) {
        const __m512 c1 = _mm512_loadu_ps(b.cos[j] + 16 * i), s1 = _mm512_loadu_ps(b.sin[j] + 16 * i);
        if (b.cos2[j] != nullptr) {
          const __m512 c2 = _mm512_loadu_ps(b.cos2[j] + 16 * i), s2 = _mm512_loadu_ps(b.sin2[j] + 16 * i);
          cr[i] = _mm512_fnmadd_ps(s1, s2, _mm512_mul_ps(c1, c2));
          sr[i] = _mm512_fmadd_ps(c1, s2, _mm512_mul_ps(s1, c2));
        } else {
          cr[i] = c1, sr[i] = s1;
        }
      }
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      const int64_t kv0 = static_cast<int64_t>(g) * nv;  // this head's first vector
      if (rotate) {
        for (int i = 0; i < nv; ++i) {
          const __m512 x = Load16<F16>(b.k[j], kv0 + i);
          const __m512 sw = _mm512_permute_ps(x, 0xB1);  // swap lanes of each pair
          k[i] = _mm512_fmadd_ps(cr[i], x, _mm512_mul_ps(sr[i], sw));
        }
      } else {
        for (int i = 0; i < nv; ++i) k[i] = Load16<F16>(b.k[j], kv0 + i);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* q = s.q + h * hd;
        __m512 dot = _mm512_mul_ps(_mm512_loadu_ps(q), k[0]);
        for (int i = 1; i < nv; ++i) dot = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * i), k[i], dot);
        s.scores[h * kBlock + j] = _mm512_reduce_add_ps(dot);
      }
    }
  }
  alignas(64) float p[kBlock];
  for (int h = 0; h < s.n_head; ++h) {
    const float corr = SoftmaxAvx512(s, b, h, p);
    float* acc = s.acc + h * hd;
    const __m512 vcorr = _mm512_set1_ps(corr);
    __m512 a[NV];
    for (int i = 0; i < nv; ++i) a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * i), vcorr);
    const int64_t v0 = static_cast<int64_t>(h / group) * nv;
    for (int j = 0; j < b.n; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      for (int i = 0; i < nv; ++i) a[i] = _mm512_fmadd_ps(pj, Load16<F16>(b.v[j], v0 + i), a[i]);
    }
    for (int i = 0; i < nv; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
  }
}

template <bool F16>
void FoldTyped(FoldState& s, const KeyBlock& b) {
  switch (s.head_dim / 16) {
    case 1: return Fold<1, F16>(s, b);
    case 2: return Fold<2, F16>(s, b);
    case 3: return Fold<3, F16>(s, b);
    case 4: return Fold<4, F16>(s, b);
    case 5: return Fold<5, F16>(s, b);
    case 6: return Fold<6, F16>(s, b);
    case 7: return Fold<7, F16>(s, b);
    case 8: return Fold<8, F16>(s, b);
    case 16: return Fold<16, F16>(s, b);
    default: return FoldScalar(s, b);
  }
}

}  // namespace

void LaneWeightsAvx512(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out) {
  for (int k = 0; k < n_keys; k += 16) {
    const __mmask16 mask =
        static_cast<__mmask16>(n_keys - k >= 16 ? 0xFFFF : (1u << (n_keys - k)) - 1);
    __m512 p = _mm512_setzero_ps();
    for (int h = 0; h < n_heads; ++h) {
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + h * stride + k),
                                     _mm512_set1_ps(m[h]));
      // Exp clamps at -87; below it the weight is 0, as expf's underflow
      // (policies compare weights: a tie must stay a tie).
      const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ),
                                           Exp(x));
      p = _mm512_fmadd_ps(e, _mm512_set1_ps(1.0f / l[h]), p);
    }
    _mm512_mask_storeu_ps(out + k, mask, p);
  }
}

void FoldAvx512(FoldState& s, const KeyBlock& b) {
  // The AVX2 fold with VNNI products, measured faster on Zen 4
  // (BENCHMARKS.md, twenty-second session) for GQA (it decodes each K and V
  // head once for the query heads that share it; here: once per query head)
  // and for block-type keys under cached RoPE (integer scores, eight keys at
  // a time) or deferred in blocks of 32 (pair products): their V pass on
  // block types is the faster one.
  const bool cached_blocks = IsBlockType(b.tk) && b.n > 0 && b.cos[0] == nullptr;
  if (s.n_head > s.n_head_kv || cached_blocks || PairScored(s, b)) return FoldAvx2Vnni(s, b);
  // (Keys stored centered read back in FoldQuantAvx512's decode.)
  const bool plain = s.k_scale == nullptr;
  if (plain && b.tk == Elem::kF32 && b.tv == Elem::kF32)
    FoldTyped<false>(s, b);
  else if (plain && b.tk == Elem::kF16 && b.tv == Elem::kF16)
    FoldTyped<true>(s, b);
  else FoldQuantAvx512(s, b);
}

}  // namespace rotor::attn
