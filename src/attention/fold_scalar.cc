// Scalar reference of the online-softmax fold: plain loops, any head size,
// rotation layout and K/V element types.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/fold.h"
#include "base/check.h"
#include "kv/kv_quant.h"
#include "ops/quant.h"

namespace rotor::attn {
namespace {

KvType TypeOf(Elem e) { return static_cast<KvType>(e); }

// Head g of a K or V row as f32.
void DecodeHead(Elem t, int head_bytes, int head_dim, const void* row, int g, float* out) {
  KvDequantizeHeads(TypeOf(t), head_dim, 1,
                    static_cast<const uint8_t*>(row) + static_cast<size_t>(g) * head_bytes, out);
}

}  // namespace

void BlockSums(const int8_t* q, int64_t n, int block, int32_t* out) {
  for (int64_t b = 0; b < n / block; ++b) {
    int32_t t = 0;
    for (int i = 0; i < block; ++i) t += q[b * block + i];
    out[b] = t;
  }
}

void QuantizeQuery(FoldState& s, int qblock) {
  const int64_t n = static_cast<int64_t>(s.n_head) * s.head_dim, nb = n / qblock;
  // Every head is a whole number of blocks: one call for all of them (ops'
  // q8_0 rule, vectorized for blocks of 8, 16 and 32), the scales into
  // q8d[0, nb), then each spread to its 8 lanes from the last down (block
  // b's lanes start at 8 b >= b: no scale is overwritten before it is read).
  ops::QuantizeQ8BlocksF32(s.q, n, qblock, s.q8, s.q8d);
  for (int64_t b = nb - 1; b >= 0; --b) {
    const float d = s.q8d[b];
    std::fill_n(s.q8d + b * 8, 8, d);
  }
  CHECK(s.q8s != nullptr);
  BlockSums(s.q8, n, qblock, s.q8s);
  s.q8_of = s.q;
}

void FoldScalar(FoldState& s, const KeyBlock& b) {
  const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
  const int qb = b.qblock, nb = IsBlockType(b.tk) ? hd / qb : 0;
  thread_local std::vector<float> vrow;  // [head_dim] one decoded V head
  thread_local std::vector<int8_t> kq;   // [head_dim] one key head's integers
  thread_local std::vector<float> dk;    // [head_dim / qblock] its blocks' scales
  vrow.resize(hd);
  kq.resize(hd);
  dk.resize(nb);
  // Deferred block-type keys in blocks of 32: pair products, as the fast
  // paths; the loop below scores the other keys one by one.
  const bool pairs = PairScored(s, b);
  if (pairs) {
    ScoresPairsScalar(s, b);
    for (int h = 0; h < s.n_head; ++h)
      for (int j = 0; j < b.n; ++j) s.scores[h * kBlock + j] *= s.scale;
  }
  const int n_by_key = pairs ? 0 : b.n;
  for (int j = 0; j < n_by_key; ++j) {
    const float* cosr = b.cos[j];
    const float* sinr = b.sin[j];
    if (b.cos2[j] != nullptr) {  // angle addition of the two levels
      float* c = s.cs;
      float* sn = s.cs + hd;
      for (int d = 0; d < hd; ++d) {
        c[d] = cosr[d] * b.cos2[j][d] - sinr[d] * b.sin2[j][d];
        sn[d] = sinr[d] * b.cos2[j][d] + cosr[d] * b.sin2[j][d];
      }
      cosr = c, sinr = sn;
    }
    for (int g = 0; g < s.n_head_kv; ++g) {
      if (cosr == nullptr && nb > 0 &&
          s.k_scale == nullptr) {  // integer dot products, block by block
        if (s.q8_of != s.q) QuantizeQuery(s, qb);
        const uint8_t* head = static_cast<const uint8_t*>(b.k[j]) +
                              static_cast<size_t>(g) * b.k_head_bytes;
        const size_t block_bytes = KvBlockBytes(TypeOf(b.tk), qb);
        for (int k = 0; k < nb; ++k)
          dk[k] = KvUnpackBlock(TypeOf(b.tk), qb, head + k * block_bytes, kq.data() + k * qb);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const int8_t* q = s.q8 + static_cast<size_t>(h) * hd;
          float dot = 0.f;
          for (int k = 0; k < nb; ++k) {
            int32_t isum = 0;
            for (int i = 0; i < qb; ++i) isum += q[k * qb + i] * kq[k * qb + i];
            dot += dk[k] * s.q8d[static_cast<size_t>(h) * nb * 8 + k * 8] * static_cast<float>(isum);
          }
          s.scores[h * kBlock + j] = dot * s.scale;
        }
        continue;
      }
      DecodeHead(b.tk, b.k_head_bytes, hd, b.k[j], g, vrow.data());
      if (s.k_scale != nullptr) {  // stored centered and scaled: read back
        const float* kc = s.k_center + static_cast<size_t>(g) * hd;
        const float* ks = s.k_scale + static_cast<size_t>(g) * hd;
        for (int d = 0; d < hd; ++d) vrow[d] = std::fma(vrow[d], ks[d], kc[d]);
      }
      if (cosr != nullptr) {  // deferred: rotate the key by -distance
        for (int d = 0; d < hd; ++d)
          s.k_rot[d] = cosr[d] * vrow[d] + sinr[d] * vrow[s.partner[d]];
      } else {
        std::copy(vrow.begin(), vrow.end(), s.k_rot);
      }
      const float* k = s.k_rot;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* q = s.q + h * hd;
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
        s.scores[h * kBlock + j] = dot * s.scale;
      }
    }
  }
  for (int h = 0; h < s.n_head; ++h) {
    const float* sc = s.scores + h * kBlock;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < b.n; ++j) block_max = std::max(block_max, sc[j]);
    const float new_max = std::max(s.m[h], block_max);
    const float corr = std::exp(s.m[h] - new_max);  // 0 on the first block (m = -inf)
    float* acc = s.acc + h * hd;
    for (int d = 0; d < hd; ++d) acc[d] *= corr;
    float sum = s.l[h] * corr;
    const int g = h / group;
    for (int j = 0; j < b.n; ++j) {
      const float p = std::exp(sc[j] - new_max);
      sum += p;
      DecodeHead(b.tv, b.v_head_bytes, hd, b.v[j], g, vrow.data());
      for (int d = 0; d < hd; ++d) acc[d] += p * vrow[d];
    }
    s.l[h] = sum;
    s.m[h] = new_max;
  }
}

