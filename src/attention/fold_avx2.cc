// AVX2 online-softmax fold for any mix of K/V element types (f32, f16, bf16,
// q8_0, q4_0, q5_0 in blocks of 8, 16 or 32) and head sizes a multiple of 8
// up to 256. Block-type keys under cached RoPE are scored by integer dot
// products with the query quantized once per head (QuantizeQuery), exact in
// int32 (no VNNI in AVX2): blocks of 32 eight keys at a time by
// fold_avx2_cached.cc; blocks of 8 and 16 by vpmaddwd on 16 int8 of q and k
// sign-extended to int16; each block's sum scaled by its d_k * d_q.
// Block-type keys to rotate (deferred RoPE) in blocks of 32 are scored by
// pair products (fold_pairs_avx2.cc). Other keys to rotate
// (deferred RoPE, adjacent pairs) and the float types are decoded into f32
// registers and rotated there; V heads are decoded in registers into the
// accumulators (the nibble types by their unsigned quants, the offset taken
// off once per block of keys), once for up to 4 query heads of a KV head
// (GQA: each head's sums in the same order as alone). No decoded copy of a K or V row is ever
// written. Block-type keys stored rotated (cached RoPE) in blocks of 32 are
// scored by fold_avx2_cached.cc, eight keys at a time.
//
// The loops run over the head size at run time (eight values per vector),
// not unrolled per head size as the AVX-512 folds: AVX2 has 16 registers,
// too few to hold a whole head of 128 and its accumulators anyway.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

namespace rotor::attn {
namespace {

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use
constexpr int kHeads = 4;   // query heads scored together per decoded key head

// The V pass walks the block head by head, a stride of a row between keys
// that the hardware prefetchers do not follow: fetch key j's V row while its
// K row is used, and key j + kAheadK's K row.
inline void Prefetch(const KeyBlock& b, int j, int k_bytes, int v_bytes) {
  for (int o = 0; o < v_bytes; o += 64)
    _mm_prefetch(static_cast<const char*>(b.v[j]) + o, _MM_HINT_T0);
  if (j + kAheadK < b.n)
    for (int o = 0; o < k_bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(b.k[j + kAheadK]) + o, _MM_HINT_T0);
}

// Key values e.. of a head stored centered and scaled (kc, ks: the head's
// [head_dim] centers and half-widths; FoldState::k_center), read back.
inline __m256 Uncenter(__m256 x, const float* kc, const float* ks, int e) {
  return _mm256_fmadd_ps(x, _mm256_loadu_ps(ks + e), _mm256_loadu_ps(kc + e));
}

// Raw q.k of query heads [h0, h0 + G) with key j's head `head`, decoded
// eight values at a time (read back through kc / ks when given) and rotated
// by cr / sr ([head_dim] each) when given; two accumulators per query head.
template <Elem T, int B, int G>
void DotFloat(FoldState& s, const uint8_t* head, const float* cr, const float* sr, const float* kc,
              const float* ks, int h0, int j) {
  const int hd = s.head_dim;
  auto key = [&](int e) {
    __m256 x = Load8<T, B>(head, e);
    if (ks != nullptr) x = Uncenter(x, kc, ks, e);
    if (cr == nullptr) return x;
    const __m256 sw = _mm256_permute_ps(x, 0xB1);  // swap the lanes of each pair
    return _mm256_fmadd_ps(_mm256_loadu_ps(cr + e), x, _mm256_mul_ps(_mm256_loadu_ps(sr + e), sw));
  };
  __m256 a0[G], a1[G];
  for (int u = 0; u < G; ++u) a0[u] = a1[u] = _mm256_setzero_ps();
  int e = 0;
  for (; e + 16 <= hd; e += 16) {
    const __m256 x0 = key(e), x1 = key(e + 8);
    for (int u = 0; u < G; ++u) {
      const float* q = s.q + static_cast<size_t>(h0 + u) * hd + e;
      a0[u] = _mm256_fmadd_ps(_mm256_loadu_ps(q), x0, a0[u]);
      a1[u] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), x1, a1[u]);
    }
  }
  if (e < hd) {
    const __m256 x0 = key(e);
    for (int u = 0; u < G; ++u)
      a0[u] =
          _mm256_fmadd_ps(_mm256_loadu_ps(s.q + static_cast<size_t>(h0 + u) * hd + e), x0, a0[u]);
  }
  for (int u = 0; u < G; ++u) s.scores[(h0 + u) * kBlock + j] = Hsum(_mm256_add_ps(a0[u], a1[u]));
}

