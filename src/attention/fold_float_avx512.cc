// Decode scores of float keys (f32, f16, bf16) on 512-bit vectors, 16
// (query head, key) dot products at once: H query heads that share a KV head
// against J = 16 / H keys (fold.h, ScoresFloatAvx512). Each key head is
// loaded (and rotated, deferred RoPE) once for its H query heads, and the 16
// products' lanes are summed across by one tree of 45 operations (Sum16)
// where one product's sum alone takes 8. Before, the 1B shape's f16 scores
// at depth 8192 (4 query heads per KV head, key by key on 256-bit vectors in
// fold_avx2.cc) were bound by those sums and products, not by the read.
// Each lane's chain of fused multiply-adds and the tree are fold_avx2.cc's
// (DotFloat, Hsum), so the scores are the same bits.
#include <immintrin.h>

#include <algorithm>

#include "attention/fold.h"
#include "attention/fold_avx512_load.h"

namespace rotor::attn {
namespace {

// The lane sums of v[0..16): lane 4 k + l of the result is the sum of v[4 l +
// k]'s lanes. Every sum takes the same tree: lanes i + (i + 8), then i + (i +
// 4) of those, then (0 + 2) and (1 + 3), then their sum.
inline __m512 Sum16(const __m512 (&v)[16]) {
  __m512 w[8];  // lanes [0, 8): v[2 a]'s 8 partial sums; [8, 16): v[2 a + 1]'s
#pragma GCC unroll 8
  for (int a = 0; a < 8; ++a)
    w[a] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], 0xEE));
  __m512 x[4];  // 128-bit block c: the 4 partial sums of v[4 b + c]
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b)
    x[b] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * b], w[2 * b + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * b], w[2 * b + 1], 0xDD));
  __m512 y[2];  // block c: lanes 0, 2 partial sums of x[2 d]'s block c; 1, 3 of x[2 d + 1]'s
#pragma GCC unroll 2
  for (int d = 0; d < 2; ++d)
    y[d] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * d], x[2 * d + 1]),
                         _mm512_unpackhi_ps(x[2 * d], x[2 * d + 1]));
  const __m512d y0 = _mm512_castps_pd(y[0]), y1 = _mm512_castps_pd(y[1]);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(y0, y1)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(y0, y1)));
}

// The accumulator of query head u and key t of a pass (H x J = 16 at most):
// the one whose sum lands in lane u J + t of Sum16's result.
template <int J>
constexpr int Slot(int u, int t) {
  return 4 * ((u * J + t) % 4) + (u * J + t) / 4;
}

// Scores of every query head against keys [0, b.n): H query heads per pass
// over J keys, head_dim 16 NV; kRotate: the keys carry rotation rows (cr /
// sr, [J] rows of head_dim) applied as the other folds apply them,
// k' = fma(cos, k, sin * swap(k)).
template <Elem T, int NV, int H, bool kRotate>
void Pass(FoldState& s, const KeyBlock& b, int j0, int nj, const float* const* cr,
          const float* const* sr) {
  constexpr int hd = 16 * NV, J = 16 / H;
  const int group = s.n_head / s.n_head_kv;
  const int k_lines = (b.k_head_bytes + 63) / 64, v_lines = (b.v_head_bytes + 63) / 64;
  const uint8_t* rows[J];
  for (int t = 0; t < J; ++t) rows[t] = static_cast<const uint8_t*>(b.k[j0 + std::min(t, nj - 1)]);
  for (int g = 0; g < s.n_head_kv; ++g) {
    const size_t k0 = static_cast<size_t>(g) * b.k_head_bytes;
    const size_t v0 = static_cast<size_t>(g) * b.v_head_bytes;
    // This KV head's V lines of the pass's keys (the V pass reads them after
    // the block's scores) and its K lines of the next pass's keys: the
    // rows are a stride apart that the hardware prefetchers do not follow.
    for (int t = 0; t < nj; ++t) {
      for (int o = 0; o < v_lines; ++o)
        _mm_prefetch(static_cast<const char*>(b.v[j0 + t]) + v0 + 64 * o, _MM_HINT_T0);
      if (j0 + J + t < b.n)
        for (int o = 0; o < k_lines; ++o)
          _mm_prefetch(static_cast<const char*>(b.k[j0 + J + t]) + k0 + 64 * o, _MM_HINT_T0);
    }
    for (int h0 = g * group; h0 < (g + 1) * group; h0 += H) {
      const float* q = s.q + static_cast<size_t>(h0) * hd;
      __m512 acc[16];  // [16] lanes of the pass's (head, key) products, at Slot(u, t)
#pragma GCC unroll 16
      for (int v = 0; v < 16; ++v) acc[v] = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int t = 0; t < J; ++t) {
#pragma GCC unroll 16
        for (int i = 0; i < NV; ++i) {
          __m512 x = Load16<T>(rows[t] + k0, i);
          if constexpr (kRotate) {
            const __m512 sw = _mm512_permute_ps(x, 0xB1);  // swap the lanes of each pair
            x = _mm512_fmadd_ps(_mm512_loadu_ps(cr[t] + 16 * i), x,
                                _mm512_mul_ps(_mm512_loadu_ps(sr[t] + 16 * i), sw));
          }
#pragma GCC unroll 4
          for (int u = 0; u < H; ++u)
            acc[Slot<J>(u, t)] =
                _mm512_fmadd_ps(_mm512_loadu_ps(q + u * hd + 16 * i), x, acc[Slot<J>(u, t)]);
        }
      }
      const __m512 sums = Sum16(acc);
      const __mmask16 valid = static_cast<__mmask16>((1u << nj) - 1);
#pragma GCC unroll 4
      for (int u = 0; u < H; ++u) {
        // lanes [u J, u J + nj) to the head's scores j0..
        const __m512i from = _mm512_add_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(u * J));
        _mm512_mask_storeu_ps(s.scores + static_cast<size_t>(h0 + u) * kBlock + j0, valid,
                              u == 0 ? sums : _mm512_permutexvar_ps(from, sums));
      }
    }
  }
}

