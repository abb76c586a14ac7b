// The tile fold's two products on 512-bit vectors (fold.h, FoldTileAvx512):
// the query rows' scores against the block's decoded K head (kt) and their
// probabilities' sums of the decoded V head (vf). FoldTileAvx2 runs the rest
// (decoding, softmax) and calls these. Each key's score is the same chain of
// fused multiply-adds over d as in the AVX2 kernels, and each value's sum the
// same chain over the keys, so the results equal FoldTileAvx2's bit for bit;
// a step covers 32 keys (32 values) where the AVX2 one covers 16.
#include <immintrin.h>

#include <algorithm>

#include "attention/fold.h"

namespace rotor::attn {
namespace {

constexpr int kRows = 4;  // query rows per register block, as FoldTileAvx2

// The first n lanes (n <= 0: none).
inline __mmask16 FirstLanes16(int n) {
  return n >= 16  ? static_cast<__mmask16>(0xFFFF)
         : n <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((1u << n) - 1);
}

// Scaled scores of R rows against keys [0, n8) of kt.
template <int R>
void ScoreRows(TileRow* rows, const float* kt, int hd, int n8, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  int j = 0;
  for (; j + 32 <= n8; j += 32) {
    __m512 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m512 k0 = _mm512_loadu_ps(kt + d * kBlock + j);
      const __m512 k1 = _mm512_loadu_ps(kt + d * kBlock + j + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 q = _mm512_set1_ps(rows[r].q[d]);
        a0[r] = _mm512_fmadd_ps(q, k0, a0[r]);
        a1[r] = _mm512_fmadd_ps(q, k1, a1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(rows[r].sc + j, _mm512_mul_ps(a0[r], vs));
      _mm512_storeu_ps(rows[r].sc + j + 16, _mm512_mul_ps(a1[r], vs));
    }
  }
  for (; j < n8; j += 16) {  // the last 8 to 24 keys, 16 at a time
    const __mmask16 m = FirstLanes16(n8 - j);
    __m512 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm512_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m512 k0 = _mm512_maskz_loadu_ps(m, kt + d * kBlock + j);
      for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(rows[r].q[d]), k0, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(rows[r].sc + j, m, _mm512_mul_ps(a[r], vs));
  }
}

// acc = acc * corr + sum over keys [0, n) of p * v, for R rows (hd % 16 == 0).
template <int R>
void AccumulateRows(TileRow* rows, const float* vf, int hd, int n) {
  int longest = 0;  // the rows' p are zero past their own n
  for (int r = 0; r < R; ++r) longest = std::max(longest, rows[r].n);
  n = std::min(longest, n);
  int e = 0;
  for (; e + 32 <= hd; e += 32) {
    __m512 a0[R], a1[R];
    for (int r = 0; r < R; ++r) {
      const __m512 c = _mm512_set1_ps(rows[r].corr);
      a0[r] = _mm512_mul_ps(_mm512_loadu_ps(rows[r].acc + e), c);
      a1[r] = _mm512_mul_ps(_mm512_loadu_ps(rows[r].acc + e + 16), c);
    }
    for (int j = 0; j < n; ++j) {
      const __m512 v0 = _mm512_loadu_ps(vf + j * hd + e),
                   v1 = _mm512_loadu_ps(vf + j * hd + e + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_set1_ps(rows[r].sc[j]);
        a0[r] = _mm512_fmadd_ps(p, v0, a0[r]);
        a1[r] = _mm512_fmadd_ps(p, v1, a1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(rows[r].acc + e, a0[r]);
      _mm512_storeu_ps(rows[r].acc + e + 16, a1[r]);
    }
  }
  if (e < hd) {  // the last 16
    __m512 a[R];
    for (int r = 0; r < R; ++r)
      a[r] = _mm512_mul_ps(_mm512_loadu_ps(rows[r].acc + e), _mm512_set1_ps(rows[r].corr));
    for (int j = 0; j < n; ++j) {
      const __m512 v0 = _mm512_loadu_ps(vf + j * hd + e);
      for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(rows[r].sc[j]), v0, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(rows[r].acc + e, a[r]);
  }
}

}  // namespace

void ScoreTileRowsAvx512(TileRow* rows, int n_rows, const float* kt, int head_dim, int n8,
                         float scale) {
  int r = 0;
  for (; r + kRows <= n_rows; r += kRows) ScoreRows<kRows>(rows + r, kt, head_dim, n8, scale);
  switch (n_rows - r) {
    case 1:
      return ScoreRows<1>(rows + r, kt, head_dim, n8, scale);
    case 2:
      return ScoreRows<2>(rows + r, kt, head_dim, n8, scale);
    case 3:
      return ScoreRows<3>(rows + r, kt, head_dim, n8, scale);
    default:
      return;
  }
}

void AccumulateTileRowsAvx512(TileRow* rows, int n_rows, const float* vf, int head_dim, int n) {
  int r = 0;
  for (; r + kRows <= n_rows; r += kRows) AccumulateRows<kRows>(rows + r, vf, head_dim, n);
  switch (n_rows - r) {
    case 1:
      return AccumulateRows<1>(rows + r, vf, head_dim, n);
    case 2:
      return AccumulateRows<2>(rows + r, vf, head_dim, n);
    case 3:
      return AccumulateRows<3>(rows + r, vf, head_dim, n);
    default:
      return;
  }
}

}  // namespace rotor::attn
