// The tile fold's two products on 512-bit vectors (fold.h, FoldTileAvx512):
// the query rows' scores against the block's decoded K head (kt) and their
// probabilities' sums of the decoded V head (vf). FoldTileAvx2 runs the rest
// (decoding, softmax) and calls these. Each key's score is the same chain of
// fused multiply-adds over d as in the AVX2 kernels, and each value's sum the
// same chain over the keys, so the results equal FoldTileAvx2's bit for bit;
// a step covers 32 keys (32 values) where the AVX2 one covers 16.
// DecodeTileKAvx512 decodes and transposes the block's K head 16 keys x 16
// elements at a time, the values of the AVX2 DecodeK (the same conversions,
// products and rotation, moved by a wider transpose).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

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

// Transposes the 16 x 16 floats of r in place.
inline void Transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: a0 b0 a1 b1, a2 b2 a3 b3
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4k + c], lane L: element 4L + c of rows 4k .. 4k + 3.
  for (int k = 0; k < 16; k += 4) {
    u[k] = _mm512_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Column 4L + c takes lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);  // lanes 0, 1 of each
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);  // lanes 2, 3
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// Elements [e, e + 16) of a head of float type T as f32 (Load8's values).
template <Elem T>
inline __m512 Load16(const uint8_t* head, int e) {
  if constexpr (T == Elem::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(head) + e);
  } else if constexpr (T == Elem::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 2 * e)));
  } else {
    static_assert(T == Elem::kBF16);
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 2 * e));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
}

// Elements [e, e + 32) of a head of block type T in blocks of 32 as f32
// (DecodeBlock32's values), out[i] holding [e + 16i, e + 16i + 16).
template <Elem T>
inline void LoadBlock32(const uint8_t* head, int e, __m512 out[2]) {
  const uint8_t* blk = head + (e / 32) * BlockBytes<T, 32>();
  const __m256i q = Ints32<T>(blk);
  const __m512 d = _mm512_set1_ps(Scale<T, 32>(head, e));
  out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);
  out[1] =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);
}

// DecodeK of fold_tile_avx2.cc, 16 keys x 16 elements at a time: K head g of
// keys [0, n) into kt ([head_dim, kBlock]), keys [n, 16 * ceil(n8 / 16))
// zero (inside kBlock; the scores read keys below n8 only).
template <Elem T, bool kRot>
void DecodeK16(const KeyBlock& b, int g, int n, int n8, int hd, const float* center,
               const float* scale, float* kt) {
  constexpr int kParts = IsBlockType(T) ? 2 : 1;  // 16-element parts decoded at once
  for (int j0 = 0; j0 < n8; j0 += 16) {
    const uint8_t* head[16];
    for (int i = 0; i < 16; ++i)
      head[i] = j0 + i < n ? static_cast<const uint8_t*>(b.k[j0 + i]) +
                                 static_cast<size_t>(g) * b.k_head_bytes
                           : nullptr;
    for (int e = 0; e < hd; e += 16 * kParts) {
      __m512 r[kParts][16];  // [part][key]
      for (int i = 0; i < 16; ++i) {
        __m512 x[kParts];
        for (int p = 0; p < kParts; ++p) x[p] = _mm512_setzero_ps();
        if (head[i] != nullptr) {
          if constexpr (IsBlockType(T))
            LoadBlock32<T>(head[i], e, x);
          else
            x[0] = Load16<T>(head[i], e);
        }
        for (int p = 0; p < kParts; ++p) r[p][i] = x[p];
      }
      for (int p = 0; p < kParts; ++p) {
        const int ep = e + 16 * p;
        if constexpr (kRot) {
          for (int i = 0; i < 16 && head[i] != nullptr; ++i) {
            __m512 x = r[p][i];
            if (center != nullptr)
              x = _mm512_fmadd_ps(x, _mm512_loadu_ps(scale + ep), _mm512_loadu_ps(center + ep));
            const __m512 swapped = _mm512_permute_ps(x, 0xB1);  // lanes 2i <-> 2i + 1
            r[p][i] = _mm512_fmadd_ps(_mm512_loadu_ps(b.cos[j0 + i] + ep), x,
                                      _mm512_mul_ps(_mm512_loadu_ps(b.sin[j0 + i] + ep), swapped));
          }
        }
        Transpose16(r[p]);
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kt + (ep + i) * kBlock + j0, r[p][i]);
      }
    }
  }
}

template <Elem T>
bool DecodeKOf(const KeyBlock& b, int g, int n, int n8, int hd, const float* center,
               const float* scale, float* kt) {
  if (b.cos[0] != nullptr)
    DecodeK16<T, true>(b, g, n, n8, hd, center, scale, kt);
  else
    DecodeK16<T, false>(b, g, n, n8, hd, center, scale, kt);
  return true;
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

bool DecodeTileKAvx512(const KeyBlock& b, int g, int n, int n8, int head_dim, const float* center,
                       const float* scale, float* kt) {
  if (head_dim % 16 != 0 || (IsBlockType(b.tk) && b.qblock != 32)) return false;
  switch (b.tk) {
    case Elem::kF32:
      return DecodeKOf<Elem::kF32>(b, g, n, n8, head_dim, center, scale, kt);
    case Elem::kF16:
      return DecodeKOf<Elem::kF16>(b, g, n, n8, head_dim, center, scale, kt);
    case Elem::kBF16:
      return DecodeKOf<Elem::kBF16>(b, g, n, n8, head_dim, center, scale, kt);
    case Elem::kQ8_0:
      return DecodeKOf<Elem::kQ8_0>(b, g, n, n8, head_dim, center, scale, kt);
    case Elem::kQ4_0:
      return DecodeKOf<Elem::kQ4_0>(b, g, n, n8, head_dim, center, scale, kt);
    case Elem::kQ5_0:
      return DecodeKOf<Elem::kQ5_0>(b, g, n, n8, head_dim, center, scale, kt);
  }
  return false;
}

}  // namespace rotor::attn