bool TileScoresIntegers(const Tile& t, const KeyBlock& b) {
  if (!IsBlockType(b.tk) || b.qblock != 32 || b.n == 0 || b.cos[0] != nullptr) return false;
  for (int u = 0; u < t.n; ++u)
    if (t.s[u]->tq8 == nullptr) return false;
  return true;
}

void TileQuantize(FoldState& s) {
  const int64_t n = static_cast<int64_t>(s.n_head) * s.head_dim;
  ops::QuantizeQ8BlocksF32(s.q, n, 32, s.tq8, s.tqd);
  BlockSums(s.tq8, n, 32, s.tqs);
  s.tq_of = s.q;
}

void ScoreTileIntScalar(TileRow* rows, const TileQuery* queries, int n_rows, const KeyBlock& b,
                        int g, int n, int n8, int head_dim, float scale) {
  const int nb = head_dim / 32;
  const KvType tk = TypeOf(b.tk);
  const size_t block_bytes = KvBlockBytes(tk, 32);
  std::vector<int8_t> kq(head_dim);  // [head_dim] one key head's integers
  std::vector<float> dk(nb);         // [head_dim / 32] its blocks' scales
  for (int j = 0; j < n8; ++j) {
    if (j >= n) {  // past the block's keys: zero, as the fast path's zero keys
      for (int r = 0; r < n_rows; ++r) rows[r].sc[j] = 0.f;
      continue;
    }
    const uint8_t* head =
        static_cast<const uint8_t*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
    for (int i = 0; i < nb; ++i)
      dk[i] = KvUnpackBlock(tk, 32, head + i * block_bytes, kq.data() + i * 32);
    for (int r = 0; r < n_rows; ++r) {
      float sc = 0.f;
      for (int i = 0; i < nb; ++i) {
        int32_t isum = 0;
        for (int e = 0; e < 32; ++e) isum += queries[r].q8[i * 32 + e] * kq[i * 32 + e];
        sc = std::fma(static_cast<float>(isum), dk[i] * queries[r].qd[i], sc);
      }
      rows[r].sc[j] = sc * scale;
    }
  }
}

