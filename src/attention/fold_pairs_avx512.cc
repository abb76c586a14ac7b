// Pair-product scores of deferred block-type keys on 512-bit vectors
// (fold.h, "Pair products"): a block of 32 values is 16 rotation pairs,
// one vector of int16 integers; vpmaddwd gives each pair's A' and B' with
// the query's two int16 factors, then four fused multiply-adds per block
// take in the block scale, the centers and the key's rotation. Where the
// decode-and-rotate path (fold_quant_avx512.cc) spends about 26 operations
// per 32 values, this takes about 10 (q8_0). The steps per lane are
// ScoresPairsScalar's, so the scores are the same bit for bit.
#include <immintrin.h>

#include <cstring>

#include "attention/fold.h"
#include "attention/fold_avx512_sum.h"

namespace rotor::attn {
namespace {

template <Elem T>
constexpr int BlockBytes() {
  return T == Elem::kQ8_0 ? 34 : T == Elem::kQ4_0 ? 18 : 22;
}

// A block's 32 signed integers as int16, in element order.
template <Elem T>
inline __m512i Ints16(const uint8_t* blk) {
  if constexpr (T == Elem::kQ8_0) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
  } else {
    // byte i of qs: element i (low nibble), element i + 16 (high nibble)
    constexpr int qs = T == Elem::kQ5_0 ? 6 : 2;
    const __m256i n =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs)));
    __m512i x =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(n, _mm256_set1_epi16(15))),
                           _mm256_srli_epi16(n, 4), 1);
    if constexpr (T == Elem::kQ4_0) return _mm512_sub_epi16(x, _mm512_set1_epi16(8));
    uint32_t qh;  // bit i: element i's fifth bit
    std::memcpy(&qh, blk + 2, 4);
    x = _mm512_mask_add_epi16(x, static_cast<__mmask32>(qh), x, _mm512_set1_epi16(16));
    return _mm512_sub_epi16(x, _mm512_set1_epi16(16));
  }
}

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The even lanes of 32 floats at p: one value per rotation pair.
inline __m512 Even(const float* p) {
  const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx, _mm512_loadu_ps(p + 16));
}

// PairSum's order (fold_pairs.cc): lanes i + (i + 8), then fold_avx2's Hsum.
// (Sums of 16 keys at once by four levels of shuffles, three operations a
// sum instead of eight, made decode slower end to end: 0.9x q4_0, 0.7x
// q8_0 at depth 4096; BENCHMARKS.md.)
inline float Sum(__m512 v) {
  const __m256 w = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Sum of a and of b at once, lane for lane the same additions: a's partial
// sums in the low 256 bits of every step, b's in the high (10 operations
// where two Sum take 16).
inline void Sum2(__m512 a, __m512 b, float* sum_a, float* sum_b) {
  __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44),   // [a.lo | b.lo]
                           _mm512_shuffle_f32x4(a, b, 0xEE));  // [a.hi | b.hi]
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));      // i + (i + 4) in each half
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));            // (0 + 2), (1 + 3)
  t = _mm512_add_ps(t, _mm512_movehdup_ps(t));
  *sum_a = _mm512_cvtss_f32(t);
  *sum_b = _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));
}

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use