// The same for a block-type key head without rotation: integer dot products
// of 16 elements at a time (the last 8 alone when head_dim % 16 == 8), lanes
// 0-3 of a product from elements [e, e + 8), lanes 4-7 from [e + 8, e + 16),
// each group scaled by its block's d_k * d_q (the integers are exact).
template <Elem T, int B, int G>
void DotInt(FoldState& s, const uint8_t* head, int h0, int j) {
  const int hd = s.head_dim, nb = hd / B;
  __m256 acc[G];
  for (int u = 0; u < G; ++u) acc[u] = _mm256_setzero_ps();
  for (int e = 0; e < hd; e += 16) {
    const bool two = e + 8 < hd;
    const uint64_t k0 = Ints8<T, B>(head, e), k1 = two ? Ints8<T, B>(head, e + 8) : 0;
    const __m256i k16 = _mm256_cvtepi8_epi16(
        _mm_set_epi64x(static_cast<long long>(k1), static_cast<long long>(k0)));
    const float d0 = Scale<T, B>(head, e), d1 = two ? Scale<T, B>(head, e + 8) : 0.f;
    for (int u = 0; u < G; ++u) {
      const int8_t* q = s.q8 + static_cast<size_t>(h0 + u) * hd + e;
      const float* qd = s.q8d + static_cast<size_t>(h0 + u) * nb * 8;  // block b's at [8 b]
      const __m128i qv = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(q))
                             : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
      const __m256i dot = _mm256_madd_epi16(_mm256_cvtepi8_epi16(qv), k16);
      const __m256 sc = _mm256_set_m128(_mm_set1_ps(two ? d1 * qd[(e + 8) / B * 8] : 0.f),
                                        _mm_set1_ps(d0 * qd[e / B * 8]));
      acc[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc[u]);
    }
  }
  for (int u = 0; u < G; ++u) s.scores[(h0 + u) * kBlock + j] = Hsum(acc[u]);
}

// Raw q.k of every key and query head into s.scores (unscaled).
template <Elem T, int B>
void Scores(FoldState& s, const KeyBlock& b) {
  const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  if constexpr (IsBlockType(T)) {
    bool integer = false;
    for (int j = 0; j < b.n; ++j) integer |= b.cos[j] == nullptr;
    if (integer && s.q8_of != s.q) QuantizeQuery(s, B);
  }
  for (int j = 0; j < b.n; ++j) {
    Prefetch(b, j, k_bytes, v_bytes);
    const float* cr = b.cos[j];
    const float* sr = b.sin[j];
    if (cr != nullptr && b.cos2[j] != nullptr) {  // angle addition of the two levels
      float* c = s.cs;
      float* sn = s.cs + hd;
      for (int e = 0; e < hd; e += 8) {
        const __m256 c1 = _mm256_loadu_ps(cr + e), s1 = _mm256_loadu_ps(sr + e);
        const __m256 c2 = _mm256_loadu_ps(b.cos2[j] + e), s2 = _mm256_loadu_ps(b.sin2[j] + e);
        _mm256_storeu_ps(c + e, _mm256_fnmadd_ps(s1, s2, _mm256_mul_ps(c1, c2)));
        _mm256_storeu_ps(sn + e, _mm256_fmadd_ps(c1, s2, _mm256_mul_ps(s1, c2)));
      }
      cr = c, sr = sn;
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      const uint8_t* head =
          static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
      const float* kc = s.k_center == nullptr ? nullptr : s.k_center + static_cast<size_t>(g) * hd;
      const float* ks = s.k_scale == nullptr ? nullptr : s.k_scale + static_cast<size_t>(g) * hd;
      for (int h0 = g * group; h0 < (g + 1) * group; h0 += kHeads) {
        const int n = std::min(kHeads, (g + 1) * group - h0);
        // The kernel for n heads at once, n a template argument.
        auto run = [&](auto kernel) {
          switch (n) {
            case 1: return kernel(std::integral_constant<int, 1>{});
            case 2: return kernel(std::integral_constant<int, 2>{});
            case 3: return kernel(std::integral_constant<int, 3>{});
            default: return kernel(std::integral_constant<int, 4>{});
          }
        };
        // (Block-type keys in blocks of 32 are scored by ScoresCachedAvx2
        // when stored rotated and by the pair products when deferred: these
        // dots serve them only where those decline.)
        if constexpr (IsBlockType(T)) {
          if (cr == nullptr && ks == nullptr)
            run([&](auto g) { DotInt<T, B, decltype(g)::value>(s, head, h0, j); });
          else
            run([&](auto g) {
              DotFloat<T, B, decltype(g)::value>(s, head, cr, sr, kc, ks, h0, j);
            });
        } else {
          run([&](auto g) { DotFloat<T, B, decltype(g)::value>(s, head, cr, sr, kc, ks, h0, j); });
        }
      }
    }
  }
}

