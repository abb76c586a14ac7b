// AVX-512 online-softmax fold for any mix of K/V element types (f32, f16,
// bf16, q8_0, q4_0, q5_0) with 32-element quantization blocks (head_dim % 32
// == 0, up to 256). Block-type keys under cached RoPE are scored by VNNI
// integer dot products with the query quantized once per head (QuantizeQuery):
// per pair of blocks, |k| (u8) times q with k's sign (s8), vpdpbusd into 16
// int32 lanes (8 per block), scaled by d_k * d_q per lane. Keys to rotate
// (deferred RoPE) and the float types are decoded into f32 registers and
// rotated there; V heads are decoded in registers into the accumulators. No
// decoded copy of a K or V row is ever written.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/fold.h"
#include "attention/fold_avx512_exp.h"

namespace rotor::attn {
namespace {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Bytes of one 32-element block.
template <Elem T>
constexpr int BlockBytes() {
  return T == Elem::kQ8_0 ? 34 : T == Elem::kQ4_0 ? 18 : 22;
}

// Values [16 i, 16 i + 16) of a head of type T, as f32.
template <Elem T>
inline __m512 Load16(const uint8_t* head, int i) {
  if constexpr (T == Elem::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(head) + 16 * i);
  } else if constexpr (T == Elem::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32 * i)));
  } else if constexpr (T == Elem::kBF16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  } else {
    const uint8_t* blk = head + (i >> 1) * BlockBytes<T>();
    const int half = i & 1;
    __m512i x;
    if constexpr (T == Elem::kQ8_0) {
      x = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * half)));
    } else {
      __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (T == Elem::kQ5_0 ? 6 : 2)));
      if (half) q = _mm_srli_epi16(q, 4);
      x = _mm512_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(15)));
      if constexpr (T == Elem::kQ5_0) {
        uint32_t qh;
        std::memcpy(&qh, blk + 2, 4);
        x = _mm512_mask_add_epi32(x, static_cast<__mmask16>(qh >> (16 * half)), x,
                                  _mm512_set1_epi32(16));
        x = _mm512_sub_epi32(x, _mm512_set1_epi32(16));
      } else {
        x = _mm512_sub_epi32(x, _mm512_set1_epi32(8));
      }
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(Half(blk)));
  }
}

// The signed integers of blocks b0 and b1 (b1 null: zeros), 32 each, in
// element order.
template <Elem T>
inline __m512i Ints64(const uint8_t* b0, const uint8_t* b1) {
  if constexpr (T == Elem::kQ8_0) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i hi = b1 != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2))
                                     : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    constexpr int qs = T == Elem::kQ5_0 ? 6 : 2;
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + qs));
    const __m128i r1 = b1 != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + qs))
                                     : _mm_setzero_si128();
    const __m256i raw = _mm256_set_m128i(r1, r0);
    const __m256i m = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(raw, m), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // b0 lo, b1 lo, b0 hi, b1 hi
    v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));            // b0 lo, b0 hi, b1 lo, b1 hi
    int off = 8;
    if constexpr (T == Elem::kQ5_0) {
      uint32_t h0, h1 = 0;
      std::memcpy(&h0, b0 + 2, 4);
      if (b1 != nullptr) std::memcpy(&h1, b1 + 2, 4);
      const __mmask64 high = static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32;
      v = _mm512_mask_add_epi8(v, high, v, _mm512_set1_epi8(16));
      off = 16;
    }
    const __mmask64 valid = b1 != nullptr ? ~__mmask64{0} : __mmask64{0xFFFFFFFF};
    return _mm512_maskz_sub_epi8(valid, v, _mm512_set1_epi8(static_cast<char>(off)));
  }
}

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use