template <Elem T, int NV, int H>
void Scores(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV, J = 16 / H;
  alignas(64) float rot[J][2][hd];  // [key of the pass][cos, sin][head_dim]: two levels combined
  const float* cr[J];
  const float* sr[J];
  // A block's keys are all stored rotated or all carry rows (KeyBlock).
  const bool rotate = b.cos[0] != nullptr;
  for (int j0 = 0; j0 < b.n; j0 += J) {
    const int nj = std::min(J, b.n - j0);
    for (int t = 0; rotate && t < J; ++t) {
      const int j = j0 + std::min(t, nj - 1);
      cr[t] = b.cos[j], sr[t] = b.sin[j];
      if (b.cos2[j] == nullptr) continue;
      for (int i = 0; i < NV; ++i) {  // angle addition, as the other folds combine the levels
        const __m512 c1 = _mm512_loadu_ps(b.cos[j] + 16 * i),
                     s1 = _mm512_loadu_ps(b.sin[j] + 16 * i);
        const __m512 c2 = _mm512_loadu_ps(b.cos2[j] + 16 * i);
        const __m512 s2 = _mm512_loadu_ps(b.sin2[j] + 16 * i);
        _mm512_store_ps(rot[t][0] + 16 * i, _mm512_fnmadd_ps(s1, s2, _mm512_mul_ps(c1, c2)));
        _mm512_store_ps(rot[t][1] + 16 * i, _mm512_fmadd_ps(c1, s2, _mm512_mul_ps(s1, c2)));
      }
      cr[t] = rot[t][0], sr[t] = rot[t][1];
    }
    if (rotate)
      Pass<T, NV, H, true>(s, b, j0, nj, cr, sr);
    else
      Pass<T, NV, H, false>(s, b, j0, nj, cr, sr);
  }
}

// H: the most query heads of a KV head's group (up to 4) that divide it.
template <Elem T, int NV>
void OfGroup(FoldState& s, const KeyBlock& b) {
  const int group = s.n_head / s.n_head_kv;
  if (group % 4 == 0) return Scores<T, NV, 4>(s, b);
  if (group % 3 == 0) return Scores<T, NV, 3>(s, b);
  if (group % 2 == 0) return Scores<T, NV, 2>(s, b);
  Scores<T, NV, 1>(s, b);
}

// The head sizes of nearly every model: 64 and 128. Each (head size, H,
// type, rotation) is a fully unrolled instantiation; all of 16 to 256 took
// this file 61 s to compile in Release and 332 s under ASan+UBSan, most of
// a CI run's growth (docs/RELIABILITY.md). Other sizes keep FoldAvx2's
// key-by-key scores, the same bits.
template <Elem T>
bool OfType(FoldState& s, const KeyBlock& b) {
  switch (s.head_dim) {
    case 64:
      return OfGroup<T, 4>(s, b), true;
    case 128:
      return OfGroup<T, 8>(s, b), true;
    default:
      return false;
  }
}

}  // namespace

bool ScoresFloatAvx512(FoldState& s, const KeyBlock& b) {
  if (b.n == 0 || s.k_scale != nullptr) return false;
  if (b.cos[0] != nullptr && !s.normal_pairs) return false;
  switch (b.tk) {
    case Elem::kF32:
      return OfType<Elem::kF32>(s, b);
    case Elem::kF16:
      return OfType<Elem::kF16>(s, b);
    case Elem::kBF16:
      return OfType<Elem::kBF16>(s, b);
    default:
      return false;
  }
}

}  // namespace rotor::attn