// Elements [e0, e0 + 8 C) of one query head's accumulators: acc * corr +
// sum_j p[j] * v_j, the V heads decoded in registers (v0: the head's byte
// offset in a V row).
template <Elem T, int B, int C>
void AccumulateV(const KeyBlock& b, const float* p, size_t v0, int e0, __m256 corr, float* acc) {
  __m256 a[C];
  for (int i = 0; i < C; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + e0 + 8 * i), corr);
  for (int j = 0; j < b.n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint8_t* head = static_cast<const uint8_t*>(b.v[j]) + v0;
    for (int i = 0; i < C; ++i) a[i] = _mm256_fmadd_ps(pj, Load8<T, B>(head, e0 + 8 * i), a[i]);
  }
  for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc + e0 + 8 * i, a[i]);
}

// The 8 bytes at p in the low half of a vector.
inline __m128i Load64(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

// Group sharing (GQA): the query heads of one KV head read the same V rows.
// A pass takes up to kGroupV of them: each key's V values are decoded once
// and folded into every head's accumulators, 16 values at a time. Each
// accumulator lane sees the same operations in the same order as in the
// one-head kernels (acc * corr, then one fma per key in key order, then
// the offset), so a head's result does not depend on its group (but for
// the order in which the nibble types' weights are summed for the offset:
// alone, a head reads the block scales beside the values, AccumulateV32).
constexpr int kGroupV = 4;

// AccumulateV for G query heads at once (p: [G, kBlock] their weights, acc:
// [G] their accumulators): elements [e0, e0 + 8 C), C = 1 or 2.
template <Elem T, int B, int G, int C>
void AccumulateVGroup(const KeyBlock& b, const float (*p)[kBlock], size_t v0, int e0,
                      const float* corr, float* const* acc) {
  __m256 a[G][C];
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < C; ++i)
      a[u][i] = _mm256_mul_ps(_mm256_loadu_ps(acc[u] + e0 + 8 * i), _mm256_set1_ps(corr[u]));
  for (int j = 0; j < b.n; ++j) {
    const uint8_t* head = static_cast<const uint8_t*>(b.v[j]) + v0;
    __m256 x[C];
    for (int i = 0; i < C; ++i) x[i] = Load8<T, B>(head, e0 + 8 * i);
    for (int u = 0; u < G; ++u) {
      const __m256 pj = _mm256_set1_ps(p[u][j]);
      for (int i = 0; i < C; ++i) a[u][i] = _mm256_fmadd_ps(pj, x[i], a[u][i]);
    }
  }
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc[u] + e0 + 8 * i, a[u][i]);
}

