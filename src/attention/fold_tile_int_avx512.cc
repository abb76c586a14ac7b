// AVX-512 machines' integer scores of a prefill tile (fold.h,
// ScoreTileIntAvx512): keys of a block type in blocks of 32 stored rotated,
// each scored against the tile's query rows in q8_0 blocks of 32 by VNNI's
// vpdpbusd. The block's key integers are laid out once per KV head four
// values of a key per 32-bit lane, 16 keys per vector, so a row's quants
// are read four at a time as a broadcast and no key is decoded to f32.
// vpdpbusd multiplies unsigned by signed bytes: the keys are stored here
// shifted to unsigned (q8_0: + 128; q4_0 and q5_0: their stored quants,
// + 8 and + 16) and each row's sum starts at -offset * (the sum of its
// block's quants), so every block's integer is exact, the same as the
// reference's (ScoreTileIntScalar), and so are the f32 steps after it.
#include <immintrin.h>

#include <cstring>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

namespace rotor::attn {
namespace {

constexpr int kRowsInt = 4;  // query rows per register block

// The offset of T's keys as stored here (unsigned): integer = stored - offset.
template <Elem T>
constexpr int32_t KeyOffset() {
  return T == Elem::kQ8_0 ? 128 : QuantOffset<T>();
}

// KV head g of keys [0, n) of the block, keys [n, n16) zero: kt [head_dim /
// 32, 8, kBlock] the unsigned stored integers, lane j of row (i, l) holding
// values 4 l .. 4 l + 3 of key j's block i; kd [head_dim / 32, kBlock] the
// blocks' scales (0 for the zero keys).
template <Elem T>
void LayOutKeys(const KeyBlock& b, int g, int n, int n16, int hd, int32_t* kt, float* kd) {
  const int nb = hd / 32;
  for (int j0 = 0; j0 < n16; j0 += 8) {
    const uint8_t* head[8];
    for (int i = 0; i < 8; ++i)
      head[i] = j0 + i < n ? static_cast<const uint8_t*>(b.k[j0 + i]) +
                                 static_cast<size_t>(g) * b.k_head_bytes
                           : nullptr;
    for (int i_b = 0; i_b < nb; ++i_b) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        if (head[i] == nullptr) {
          r[i] = _mm256_setzero_ps();
          kd[i_b * kBlock + j0 + i] = 0.f;
          continue;
        }
        const uint8_t* blk = head[i] + i_b * BlockBytes<T, 32>();
        __m256i u;
        if constexpr (T == Elem::kQ8_0)
          u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                               _mm256_set1_epi8(static_cast<char>(0x80)));
        else
          u = Unsigned32<T>(blk);
        r[i] = _mm256_castsi256_ps(u);
        kd[i_b * kBlock + j0 + i] = Scale<T, 32>(blk, 0);
      }
      Transpose8(r);  // r[l]: 32-bit group l of the 8 keys
      for (int l = 0; l < 8; ++l)
        _mm256_storeu_ps(reinterpret_cast<float*>(kt + (i_b * 8 + l) * kBlock + j0), r[l]);
    }
  }
}

// The scores of R rows against KG groups of 16 keys from key k0 on.
template <Elem T, int R, int KG>
void ScoreRows(TileRow* rows, const TileQuery* queries, int k0, const int32_t* kt, const float* kd,
               int hd, float scale) {
  kt += k0, kd += k0;
  const int nb = hd / 32;
  __m512 sc[R][KG];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < KG; ++k) sc[r][k] = _mm512_setzero_ps();
  for (int i = 0; i < nb; ++i) {
    __m512i acc[R][KG];
    for (int r = 0; r < R; ++r) {
      const __m512i start = _mm512_set1_epi32(-KeyOffset<T>() * queries[r].qs[i]);
      for (int k = 0; k < KG; ++k) acc[r][k] = start;
    }
    for (int l = 0; l < 8; ++l) {
      __m512i key[KG];
      for (int k = 0; k < KG; ++k) key[k] = _mm512_loadu_si512(kt + (i * 8 + l) * kBlock + 16 * k);
      for (int r = 0; r < R; ++r) {
        int32_t q4;
        std::memcpy(&q4, queries[r].q8 + 32 * i + 4 * l, 4);
        const __m512i q = _mm512_set1_epi32(q4);
        for (int k = 0; k < KG; ++k) acc[r][k] = _mm512_dpbusd_epi32(acc[r][k], key[k], q);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 qd = _mm512_set1_ps(queries[r].qd[i]);
      for (int k = 0; k < KG; ++k)
        sc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][k]),
                                   _mm512_mul_ps(_mm512_loadu_ps(kd + i * kBlock + 16 * k), qd),
                                   sc[r][k]);
    }
  }
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < KG; ++k)
      _mm512_storeu_ps(rows[r].sc + k0 + 16 * k, _mm512_mul_ps(sc[r][k], vs));
}

template <Elem T, int KG>
void ScoreAllRows(TileRow* rows, const TileQuery* queries, int n_rows, int k0, const int32_t* kt,
                  const float* kd, int hd, float scale) {
  int r = 0;
  for (; r + kRowsInt <= n_rows; r += kRowsInt)
    ScoreRows<T, kRowsInt, KG>(rows + r, queries + r, k0, kt, kd, hd, scale);
  switch (n_rows - r) {
    case 1:
      return ScoreRows<T, 1, KG>(rows + r, queries + r, k0, kt, kd, hd, scale);
    case 2:
      return ScoreRows<T, 2, KG>(rows + r, queries + r, k0, kt, kd, hd, scale);
    case 3:
      return ScoreRows<T, 3, KG>(rows + r, queries + r, k0, kt, kd, hd, scale);
    default:
      return;
  }
}

template <Elem T>
void ScoreTile(TileRow* rows, const TileQuery* queries, int n_rows, const KeyBlock& b, int g, int n,
               int n8, int hd, float scale, void* scratch) {
  const int n16 = (n8 + 15) / 16 * 16;
  int32_t* kt = static_cast<int32_t*>(scratch);   // [head_dim / 32, 8, kBlock]
  float* kd = reinterpret_cast<float*>(kt + hd / 32 * 8 * kBlock);  // [head_dim / 32, kBlock]
  LayOutKeys<T>(b, g, n, n16, hd, kt, kd);
  // Two groups of 16 keys per pass over a row's quants (the last may be one).
  for (int k0 = 0; k0 < n16; k0 += 32) {
    if (n16 - k0 > 16)
      ScoreAllRows<T, 2>(rows, queries, n_rows, k0, kt, kd, hd, scale);
    else
      ScoreAllRows<T, 1>(rows, queries, n_rows, k0, kt, kd, hd, scale);
  }
}

}  // namespace

void ScoreTileIntAvx512(TileRow* rows, const TileQuery* queries, int n_rows, const KeyBlock& b,
                        int g, int n, int n8, int head_dim, float scale, void* scratch) {
  switch (b.tk) {
    case Elem::kQ8_0:
      return ScoreTile<Elem::kQ8_0>(rows, queries, n_rows, b, g, n, n8, head_dim, scale, scratch);
    case Elem::kQ4_0:
      return ScoreTile<Elem::kQ4_0>(rows, queries, n_rows, b, g, n, n8, head_dim, scale, scratch);
    case Elem::kQ5_0:
      return ScoreTile<Elem::kQ5_0>(rows, queries, n_rows, b, g, n, n8, head_dim, scale, scratch);
    default:
      return;
  }
}

}  // namespace rotor::attn
