// Quantizers of the K-quants. Each sub-block gets its own scale (and min) by
// a search: candidate step sizes around range / levels, each followed by a
// least-squares refit of scale (and offset) to the rounded quants, keeping the
// smallest squared error. The sub-block scales are then quantized against the
// super-block scale (6 bits, 4 bits for q2_K, 8 bits for q6_K) and the values
// re-rounded with the final (f16-rounded) scales.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/ref/blocks_ref.h"
#include "tensor/fp16.h"

namespace rotor::ops::ref {
namespace {

// Round half away from zero (inline; std::lround is a library call and
// dominates the scale searches). Inputs are small (|v| < 2^22).
int Nearest(float v) { return static_cast<int>(v + (v >= 0.f ? 0.5f : -0.5f)); }

// x ~ s * q - m with q in [0, nmax], s >= 0, m >= 0 (GGML stores unsigned mins).
void FitScaleMin(const float* x, int n, int nmax, float* s_out, float* m_out) {
  float lo = 0.f, hi = x[0];
  for (int j = 0; j < n; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  if (hi <= lo) {
    *s_out = 0.f;
    *m_out = -lo;
    return;
  }
  double best_err = INFINITY;
  float best_s = (hi - lo) / static_cast<float>(nmax), best_m = -lo;
  int q[32];  // [n <= 32] trial quants
  for (int t = -10; t <= 10; ++t) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(t)) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
      q[j] = std::clamp(Nearest((x[j] - lo) * iscale), 0, nmax);
      sq += q[j];
      sqq += static_cast<double>(q[j]) * q[j];
      sx += x[j];
      sqx += static_cast<double>(q[j]) * x[j];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det, off = (sqq * sx - sq * sqx) / det;
    if (off > 0) {  // the offset must be a subtracted min >= 0
      off = 0;
      s = sqx / sqq;
    }
    if (s <= 0) continue;
    double err = 0;
    for (int j = 0; j < n; ++j) {
      const double e = s * q[j] + off - x[j];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_s = static_cast<float>(s);
      best_m = static_cast<float>(-off);
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

// x ~ s * q with q in [-nneg, npos], s of either sign.
float FitScale(const float* x, int n, int nneg, int npos) {
  float vmax = 0.f, amax = 0.f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  if (amax == 0.f) return 0.f;
  double best_err = INFINITY;
  float best = vmax / static_cast<float>(-nneg);
  for (int end : {-nneg, npos})
    for (int t = -10; t <= 10; ++t) {
      const float iscale = (static_cast<float>(end) + 0.1f * static_cast<float>(t) *
                                                          (end < 0 ? -1.f : 1.f)) / vmax;
      double sqq = 0, sqx = 0, sxx = 0;
      for (int j = 0; j < n; ++j) {
        const int q = std::clamp(Nearest(x[j] * iscale), -nneg, npos);
        sqq += static_cast<double>(q) * q;
        sqx += static_cast<double>(q) * x[j];
        sxx += static_cast<double>(x[j]) * x[j];
      }
      if (sqq <= 0) continue;
      const double err = sxx - sqx * sqx / sqq;
      if (err < best_err) {
        best_err = err;
        best = static_cast<float>(sqx / sqq);
      }
    }
  return best;
}

// Quantizes unsigned sub-block values v[n] >= 0 to [0, levels] against a
// super scale (returned, f16-rounded) so that v[i] ~ super * out[i].
uint16_t QuantizeUnsigned(const float* v, int n, int levels, uint8_t* out) {
  float vmax = 0.f;
  for (int i = 0; i < n; ++i) vmax = std::max(vmax, v[i]);
  const uint16_t h = F32ToF16(vmax / static_cast<float>(levels));
  const float d = F16ToF32(h);
  for (int i = 0; i < n; ++i)
    out[i] = d > 0.f ? static_cast<uint8_t>(std::clamp(Nearest(v[i] / d), 0, levels)) : 0;
  return h;
}

// Signed sub-block scales s[n] to [lo, hi] against a super scale mapping the
// largest magnitude to lo.
uint16_t QuantizeSigned(const float* s, int n, int lo, int hi, int* out) {
  float vmax = 0.f, amax = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(s[i]) > amax) {
      amax = std::fabs(s[i]);
      vmax = s[i];
    }
  const uint16_t h = F32ToF16(vmax / static_cast<float>(lo));
  const float d = F16ToF32(h);
  for (int i = 0; i < n; ++i) out[i] = d != 0.f ? std::clamp(Nearest(s[i] / d), lo, hi) : 0;
  return h;
}

// Per sub-block of `sub` elements: q in [0, nmax] for x ~ ds * q - dm.
void RoundAsym(const float* x, int sub, float ds, float dm, int nmax, uint8_t* q) {
  for (int j = 0; j < sub; ++j)
    q[j] = ds > 0.f ? static_cast<uint8_t>(std::clamp(Nearest((x[j] + dm) / ds), 0, nmax)) : 0;
}

// q4_K / q5_K: 8 sub-blocks of 32, 6-bit scales and mins; q[256] in [0, nmax].
void QuantizeK45(const float* x, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* packed,
                 uint8_t* q) {
  float s[8], m[8];  // [8] fitted sub-block scales, [8] mins
  for (int i = 0; i < 8; ++i) FitScaleMin(x + 32 * i, 32, nmax, &s[i], &m[i]);
  uint8_t sc[8], mq[8];  // [8] quantized scales, [8] mins
  *d = QuantizeUnsigned(s, 8, 63, sc);
  *dmin = QuantizeUnsigned(m, 8, 63, mq);
  for (int i = 0; i < 4; ++i) {
    packed[i] = static_cast<uint8_t>(sc[i] | (sc[i + 4] >> 4) << 6);
    packed[i + 4] = static_cast<uint8_t>(mq[i] | (mq[i + 4] >> 4) << 6);
    packed[i + 8] = static_cast<uint8_t>((sc[i + 4] & 15) | (mq[i + 4] & 15) << 4);
  }
  const float df = F16ToF32(*d), mf = F16ToF32(*dmin);
  for (int i = 0; i < 8; ++i)
    RoundAsym(x + 32 * i, 32, df * static_cast<float>(sc[i]), mf * static_cast<float>(mq[i]),
              nmax, q + 32 * i);
}

}  // namespace

void QuantizeQ2_K(const float* x, BlockQ2_K* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float s[16], m[16];  // [16] fitted sub-block scales, [16] mins
    for (int k = 0; k < 16; ++k) FitScaleMin(x + 16 * k, 16, 3, &s[k], &m[k]);
    uint8_t sc[16], mq[16];  // [16] quantized scales, [16] mins
    b[i].d = QuantizeUnsigned(s, 16, 15, sc);
    b[i].dmin = QuantizeUnsigned(m, 16, 15, mq);
    const float df = F16ToF32(b[i].d), mf = F16ToF32(b[i].dmin);
    uint8_t q[kQK_K];  // [256] quants
    for (int k = 0; k < 16; ++k) {
      b[i].scales[k] = static_cast<uint8_t>(sc[k] | mq[k] << 4);
      RoundAsym(x + 16 * k, 16, df * static_cast<float>(sc[k]), mf * static_cast<float>(mq[k]), 3,
                q + 16 * k);
    }
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      b[i].qs[32 * h + l] |= static_cast<uint8_t>(q[e] << (2 * j));
    }
  }
}