// Elements [8 r, 8 r + 8) of a 32-element block of block type T as int32:
// q8_0's integers, the nibble types' unsigned quants n (as AccumulateV32).
// q5_0's fifth bits come from qh broadcast to every lane, each lane masking
// its own bit and clamping it to 16 (vpminud), instead of expanding all 32
// into bytes first and extracting quarters (Unsigned32): the same integers
// with fewer cross-lane shuffles, and about a quarter fewer V-pass samples
// (docs/BENCHMARKS.md, "q5_0's V pass without cross-lane shuffles").
template <Elem T>
inline __m256i Quarter(const uint8_t* blk, int r) {
  if constexpr (T == Elem::kQ8_0) {
    return _mm256_cvtepi8_epi32(Load64(blk + 2 + 8 * r));
  } else {
    // byte i of qs: n of element i (low nibble), i + 16 (high nibble)
    constexpr int qs = T == Elem::kQ5_0 ? 6 : 2;
    const __m256i z = _mm256_cvtepu8_epi32(Load64(blk + qs + 8 * (r & 1)));
    const __m256i n = r < 2 ? _mm256_and_si256(z, _mm256_set1_epi32(15)) : _mm256_srli_epi32(z, 4);
    if constexpr (T == Elem::kQ4_0) return n;
    // Element 8 r + i's fifth bit is bit 8 r + i of qh. Quarter 0 reads qh
    // shifted up by 4, the others as it is, so every lane's mask is >= 16:
    // min(qh & mask, 16) is 16 where the bit is set and 0 where it is not.
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const int shift = r == 0 ? 4 : 8 * r;
    const __m256i mask = _mm256_sllv_epi32(_mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128),
                                           _mm256_set1_epi32(shift));
    __m256i bits = _mm256_set1_epi32(static_cast<int>(qh));
    if (r == 0) bits = _mm256_slli_epi32(bits, 4);
    return _mm256_or_si256(n, _mm256_min_epu32(_mm256_and_si256(bits, mask), _mm256_set1_epi32(16)));
  }
}

// AccumulateV for blocks of 32 (C a multiple of 4): each block's integers
// decoded once and multiplied by the key's weight p[j] times the block's
// scale, read beside them (with a table of the scales gathered first, the
// V pass took about 16% more samples: the gather is the first touch of
// each row's head). The nibble types
// accumulate their unsigned quants n (q = n - offset), and offset * (the
// sum of the weights) comes off once at the end.
template <Elem T, int C>
void AccumulateV32(const KeyBlock& b, const float* p, size_t v0, int e0, __m256 corr, float* acc) {
  __m256 a[C];
  float wsum[C / 4] = {};
  for (int i = 0; i < C; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + e0 + 8 * i), corr);
  for (int j = 0; j < b.n; ++j) {
    const uint8_t* head = static_cast<const uint8_t*>(b.v[j]) + v0;
    for (int k = 0; k < C / 4; ++k) {
      const uint8_t* blk = head + (e0 / 32 + k) * BlockBytes<T, 32>();
      const float w = p[j] * Scale<T, 32>(blk, 0);
      if constexpr (QuantOffset<T>() != 0) wsum[k] += w;
      const __m256 wj = _mm256_set1_ps(w);
      for (int r = 0; r < 4; ++r)
        a[4 * k + r] = _mm256_fmadd_ps(wj, _mm256_cvtepi32_ps(Quarter<T>(blk, r)), a[4 * k + r]);
    }
  }
  if constexpr (QuantOffset<T>() != 0)
    for (int k = 0; k < C / 4; ++k) {
      const __m256 off = _mm256_set1_ps(QuantOffset<T>() * wsum[k]);
      for (int r = 0; r < 4; ++r) a[4 * k + r] = _mm256_sub_ps(a[4 * k + r], off);
    }
  for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc + e0 + 8 * i, a[i]);
}

// AccumulateV32 for G query heads at once: elements [e0, e0 + 16) (e0 % 16
// == 0: half of block e0 / 32); w: [G, hd / 32, kBlock] and wsum: [G,
// hd / 32] each head's BlockWeights.
template <Elem T, int G>
void AccumulateV32Group(const KeyBlock& b, const float* w, const float* wsum, int nb, size_t v0,
                        int e0, const float* corr, float* const* acc) {
  const int k = e0 / 32, r0 = e0 % 32 / 8;
  __m256 a[G][2];
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < 2; ++i)
      a[u][i] = _mm256_mul_ps(_mm256_loadu_ps(acc[u] + e0 + 8 * i), _mm256_set1_ps(corr[u]));
  for (int j = 0; j < b.n; ++j) {
    const uint8_t* blk = static_cast<const uint8_t*>(b.v[j]) + v0 + k * BlockBytes<T, 32>();
    const __m256 x0 = _mm256_cvtepi32_ps(Quarter<T>(blk, r0));
    const __m256 x1 = _mm256_cvtepi32_ps(Quarter<T>(blk, r0 + 1));
    for (int u = 0; u < G; ++u) {
      const __m256 wj = _mm256_broadcast_ss(w + (static_cast<size_t>(u) * nb + k) * kBlock + j);
      a[u][0] = _mm256_fmadd_ps(wj, x0, a[u][0]);
      a[u][1] = _mm256_fmadd_ps(wj, x1, a[u][1]);
    }
  }
  if constexpr (QuantOffset<T>() != 0)
    for (int u = 0; u < G; ++u) {
      const __m256 off = _mm256_set1_ps(QuantOffset<T>() * wsum[u * nb + k]);
      for (int i = 0; i < 2; ++i) a[u][i] = _mm256_sub_ps(a[u][i], off);
    }
  for (int u = 0; u < G; ++u)
    for (int i = 0; i < 2; ++i) _mm256_storeu_ps(acc[u] + e0 + 8 * i, a[u][i]);
}