// The sums of the 16 lanes of a0..a3, in lanes 0, 4, 8, 12 (13 instructions
// for four sums, where one _mm512_reduce_add_ps takes 8).
inline __m512 Sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 b01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 b23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(b01, b23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(b01, b23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_ps(d, _mm512_permute_ps(d, _MM_SHUFFLE(2, 3, 0, 1)));
}

// Block-type keys without rotation (cached RoPE): integer dot products with
// the quantized query, four keys at a time (one horizontal reduction for the
// four), two blocks per vector.
template <int NV, Elem TK>
void ScoresInt(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV, nb = hd / 32, npair = (nb + 1) / 2;
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  for (int j0 = 0; j0 < b.n; j0 += 4) {
    for (int j = j0; j < j0 + 4 && j < b.n; ++j) {
      for (int o = 0; o < v_bytes; o += 64)
        _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
      if (j + kAheadK < b.n)
        for (int o = 0; o < k_bytes; o += 64)
          _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      __m512i ka[4][npair];
      __mmask64 neg[4][npair];
      __m512 dk[4][npair];
      for (int u = 0; u < 4; ++u) {
        const int j = std::min(j0 + u, b.n - 1);  // past the end: the last key again, not stored
        const uint8_t* head = static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
        for (int p = 0; p < npair; ++p) {
          const uint8_t* b0 = head + 2 * p * BlockBytes<TK>();
          const bool two = 2 * p + 1 < nb;
          const uint8_t* b1 = two ? b0 + BlockBytes<TK>() : nullptr;
          const __m512i x = Ints64<TK>(b0, b1);
          ka[u][p] = _mm512_abs_epi8(x);
          neg[u][p] = _mm512_movepi8_mask(x);
          uint16_t h0, h1 = 0;
          std::memcpy(&h0, b0, 2);
          if (two) std::memcpy(&h1, b1, 2);
          dk[u][p] = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(h1)),
                                                      _mm_set1_epi16(static_cast<short>(h0))));
        }
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const int8_t* q = s.q8 + static_cast<size_t>(h) * hd;
        const float* qd = s.q8d + static_cast<size_t>(h) * nb * 8;
        __m512 acc[4];
        for (int u = 0; u < 4; ++u) acc[u] = _mm512_setzero_ps();
        for (int p = 0; p < npair; ++p) {
          const bool two = 2 * p + 1 < nb;
          const __m512i qv = _mm512_maskz_loadu_epi8(two ? ~__mmask64{0} : __mmask64{0xFFFFFFFF}, q + 64 * p);
          const __m512 qdv = _mm512_maskz_loadu_ps(two ? 0xFFFF : 0x00FF, qd + 16 * p);
          for (int u = 0; u < 4; ++u) {
            const __m512i qs = _mm512_mask_sub_epi8(qv, neg[u][p], _mm512_setzero_si512(), qv);
            const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ka[u][p], qs);
            acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dk[u][p], qdv), acc[u]);
          }
        }
        alignas(64) float sums[16];
        _mm512_store_ps(sums, Sum4(acc[0], acc[1], acc[2], acc[3]));
        for (int u = 0; u < 4 && j0 + u < b.n; ++u) s.scores[h * kBlock + j0 + u] = sums[4 * u];
      }
    }
  }
}