void QuantizeQ3_K(const float* x, BlockQ3_K* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float s[16];  // [16] fitted sub-block scales
    for (int k = 0; k < 16; ++k) s[k] = FitScale(x + 16 * k, 16, 4, 3);
    int sc[16];  // [16] quantized scales
    b[i].d = QuantizeSigned(s, 16, -32, 31, sc);
    std::memset(b[i].scales, 0, sizeof(b[i].scales));
    for (int k = 0; k < 16; ++k) {
      const int u = sc[k] + 32;  // 6 bits
      b[i].scales[k % 8] |= static_cast<uint8_t>((u & 15) << (k < 8 ? 0 : 4));
      b[i].scales[8 + k % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (k / 4)));
    }
    const float df = F16ToF32(b[i].d);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    std::memset(b[i].hmask, 0, sizeof(b[i].hmask));
    for (int e = 0; e < kQK_K; ++e) {
      const float ds = df * static_cast<float>(sc[e / 16]);
      const int q = ds != 0.f ? std::clamp(Nearest(x[e] / ds), -4, 3) : 0;
      const int u = q + 4, h = e / 128, j = (e % 128) / 32, l = e % 32;
      b[i].qs[32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * j));
      b[i].hmask[l] |= static_cast<uint8_t>((u >> 2) << (4 * h + j));
    }
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t q[kQK_K];  // [256] quants
    QuantizeK45(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | q[64 * c + 32 + l] << 4);
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t q[kQK_K];  // [256] quants
    QuantizeK45(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] =
            static_cast<uint8_t>((q[64 * c + l] & 15) | (q[64 * c + 32 + l] & 15) << 4);
    for (int e = 0; e < kQK_K; ++e)
      b[i].qh[e % 32] |= static_cast<uint8_t>((q[e] >> 4) << (e / 32));
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float s[16];  // [16] fitted sub-block scales
    for (int k = 0; k < 16; ++k) s[k] = FitScale(x + 16 * k, 16, 32, 31);
    int sc[16];  // [16] quantized scales
    b[i].d = QuantizeSigned(s, 16, -128, 127, sc);
    for (int k = 0; k < 16; ++k) b[i].scales[k] = static_cast<int8_t>(sc[k]);
    const float df = F16ToF32(b[i].d);
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQK_K; ++e) {
      const float ds = df * static_cast<float>(sc[e / 16]);
      const int u = (ds != 0.f ? std::clamp(Nearest(x[e] / ds), -32, 31) : 0) + 32;
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      b[i].ql[64 * h + l + 32 * (j & 1)] |= static_cast<uint8_t>((u & 15) << (j < 2 ? 0 : 4));
      b[i].qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * j));
    }
  }
}

}  // namespace rotor::ops::ref