// The scales of block k of V head g of keys [c, c + 8) of the block (past
// b.n: the last key's).
template <Elem T>
inline __m256 Scales8(const KeyBlock& b, int g, int k, int c) {
  const uint8_t* blk[8];  // block k of V head g of the eight keys (its d first)
  for (int i = 0; i < 8; ++i)
    blk[i] = static_cast<const uint8_t*>(b.v[std::min(c + i, b.n - 1)]) +
             static_cast<size_t>(g) * b.v_head_bytes + k * BlockBytes<T, 32>();
  return F16x8(blk);
}

// The scales of every block of V head g of the block's keys: [hd / 32,
// kBlock] into dv, gathered once for the query heads that share the KV head.
template <Elem T>
void BlockScales(const KeyBlock& b, int g, int hd, float* dv) {
  for (int k = 0; k < hd / 32; ++k)
    for (int c = 0; c < b.n; c += 8) _mm256_store_ps(dv + k * kBlock + c, Scales8<T>(b, g, k, c));
}

// w [hd / 32, kBlock] of AccumulateV32Group: p[j] times the scale of key
// j's block k (dv: BlockScales; past b.n p is 0); wsum [hd / 32]: the sums
// of w's rows.
inline void BlockWeights(const KeyBlock& b, const float* p, const float* dv, int hd, float* w,
                         float* wsum) {
  for (int k = 0; k < hd / 32; ++k) {
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < b.n; c += 8) {
      const __m256 wv = _mm256_mul_ps(_mm256_load_ps(dv + k * kBlock + c), _mm256_load_ps(p + c));
      _mm256_store_ps(w + k * kBlock + c, wv);
      sum = _mm256_add_ps(sum, wv);
    }
    wsum[k] = Hsum(sum);
  }
}

// The softmax of head h's scores in the block: the scores scaled in place,
// the running max and sum updated, exp(score - max) of each key into p
// (zero past b.n); returns the factor the accumulators take (0 on the first
// block).
inline float Softmax(FoldState& s, const KeyBlock& b, int h, float* p) {
  const __m256 scale = _mm256_set1_ps(s.scale);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  // Vectors of 8 keys; the lanes past b.n are in the scratch row (kBlock
  // wide) but hold no score: read and written whole (masked loads and
  // stores are slow on AMD), then masked out of the max and the weights.
  float* sc = s.scores + h * kBlock;
  __m256 vmax = neg_inf;
  for (int c = 0; c < b.n; c += 8) {
    const __m256i valid = FirstLanes(b.n - c);
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(sc + c), scale);
    _mm256_storeu_ps(sc + c, x);
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, x, _mm256_castsi256_ps(valid)));
  }
  const float new_max = std::max(s.m[h], Hmax(vmax));
  const float corr = std::exp(s.m[h] - new_max);  // 0 on the first block (m = -inf)
  const __m256 vm = _mm256_set1_ps(new_max);
  __m256 vsum = _mm256_setzero_ps();
  for (int c = 0; c < b.n; c += 8) {
    const __m256i valid = FirstLanes(b.n - c);
    const __m256 e = _mm256_and_ps(Exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + c), vm)),
                                   _mm256_castsi256_ps(valid));
    _mm256_store_ps(p + c, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  s.l[h] = s.l[h] * corr + Hsum(vsum);
  s.m[h] = new_max;
  return corr;
}