template <Elem T, int NB>
void Scores(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 32 * NB, stride = PairStride(hd);
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  __m512 cr[NB], sr[NB];
  __m512i x[NB], xb[NB];
  __m512 dk[NB], dkb[NB];
  for (int j = 0; j < b.n; ++j) {
    for (int o = 0; o < v_bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
    if (j + kAheadK < b.n)
      for (int o = 0; o < k_bytes; o += 64)
        _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
    for (int k = 0; k < NB; ++k) {
      const __m512 c1 = Even(b.cos[j] + 32 * k), s1 = Even(b.sin[j] + 32 * k);
      if (b.cos2[j] != nullptr) {
        const __m512 c2 = Even(b.cos2[j] + 32 * k), s2 = Even(b.sin2[j] + 32 * k);
        cr[k] = _mm512_fnmadd_ps(s1, s2, _mm512_mul_ps(c1, c2));
        sr[k] = _mm512_fmadd_ps(c1, s2, _mm512_mul_ps(s1, c2));
      } else {
        cr[k] = c1, sr[k] = s1;
      }
    }
    // Query heads two at a time (Sum2); x / dk hold KV head ga's integers
    // and scales, xb / dkb those of gb when the pair straddles two KV heads.
    const auto decode = [&](int g, __m512i(&xs)[NB], __m512(&ds)[NB]) {
      const uint8_t* head =
          static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
      for (int k = 0; k < NB; ++k) {
        xs[k] = Ints16<T>(head + k * BlockBytes<T>());
        ds[k] = _mm512_set1_ps(Half(head + k * BlockBytes<T>()));
      }
    };
    const auto score = [&](int h, const __m512i(&xs)[NB], const __m512(&ds)[NB]) {
      const float* f = s.qp + static_cast<size_t>(h) * stride;
      __m512 acc = _mm512_setzero_ps(), acc_s = _mm512_setzero_ps();  // cosine, sine terms
      for (int k = 0; k < NB; ++k) {
        const __m512i u = _mm512_loadu_si512(f + 32 * k), w = _mm512_loadu_si512(f + 32 * k + 16);
        const __m512 a = _mm512_cvtepi32_ps(_mm512_madd_epi16(xs[k], u));
        const __m512 bb = _mm512_cvtepi32_ps(_mm512_madd_epi16(xs[k], w));
        const __m512 dq = _mm512_mul_ps(ds[k], _mm512_set1_ps(f[2 * hd + k]));  // block, query
        acc = _mm512_fmadd_ps(_mm512_fmadd_ps(a, dq, _mm512_loadu_ps(f + hd + 32 * k)), cr[k], acc);
        acc_s = _mm512_fmadd_ps(_mm512_fmadd_ps(bb, dq, _mm512_loadu_ps(f + hd + 32 * k + 16)),
                                sr[k], acc_s);
      }
      return _mm512_add_ps(acc, acc_s);
    };
    int have = -1;  // the KV head in x / dk
    int h = 0;
    for (; h + 4 <= s.n_head; h += 4) {  // four query heads, one sum
      __m512 acc[4];
      for (int u = 0; u < 4; ++u) {
        const int g = (h + u) / group;
        if (g != have) decode(g, x, dk), have = g;
        acc[u] = score(h + u, x, dk);
      }
      Sum4(acc[0], acc[1], acc[2], acc[3], &s.scores[h * kBlock + j],
           &s.scores[(h + 1) * kBlock + j], &s.scores[(h + 2) * kBlock + j],
           &s.scores[(h + 3) * kBlock + j]);
    }
    for (; h < s.n_head; h += 2) {
      const int ga = h / group;
      if (ga != have) decode(ga, x, dk), have = ga;
      const __m512 acc_a = score(h, x, dk);
      if (h + 1 == s.n_head) {
        s.scores[h * kBlock + j] = Sum(acc_a);
        break;
      }
      const int gb = (h + 1) / group;
      __m512 acc_b;
      if (gb == ga) {
        acc_b = score(h + 1, x, dk);
      } else {
        decode(gb, xb, dkb);
        acc_b = score(h + 1, xb, dkb);
      }
      Sum2(acc_a, acc_b, &s.scores[h * kBlock + j], &s.scores[(h + 1) * kBlock + j]);
    }
  }
}

template <Elem T>
bool ScoresOf(FoldState& s, const KeyBlock& b) {
  switch (s.head_dim / 32) {
    case 1:
      return Scores<T, 1>(s, b), true;
    case 2:
      return Scores<T, 2>(s, b), true;
    case 3:
      return Scores<T, 3>(s, b), true;
    case 4:
      return Scores<T, 4>(s, b), true;
    case 5:
      return Scores<T, 5>(s, b), true;
    case 6:
      return Scores<T, 6>(s, b), true;
    case 7:
      return Scores<T, 7>(s, b), true;
    case 8:
      return Scores<T, 8>(s, b), true;
    default:
      return false;
  }
}

}  // namespace

bool ScoresPairsAvx512(FoldState& s, const KeyBlock& b) {
  if (!PairScored(s, b) || s.head_dim > 256) return false;
  if (s.qp_of != s.q) PreparePairQuery(s);
  switch (b.tk) {
    case Elem::kQ8_0:
      return ScoresOf<Elem::kQ8_0>(s, b);
    case Elem::kQ4_0:
      return ScoresOf<Elem::kQ4_0>(s, b);
    case Elem::kQ5_0:
      return ScoresOf<Elem::kQ5_0>(s, b);
    default:
      return false;
  }
}

}  // namespace rotor::attn
