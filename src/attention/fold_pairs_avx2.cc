// Pair-product scores of deferred block-type keys on 256-bit vectors
// (fold.h, "Pair products"): fold_pairs_avx512.cc's steps with each
// block's 16 pairs in two vectors of 8 (lanes i and i + 8 of the 512-bit
// accumulator are lane i of acc[0] and acc[1]), so the scores are the same
// bit for bit. The rotation rows, one per pair, go to the state's scratch
// (16 registers hold no head of rows).
#include <immintrin.h>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

namespace rotor::attn {
namespace {

// The even lanes of 16 floats at p: one value per rotation pair.
inline __m256 Even(const float* p) {
  const __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xD8));
}

// Elements [e, e + 16) of a head's integers as int16.
template <Elem T>
inline __m256i Ints16(const uint8_t* head, int e) {
  return _mm256_cvtepi8_epi16(_mm_set_epi64x(static_cast<long long>(Ints8<T, 32>(head, e + 8)),
                                             static_cast<long long>(Ints8<T, 32>(head, e))));
}

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use

template <Elem T>
void Scores(FoldState& s, const KeyBlock& b) {
  const int hd = s.head_dim, nb = hd / 32, stride = PairStride(hd);
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  float* cr = s.cs;           // [head_dim / 2] the key's rotation, one per pair
  float* sr = s.cs + hd / 2;  // [head_dim / 2]
  for (int j = 0; j < b.n; ++j) {
    for (int o = 0; o < v_bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
    if (j + kAheadK < b.n)
      for (int o = 0; o < k_bytes; o += 64)
        _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
    for (int e = 0; e < hd; e += 16) {
      const __m256 c1 = Even(b.cos[j] + e), s1 = Even(b.sin[j] + e);
      if (b.cos2[j] != nullptr) {
        const __m256 c2 = Even(b.cos2[j] + e), s2 = Even(b.sin2[j] + e);
        _mm256_storeu_ps(cr + e / 2, _mm256_fnmadd_ps(s1, s2, _mm256_mul_ps(c1, c2)));
        _mm256_storeu_ps(sr + e / 2, _mm256_fmadd_ps(c1, s2, _mm256_mul_ps(s1, c2)));
      } else {
        _mm256_storeu_ps(cr + e / 2, c1);
        _mm256_storeu_ps(sr + e / 2, s1);
      }
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      const uint8_t* head =
          static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
      for (int h0 = g * group; h0 < (g + 1) * group; h0 += 2) {
        // Two query heads per pass over the key head's blocks (one at the end of an odd group).
        const int n = h0 + 1 < (g + 1) * group ? 2 : 1;
        __m256 acc[2][2], acc_s[2][2];  // [head][half]: the cosine and the sine terms
        for (int u = 0; u < 2; ++u)
          acc[u][0] = acc[u][1] = acc_s[u][0] = acc_s[u][1] = _mm256_setzero_ps();
        for (int k = 0; k < nb; ++k) {
          const __m256 d = _mm256_set1_ps(Scale<T, 32>(head, 32 * k));
          for (int half = 0; half < 2; ++half) {
            const __m256i x = Ints16<T>(head, 32 * k + 16 * half);
            const __m256 c = _mm256_loadu_ps(cr + 16 * k + 8 * half),
                         sn = _mm256_loadu_ps(sr + 16 * k + 8 * half);
            for (int u = 0; u < n; ++u) {
              const float* f = s.qp + static_cast<size_t>(h0 + u) * stride;
              const __m256i qu =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 32 * k + 8 * half));
              const __m256i qw =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 32 * k + 16 + 8 * half));
              const __m256 a = _mm256_cvtepi32_ps(_mm256_madd_epi16(x, qu));
              const __m256 bb = _mm256_cvtepi32_ps(_mm256_madd_epi16(x, qw));
              const __m256 dq =
                  _mm256_mul_ps(d, _mm256_set1_ps(f[2 * hd + k]));  // block and query scales
              __m256 &ac = acc[u][half], &as = acc_s[u][half];
              ac = _mm256_fmadd_ps(
                  _mm256_fmadd_ps(a, dq, _mm256_loadu_ps(f + hd + 32 * k + 8 * half)), c, ac);
              as = _mm256_fmadd_ps(
                  _mm256_fmadd_ps(bb, dq, _mm256_loadu_ps(f + hd + 32 * k + 16 + 8 * half)), sn,
                  as);
            }
          }
        }
        for (int u = 0; u < n; ++u)
          s.scores[(h0 + u) * kBlock + j] = Hsum(_mm256_add_ps(
              _mm256_add_ps(acc[u][0], acc_s[u][0]), _mm256_add_ps(acc[u][1], acc_s[u][1])));
      }
    }
  }
}

}  // namespace

bool ScoresPairsAvx2(FoldState& s, const KeyBlock& b) {
  if (!PairScored(s, b) || s.head_dim > 256) return false;
  if (s.qp_of != s.q) PreparePairQuery(s);
  switch (b.tk) {
    case Elem::kQ8_0:
      return Scores<Elem::kQ8_0>(s, b), true;
    case Elem::kQ4_0:
      return Scores<Elem::kQ4_0>(s, b), true;
    case Elem::kQ5_0:
      return Scores<Elem::kQ5_0>(s, b), true;
    default:
      return false;
  }
}

}  // namespace rotor::attn