// The V rows of G query heads [h0, h0 + G) of one KV head into their
// accumulators (G > 1: AccumulateV32Group / AccumulateVGroup; G = 1: the
// one-head kernels, 64 values per pass; kWide, block-type V in blocks of
// 32: their 512-bit versions, fold_values_avx512.cc).
template <Elem T, int B, int G, bool kWide>
void ValuesOfHeads(FoldState& s, const KeyBlock& b, int h0, const float (*p)[kBlock],
                   const float* corr, const float* dv) {  // dv: BlockScales (G > 1)
  const int hd = s.head_dim;
  const int g = h0 / (s.n_head / s.n_head_kv);
  const size_t v0 = static_cast<size_t>(g) * b.v_head_bytes;
  float* acc[G];
  for (int u = 0; u < G; ++u) acc[u] = s.acc + static_cast<size_t>(h0 + u) * hd;
  int e0 = 0;
  if constexpr (IsBlockType(T) && B == 32) {  // hd % 32 == 0
    if constexpr (G == 1 && kWide) {
      AccumulateV32Avx512<T>(b, p[0], v0, hd, corr[0], acc[0]);
    } else if constexpr (G == 1) {
      const __m256 vcorr = _mm256_set1_ps(corr[0]);
      for (; e0 + 64 <= hd; e0 += 64) AccumulateV32<T, 8>(b, p[0], v0, e0, vcorr, acc[0]);
      if (e0 < hd) AccumulateV32<T, 4>(b, p[0], v0, e0, vcorr, acc[0]);
    } else {
      alignas(32) float w[G * 256 / 32 * kBlock];  // [G, hd / 32, kBlock] BlockWeights
      float wsum[G * 256 / 32];                     // [G, hd / 32] their sums
      const int nb = hd / 32;
      for (int u = 0; u < G; ++u)
        BlockWeights(b, p[u], dv, hd, w + static_cast<size_t>(u) * nb * kBlock, wsum + u * nb);
      if constexpr (kWide)
        AccumulateV32GroupAvx512<T, G>(b, w, wsum, v0, hd, corr, acc);
      else
        for (; e0 < hd; e0 += 16) AccumulateV32Group<T, G>(b, w, wsum, nb, v0, e0, corr, acc);
    }
  } else if constexpr (G == 1) {
    const __m256 vcorr = _mm256_set1_ps(corr[0]);
    for (; e0 + 64 <= hd; e0 += 64) AccumulateV<T, B, 8>(b, p[0], v0, e0, vcorr, acc[0]);
    if (e0 + 32 <= hd) AccumulateV<T, B, 4>(b, p[0], v0, e0, vcorr, acc[0]), e0 += 32;
    if (e0 + 16 <= hd) AccumulateV<T, B, 2>(b, p[0], v0, e0, vcorr, acc[0]), e0 += 16;
    if (e0 + 8 <= hd) AccumulateV<T, B, 1>(b, p[0], v0, e0, vcorr, acc[0]);
  } else {
    for (; e0 + 16 <= hd; e0 += 16) AccumulateVGroup<T, B, G, 2>(b, p, v0, e0, corr, acc);
    if (e0 < hd) AccumulateVGroup<T, B, G, 1>(b, p, v0, e0, corr, acc);
  }
}

// The softmax of the block's scores and the V rows into the accumulators,
// the query heads of each KV head up to kGroupV at a time.
template <Elem T, int B, bool kWide>
void Values(FoldState& s, const KeyBlock& b) {
  alignas(64) float p[kGroupV][kBlock];  // exp(score - max) of each key, per head of a pass
  alignas(32) float dv[256 / 32 * kBlock];  // [hd / 32, kBlock] BlockScales of the KV head
  float corr[kGroupV];
  const int group = s.n_head / s.n_head_kv;
  for (int g = 0; g < s.n_head_kv; ++g) {
    // Query heads that share the KV head share a table of its scales (one
    // head alone reads them beside its V rows: AccumulateV32).
    if constexpr (IsBlockType(T) && B == 32)
      if (group > 1) BlockScales<T>(b, g, s.head_dim, dv);
    for (int h0 = g * group; h0 < (g + 1) * group; h0 += kGroupV) {
      const int n = std::min(kGroupV, (g + 1) * group - h0);
      for (int u = 0; u < n; ++u)
        corr[u] = kWide ? SoftmaxAvx512(s, b, h0 + u, p[u]) : Softmax(s, b, h0 + u, p[u]);
      switch (n) {
        case 1:
          ValuesOfHeads<T, B, 1, kWide>(s, b, h0, p, corr, dv);
          break;
        case 2:
          ValuesOfHeads<T, B, 2, kWide>(s, b, h0, p, corr, dv);
          break;
        case 3:
          ValuesOfHeads<T, B, 3, kWide>(s, b, h0, p, corr, dv);
          break;
        default:
          ValuesOfHeads<T, B, 4, kWide>(s, b, h0, p, corr, dv);
          break;
      }
    }
  }
}

