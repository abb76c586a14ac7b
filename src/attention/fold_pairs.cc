// Pair products of deferred block-type keys (fold.h, "Pair products"): the
// query's factors, which blocks take them, and the scalar reference of the
// scores, step for step as the vector paths (fold_pairs_avx2.cc,
// fold_pairs_avx512.cc) take them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "attention/fold.h"
#include "base/check.h"
#include "kv/kv_quant.h"

namespace rotor::attn {

namespace {

// x rounded to the nearest integer, ties to even (std::lrint in the default
// rounding mode), as int16. x86-64 takes cvtss2si inline, where GCC calls
// lrintf out of line (with the block's factors in a local array, this
// function went from 2.7% to 1.6% of a deferred q4_0 fold's samples); NaN
// gives lrint's value there too.
inline int16_t RoundToInt16(float x) {
#if defined(__SSE2__)
  return static_cast<int16_t>(_mm_cvtss_si32(_mm_set_ss(x)));
#else
  return static_cast<int16_t>(std::lrint(x));
#endif
}

}  // namespace

void PreparePairQuery(FoldState& s) {
  CHECK(s.qp != nullptr);
  const int hd = s.head_dim, group = s.n_head / s.n_head_kv, stride = PairStride(hd);
  for (int h = 0; h < s.n_head; ++h) {
    const int g = h / group;
    const float* q = s.q + static_cast<size_t>(h) * hd;
    const float* kc = s.k_center == nullptr ? nullptr : s.k_center + static_cast<size_t>(g) * hd;
    const float* ks = s.k_scale == nullptr ? nullptr : s.k_scale + static_cast<size_t>(g) * hd;
    float* out = s.qp + static_cast<size_t>(h) * stride;
    int16_t* qi = reinterpret_cast<int16_t*>(out);  // block k: u at [64 k], w at [64 k + 32]
    float* ab = out + hd;                           // block k: alpha at [32 k], beta at [32 k + 16]
    for (int k = 0; k < hd / 32; ++k) {
      float u[32], w[32];  // the block's factors before rounding
      float amax = 0.f;
      for (int a = 32 * k; a < 32 * k + 32; a += 2) {
        const float sa = ks == nullptr ? 1.f : ks[a], sb = ks == nullptr ? 1.f : ks[a + 1];
        const int e = a - 32 * k;
        u[e] = q[a] * sa, u[e + 1] = q[a + 1] * sb;
        w[e] = -q[a + 1] * sa, w[e + 1] = q[a] * sb;
      }
      for (int e = 0; e < 32; ++e) amax = std::max({amax, std::fabs(u[e]), std::fabs(w[e])});
      const float qs = amax > 0.f ? amax / 32767.f : 1.f;
      for (int e = 0; e < 32; ++e) {
        qi[64 * k + e] = RoundToInt16(u[e] / qs);
        qi[64 * k + 32 + e] = RoundToInt16(w[e] / qs);
      }
      for (int i = 0; i < 16; ++i) {
        const int a = 32 * k + 2 * i;
        const float ca = kc == nullptr ? 0.f : kc[a], cb = kc == nullptr ? 0.f : kc[a + 1];
        ab[32 * k + i] = q[a] * ca + q[a + 1] * cb;
        ab[32 * k + 16 + i] = q[a] * cb - q[a + 1] * ca;
      }
      out[2 * hd + k] = qs;
    }
  }
  s.qp_of = s.q;
}

bool PairScored(const FoldState& s, const KeyBlock& b) {
  if (!IsBlockType(b.tk) || b.qblock != 32 || s.head_dim % 32 != 0 || !s.normal_pairs || b.n == 0)
    return false;
  for (int j = 0; j < b.n; ++j)
    if (b.cos[j] == nullptr) return false;
  return true;
}

namespace {

// The sum of a block's 16 lane accumulators in the vector paths' order:
// lanes i and i + 8, then i and i + 4 of those, then (0 + 2) + (1 + 3).
float PairSum(const float (&acc)[16]) {
  float w[8], t[4];
  for (int i = 0; i < 8; ++i) w[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) t[i] = w[i] + w[i + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

}  // namespace

void ScoresPairsScalar(FoldState& s, const KeyBlock& b) {
  if (s.qp_of != s.q) PreparePairQuery(s);
  const int hd = s.head_dim, nb = hd / 32, group = s.n_head / s.n_head_kv, stride = PairStride(hd);
  const KvType tk = static_cast<KvType>(b.tk);
  const size_t block_bytes = KvBlockBytes(tk, 32);
  thread_local std::vector<float> cr, sr;  // [head_dim / 2] the key's rotation, one per pair
  thread_local std::vector<int8_t> x;      // [head_dim] one key head's integers
  thread_local std::vector<float> dk;      // [head_dim / 32] its blocks' scales
  cr.resize(hd / 2);
  sr.resize(hd / 2);
  x.resize(hd);
  dk.resize(nb);
  for (int j = 0; j < b.n; ++j) {
    for (int p = 0; p < hd / 2; ++p) {  // a pair's lanes hold the same cos and opposite sins
      const float c1 = b.cos[j][2 * p], s1 = b.sin[j][2 * p];
      if (b.cos2[j] == nullptr) {
        cr[p] = c1, sr[p] = s1;
      } else {  // angle addition, fused as the vector paths
        const float c2 = b.cos2[j][2 * p], s2 = b.sin2[j][2 * p];
        cr[p] = std::fma(-s1, s2, c1 * c2);
        sr[p] = std::fma(c1, s2, s1 * c2);
      }
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      const uint8_t* head =
          static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
      for (int k = 0; k < nb; ++k)
        dk[k] = KvUnpackBlock(tk, 32, head + k * block_bytes, x.data() + 32 * k);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* f = s.qp + static_cast<size_t>(h) * stride;
        const int16_t* qi = reinterpret_cast<const int16_t*>(f);
        const float* ab = f + hd;
        float acc[16] = {}, acc_s[16] = {};  // per lane: the cosine and the sine terms
        for (int k = 0; k < nb; ++k)
          for (int i = 0; i < 16; ++i) {
            const int e = 32 * k + 2 * i, p = 16 * k + i;
            const int32_t a = qi[64 * k + 2 * i] * x[e] + qi[64 * k + 2 * i + 1] * x[e + 1];
            const int32_t bb = qi[64 * k + 32 + 2 * i] * x[e] + qi[64 * k + 33 + 2 * i] * x[e + 1];
            const float dq = dk[k] * f[2 * hd + k];  // block and query scales
            acc[i] = std::fma(std::fma(static_cast<float>(a), dq, ab[32 * k + i]), cr[p], acc[i]);
            acc_s[i] = std::fma(std::fma(static_cast<float>(bb), dq, ab[32 * k + 16 + i]), sr[p],
                                acc_s[i]);
          }
        for (int i = 0; i < 16; ++i) acc[i] += acc_s[i];
        s.scores[h * kBlock + j] = PairSum(acc);
      }
    }
  }
}

}  // namespace rotor::attn