// Raw q.k of every key and query head into s.scores (unscaled).
template <int NV, Elem TK>
void Scores(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV, nb = hd / 32, npair = (nb + 1) / 2;
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  constexpr bool kBlocks = IsBlockType(TK);
  __m512 k[NV], cr[NV], sr[NV];
  for (int j = 0; j < b.n; ++j) {
    for (int o = 0; o < v_bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
    if (j + kAheadK < b.n)
      for (int o = 0; o < k_bytes; o += 64)
        _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
    const bool rotate = b.cos[j] != nullptr;
    if (rotate) {
      for (int i = 0; i < NV; ++i) {
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
      const uint8_t* head = static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
      if constexpr (kBlocks) {
        if (!rotate) {
          // Integer dot products, two blocks per vector.
          __m512i ka[npair];
          __mmask64 neg[npair];
          __m512 dk[npair];
          for (int p = 0; p < npair; ++p) {
            const uint8_t* b0 = head + 2 * p * BlockBytes<TK>();
            const bool two = 2 * p + 1 < nb;
            const uint8_t* b1 = two ? b0 + BlockBytes<TK>() : nullptr;
            const __m512i x = Ints64<TK>(b0, b1);
            ka[p] = _mm512_abs_epi8(x);
            neg[p] = _mm512_movepi8_mask(x);
            const __m128i d0 = _mm_set1_epi16(static_cast<short>(*reinterpret_cast<const uint16_t*>(b0)));
            const __m128i d1 = two ? _mm_set1_epi16(static_cast<short>(*reinterpret_cast<const uint16_t*>(b1)))
                                   : _mm_setzero_si128();
            dk[p] = _mm512_cvtph_ps(_mm256_set_m128i(d1, d0));
          }
          for (int h = g * group; h < (g + 1) * group; ++h) {
            const int8_t* q = s.q8 + static_cast<size_t>(h) * hd;
            const float* qd = s.q8d + static_cast<size_t>(h) * nb * 8;
            __m512 acc = _mm512_setzero_ps();
            for (int p = 0; p < npair; ++p) {
              const bool two = 2 * p + 1 < nb;
              const __m512i qv = _mm512_maskz_loadu_epi8(two ? ~__mmask64{0} : __mmask64{0xFFFFFFFF}, q + 64 * p);
              const __m512i qs = _mm512_mask_sub_epi8(qv, neg[p], _mm512_setzero_si512(), qv);
              const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ka[p], qs);
              const __m512 sc = _mm512_mul_ps(
                  dk[p], _mm512_maskz_loadu_ps(two ? 0xFFFF : 0x00FF, qd + 16 * p));
              acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc);
            }
            s.scores[h * kBlock + j] = _mm512_reduce_add_ps(acc);
          }
          continue;
        }
      }
      if (rotate) {
        for (int i = 0; i < NV; ++i) {
          const __m512 x = Load16<TK>(head, i);
          const __m512 sw = _mm512_permute_ps(x, 0xB1);  // swap lanes of each pair
          k[i] = _mm512_fmadd_ps(cr[i], x, _mm512_mul_ps(sr[i], sw));
        }
      } else {
        for (int i = 0; i < NV; ++i) k[i] = Load16<TK>(head, i);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* q = s.q + h * hd;
        __m512 dot = _mm512_mul_ps(_mm512_loadu_ps(q), k[0]);
        for (int i = 1; i < NV; ++i) dot = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * i), k[i], dot);
        s.scores[h * kBlock + j] = _mm512_reduce_add_ps(dot);
      }
    }
  }
}

// The softmax of the block's scores and the V rows into the accumulators.
template <int NV, Elem TV>
void Values(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV;
  const int group = s.n_head / s.n_head_kv;
  const __m512 scale = _mm512_set1_ps(s.scale);
  alignas(64) float p[kBlock];
  const int nvec = (b.n + 15) / 16;
  for (int h = 0; h < s.n_head; ++h) {
    float* sc = s.scores + h * kBlock;
    __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int c = 0; c < nvec; ++c) {
      const __mmask16 mask = static_cast<__mmask16>(b.n - 16 * c >= 16 ? 0xFFFF : (1u << (b.n - 16 * c)) - 1);
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, sc + 16 * c), scale);
      _mm512_mask_storeu_ps(sc + 16 * c, mask, x);
      vmax = _mm512_mask_max_ps(vmax, mask, vmax, x);
    }
    const float new_max = std::max(s.m[h], _mm512_reduce_max_ps(vmax));
    const float corr = std::exp(s.m[h] - new_max);
    const __m512 vm = _mm512_set1_ps(new_max);
    __m512 vsum = _mm512_setzero_ps();
    for (int c = 0; c < nvec; ++c) {
      const __mmask16 mask = static_cast<__mmask16>(b.n - 16 * c >= 16 ? 0xFFFF : (1u << (b.n - 16 * c)) - 1);
      const __m512 e = _mm512_maskz_mov_ps(mask, Exp(_mm512_sub_ps(_mm512_loadu_ps(sc + 16 * c), vm)));
      _mm512_store_ps(p + 16 * c, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    s.l[h] = s.l[h] * corr + _mm512_reduce_add_ps(vsum);
    s.m[h] = new_max;
    float* acc = s.acc + h * hd;
    const __m512 vcorr = _mm512_set1_ps(corr);
    __m512 a[NV];
    for (int i = 0; i < NV; ++i) a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * i), vcorr);
    const size_t v0 = static_cast<size_t>(h / group) * b.v_head_bytes;
    for (int j = 0; j < b.n; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const uint8_t* head = static_cast<const uint8_t*>(b.v[j]) + v0;
      for (int i = 0; i < NV; ++i) a[i] = _mm512_fmadd_ps(pj, Load16<TV>(head, i), a[i]);
    }
    for (int i = 0; i < NV; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
  }
}