// The block size of a block type as a template argument (the float types
// take any: unused).
template <Elem T, template <Elem, int> class F>
void WithBlock(FoldState& s, const KeyBlock& b) {
  if constexpr (!IsBlockType(T)) {
    F<T, 32>::Run(s, b);
  } else {
    switch (b.qblock) {
      case 8: return F<T, 8>::Run(s, b);
      case 16: return F<T, 16>::Run(s, b);
      default: return F<T, 32>::Run(s, b);
    }
  }
}

template <template <Elem, int> class F>
void WithType(Elem t, FoldState& s, const KeyBlock& b) {
  switch (t) {
    case Elem::kF32: return WithBlock<Elem::kF32, F>(s, b);
    case Elem::kF16: return WithBlock<Elem::kF16, F>(s, b);
    case Elem::kBF16: return WithBlock<Elem::kBF16, F>(s, b);
    case Elem::kQ8_0: return WithBlock<Elem::kQ8_0, F>(s, b);
    case Elem::kQ4_0: return WithBlock<Elem::kQ4_0, F>(s, b);
    case Elem::kQ5_0: return WithBlock<Elem::kQ5_0, F>(s, b);
  }
}

template <Elem T, int B>
struct ScoresFn {
  static void Run(FoldState& s, const KeyBlock& b) { Scores<T, B>(s, b); }
};
template <Elem T, int B>
struct ValuesFn {
  static void Run(FoldState& s, const KeyBlock& b) { Values<T, B, false>(s, b); }
};
// AVX-512 machines: block-type V in blocks of 32 on 512-bit vectors.
template <Elem T, int B>
struct ValuesWideFn {
  static void Run(FoldState& s, const KeyBlock& b) { Values<T, B, true>(s, b); }
};

template <bool kVnni>
void Fold(FoldState& s, const KeyBlock& b) {
  const bool blocks = IsBlockType(b.tk) || IsBlockType(b.tv);
  const bool block_ok = b.qblock == 8 || b.qblock == 16 || b.qblock == 32;
  if (s.head_dim % 8 != 0 || s.head_dim > 256 || (blocks && !block_ok) || b.n == 0)
    return FoldScalar(s, b);
  bool scored = s.k_scale == nullptr && (kVnni ? ScoresCachedVnni(s, b) : ScoresCachedAvx2(s, b));
  if (!scored && kVnni && s.n_head >= 4 * s.n_head_kv && PairScored(s, b))
    scored = ScoresDecodedAvx512(s, b);  // a GQA group shares each key's decode
  if (!scored) scored = kVnni ? ScoresPairsAvx512(s, b) : ScoresPairsAvx2(s, b);
  if (!scored && kVnni) scored = ScoresFloatAvx512(s, b);  // float keys, 16 sums at once
  if (!scored) WithType<ScoresFn>(b.tk, s, b);
  if constexpr (kVnni)
    WithType<ValuesWideFn>(b.tv, s, b);
  else
    WithType<ValuesFn>(b.tv, s, b);
}

}  // namespace

void FoldAvx2(FoldState& s, const KeyBlock& b) { Fold<false>(s, b); }
void FoldAvx2Vnni(FoldState& s, const KeyBlock& b) { Fold<true>(s, b); }

void LaneWeightsAvx2(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                     const float* l, float* out) {
  for (int k = 0; k < n_keys; k += 8) {
    const __m256i valid = FirstLanes(n_keys - k);
    __m256 p = _mm256_setzero_ps();
    for (int h = 0; h < n_heads; ++h) {
      const __m256 x =
          _mm256_sub_ps(_mm256_maskload_ps(scores + h * stride + k, valid), _mm256_set1_ps(m[h]));
      // Exp8 clamps at -87; below it the weight is 0, as expf's underflow
      // (policies compare weights: a tie must stay a tie).
      const __m256 e = _mm256_and_ps(Exp8(x), _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
      p = _mm256_fmadd_ps(e, _mm256_set1_ps(1.0f / l[h]), p);
    }
    _mm256_maskstore_ps(out + k, valid, p);
  }
}

}  // namespace rotor::attn
