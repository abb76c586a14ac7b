// Scalar reference of the online-softmax fold: plain loops, any head size and
// rotation layout.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/fold.h"
#include "tensor/fp16.h"

namespace rotor::attn {
namespace {

// Element d of a K or V row of head g, as f32.
inline float At(const void* row, bool f16, int64_t d) {
  return f16 ? F16ToF32(static_cast<const uint16_t*>(row)[d]) : static_cast<const float*>(row)[d];
}

}  // namespace

void FoldScalar(FoldState& s, const KeyBlock& b) {
  const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
  for (int j = 0; j < b.n; ++j) {
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
      const int64_t o = static_cast<int64_t>(g) * hd;
      if (cosr != nullptr) {  // deferred: rotate the key by -distance
        for (int d = 0; d < hd; ++d)
          s.k_rot[d] = cosr[d] * At(b.k[j], b.f16, o + d) + sinr[d] * At(b.k[j], b.f16, o + s.partner[d]);
      } else {
        for (int d = 0; d < hd; ++d) s.k_rot[d] = At(b.k[j], b.f16, o + d);
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
      const int64_t o = static_cast<int64_t>(g) * hd;
      for (int d = 0; d < hd; ++d) acc[d] += p * At(b.v[j], b.f16, o + d);
    }
    s.l[h] = sum;
    s.m[h] = new_max;
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