void FoldTileScalar(Tile& t, const KeyBlock& b) {
  const bool integers = TileScoresIntegers(t, b);
  for (int u = 0; u < t.n; ++u) {
    FoldState& s = *t.s[u];
    const int hd = s.head_dim, group = s.n_head / s.n_head_kv, n = t.n_keys[u];
    if (n == 0) continue;
    std::vector<float> k(static_cast<size_t>(n) * s.n_head_kv * hd);  // [n, n_head_kv, head_dim]
    std::vector<float> v(k.size());                                    // [n, n_head_kv, head_dim]
    std::vector<float> x(hd);  // [head_dim] a deferred key before its rotation
    for (int j = 0; j < n; ++j)
      for (int g = 0; g < s.n_head_kv; ++g) {
        const size_t at = (static_cast<size_t>(j) * s.n_head_kv + g) * hd;
        DecodeHead(b.tk, b.k_head_bytes, hd, b.k[j], g, k.data() + at);
        DecodeHead(b.tv, b.v_head_bytes, hd, b.v[j], g, v.data() + at);
        if (b.cos[j] == nullptr) continue;
        // Deferred: read back from the stored centered form, then rotated
        // by the key's row (fold.h, Tile).
        float* kj = k.data() + at;
        if (s.k_center != nullptr)
          for (int d = 0; d < hd; ++d)
            kj[d] = s.k_center[g * hd + d] + s.k_scale[g * hd + d] * kj[d];
        std::copy(kj, kj + hd, x.begin());
        for (int d = 0; d < hd; ++d)
          kj[d] = b.cos[j][d] * x[d] + b.sin[j][d] * x[s.partner != nullptr ? s.partner[d] : d ^ 1];
      }
    if (integers && s.tq_of != s.q) TileQuantize(s);
    for (int h = 0; h < s.n_head; ++h) {
      const int g = h / group;
      float* sc = s.scores + h * kBlock;
      float block_max = -std::numeric_limits<float>::infinity();
      if (integers) {
        const size_t at = static_cast<size_t>(h) * hd;
        TileRow row{s.q + at, sc, nullptr, nullptr, nullptr, n, 1.f};
        const TileQuery query{s.tq8 + at, s.tqd + at / 32, s.tqs + at / 32};
        ScoreTileIntScalar(&row, &query, 1, b, g, n, n, hd, s.scale);
      }
      for (int j = 0; j < n; ++j) {
        if (!integers) {
          const float* kj = k.data() + (static_cast<size_t>(j) * s.n_head_kv + g) * hd;
          float dot = 0.f;
          for (int d = 0; d < hd; ++d) dot += s.q[h * hd + d] * kj[d];
          sc[j] = dot * s.scale;
        }
        block_max = std::max(block_max, sc[j]);
      }
      const float new_max = std::max(s.m[h], block_max);
      const float corr = std::exp(s.m[h] - new_max);
      float* acc = s.acc + h * hd;
      for (int d = 0; d < hd; ++d) acc[d] *= corr;
      float sum = s.l[h] * corr;
      for (int j = 0; j < n; ++j) {
        const float p = std::exp(sc[j] - new_max);
        sum += p;
        const float* vj = v.data() + (static_cast<size_t>(j) * s.n_head_kv + g) * hd;
        for (int d = 0; d < hd; ++d) acc[d] += p * vj[d];
      }
      s.l[h] = sum;
      s.m[h] = new_max;
    }
  }
}

void RotateRowsScalar(const float* cos, const float* sin, const float* x, int n_rows, int head_dim,
                      float* y) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * head_dim;
    float* yr = y + static_cast<size_t>(r) * head_dim;
    for (int l = 0; l < head_dim; ++l) yr[l] = cos[l] * xr[l] + sin[l] * xr[l ^ 1];
  }
}

void LaneWeightsScalar(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out) {
  for (int k = 0; k < n_keys; ++k) {
    float p = 0.f;
    for (int h = 0; h < n_heads; ++h) p += std::exp(scores[h * stride + k] - m[h]) / l[h];
    out[k] = p;
  }
}

}  // namespace rotor::attn