template <int NV>
void ScoresOf(FoldState& s, const KeyBlock& b) {
  switch (b.tk) {
    case Elem::kF32: return Scores<NV, Elem::kF32>(s, b);
    case Elem::kF16: return Scores<NV, Elem::kF16>(s, b);
    case Elem::kBF16: return Scores<NV, Elem::kBF16>(s, b);
    case Elem::kQ8_0: return Scores<NV, Elem::kQ8_0>(s, b);
    case Elem::kQ4_0: return Scores<NV, Elem::kQ4_0>(s, b);
    case Elem::kQ5_0: return Scores<NV, Elem::kQ5_0>(s, b);
  }
}

template <int NV>
void ValuesOf(FoldState& s, const KeyBlock& b) {
  switch (b.tv) {
    case Elem::kF32: return Values<NV, Elem::kF32>(s, b);
    case Elem::kF16: return Values<NV, Elem::kF16>(s, b);
    case Elem::kBF16: return Values<NV, Elem::kBF16>(s, b);
    case Elem::kQ8_0: return Values<NV, Elem::kQ8_0>(s, b);
    case Elem::kQ4_0: return Values<NV, Elem::kQ4_0>(s, b);
    case Elem::kQ5_0: return Values<NV, Elem::kQ5_0>(s, b);
  }
}

template <int NV>
void ScoresIntOf(FoldState& s, const KeyBlock& b) {
  switch (b.tk) {
    case Elem::kQ8_0: return ScoresInt<NV, Elem::kQ8_0>(s, b);
    case Elem::kQ4_0: return ScoresInt<NV, Elem::kQ4_0>(s, b);
    case Elem::kQ5_0: return ScoresInt<NV, Elem::kQ5_0>(s, b);
    default: return ScoresOf<NV>(s, b);
  }
}

template <int NV>
void FoldNV(FoldState& s, const KeyBlock& b) {
  // Cached keys (no rotation row) of a block type: the integer path, four
  // keys at a time up to head size 128; else key by key.
  const bool integer = IsBlockType(b.tk) && b.n > 0 && b.cos[0] == nullptr;
  if (integer && s.q8_of != s.q) QuantizeQuery(s, 32);
  if (integer && NV <= 8) ScoresIntOf<NV>(s, b);
  else ScoresOf<NV>(s, b);
  ValuesOf<NV>(s, b);
}

}  // namespace

void FoldQuantAvx512(FoldState& s, const KeyBlock& b) {
  if (b.qblock != 32 && (IsBlockType(b.tk) || IsBlockType(b.tv))) return FoldScalar(s, b);
  switch (s.head_dim) {
    case 32: return FoldNV<2>(s, b);
    case 64: return FoldNV<4>(s, b);
    case 96: return FoldNV<6>(s, b);
    case 128: return FoldNV<8>(s, b);
    case 256: return FoldNV<16>(s, b);
    default: return FoldScalar(s, b);
  }
}

}  // namespace rotor::attn
