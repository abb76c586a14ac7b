// AVX-512 online-softmax fold for any mix of K/V element types (f32, f16,
// bf16, q8_0, q4_0, q5_0) with 32-element quantization blocks (head_dim % 32
// == 0, up to 256). Keys to rotate (deferred RoPE) and the float types are
// decoded into f32 registers and rotated there; V heads are decoded in
// registers into the accumulators. No decoded copy of a K or V row is ever
// written. FoldAvx512 sends block-type keys under cached RoPE to FoldAvx2Vnni
// (integer dot products by VNNI, eight keys at a time: faster on Zen 4 than
// this file's four keys per 512-bit pass were, BENCHMARKS.md); here any key
// is decoded to f32, so every input is still folded correctly. Its scores
// also serve FoldAvx2Vnni for deferred block-type keys of GQA groups of 4 or
// more (ScoresDecodedAvx512): one decode per KV head serves the group.
#include <immintrin.h>

#include "attention/fold.h"
#include "attention/fold_avx512_load.h"
#include "attention/fold_avx512_sum.h"

namespace rotor::attn {
namespace {

constexpr int kAheadK = 4;  // keys whose K row is fetched ahead of its use

// Raw q.k of every key and query head into s.scores (unscaled).
template <int NV, Elem TK>
void Scores(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV;
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
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
      const float* kc = s.k_center == nullptr ? nullptr : s.k_center + static_cast<size_t>(g) * hd;
      const float* ks = s.k_scale == nullptr ? nullptr : s.k_scale + static_cast<size_t>(g) * hd;
      // Values [16 i, 16 i + 16) of the key head, read back (uncentered) when stored centered.
      auto load = [&](int i) {
        const __m512 x = Load16<TK>(head, i);
        if (ks == nullptr) return x;
        return _mm512_fmadd_ps(x, _mm512_loadu_ps(ks + 16 * i), _mm512_loadu_ps(kc + 16 * i));
      };
      if (rotate) {
        for (int i = 0; i < NV; ++i) {
          const __m512 x = load(i);
          const __m512 sw = _mm512_permute_ps(x, 0xB1);  // swap lanes of each pair
          k[i] = _mm512_fmadd_ps(cr[i], x, _mm512_mul_ps(sr[i], sw));
        }
      } else {
        for (int i = 0; i < NV; ++i) k[i] = load(i);
      }
      const auto dot = [&](int h) {
        const float* q = s.q + h * hd;
        __m512 d = _mm512_mul_ps(_mm512_loadu_ps(q), k[0]);
        for (int i = 1; i < NV; ++i) d = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * i), k[i], d);
        return d;
      };
      int h = g * group;
      for (; h + 4 <= (g + 1) * group; h += 4)  // a GQA group's heads four per sum
        Sum4(dot(h), dot(h + 1), dot(h + 2), dot(h + 3), &s.scores[h * kBlock + j],
             &s.scores[(h + 1) * kBlock + j], &s.scores[(h + 2) * kBlock + j],
             &s.scores[(h + 3) * kBlock + j]);
      for (; h < (g + 1) * group; ++h) s.scores[h * kBlock + j] = _mm512_reduce_add_ps(dot(h));
    }
  }
}

// The softmax of the block's scores and the V rows into the accumulators.
template <int NV, Elem TV>
void Values(FoldState& s, const KeyBlock& b) {
  constexpr int hd = 16 * NV;
  const int group = s.n_head / s.n_head_kv;
  alignas(64) float p[kBlock];
  for (int h = 0; h < s.n_head; ++h) {
    const float corr = SoftmaxAvx512(s, b, h, p);
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
void FoldNV(FoldState& s, const KeyBlock& b) {
  if (!ScoresPairsAvx512(s, b)) ScoresOf<NV>(s, b);
  ValuesOf<NV>(s, b);
}

}  // namespace

bool ScoresDecodedAvx512(FoldState& s, const KeyBlock& b) {
  if (b.qblock != 32 && IsBlockType(b.tk)) return false;
  switch (s.head_dim) {
    case 32:
      return ScoresOf<2>(s, b), true;
    case 64:
      return ScoresOf<4>(s, b), true;
    case 96:
      return ScoresOf<6>(s, b), true;
    case 128:
      return ScoresOf<8>(s, b), true;
    case 256:
      return ScoresOf<16>(s, b), true;
    default:
      return false;
  }
}

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
