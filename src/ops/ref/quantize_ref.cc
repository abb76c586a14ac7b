// Quantizers of q4_1, q5_0, q5_1 (GGML's min / max choices) and iq4_nl (a
// scale search with a least-squares refit per block of 32).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/ref/blocks_ref.h"
#include "tensor/fp16.h"

namespace rotor::ops::ref {
namespace {

void MinMax(const float* x, int n, float* lo, float* hi) {
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int j = 0; j < n; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

// The signed value of largest magnitude.
float SignedMax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

void StoreQh(uint8_t* qh, uint32_t bits) { std::memcpy(qh, &bits, 4); }

// Index of the table value nearest v (ties to the lower one): binary search
// over the midpoints of the sorted table.
int NearestIq4nl(float v) {
  int lo = 0;
  for (int step = 8; step > 0; step /= 2) {
    const int i = lo + step;  // candidate: v above the midpoint of values i - 1 and i
    if (i < 16 && v > 0.5f * static_cast<float>(kIq4nlValues[i - 1] + kIq4nlValues[i])) lo = i;
  }
  return lo;
}

}  // namespace

// x = d * q + min, d = (max - min) / 15, q = min(15, (int)((x - min) / d + 0.5)).
void QuantizeQ4_1(const float* x, BlockQ4_1* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, x += kQK4_1) {
    float lo, hi;
    MinMax(x, kQK4_1, &lo, &hi);
    const float d = (hi - lo) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = F32ToF16(d);
    b[i].m = F32ToF16(lo);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
      b[i].qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
  }
}

// As q4_0 with 5 bits: d = max / -16, q = min(31, (int)(x / d + 16.5)).
void QuantizeQ5_0(const float* x, BlockQ5_0* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    const float d = SignedMax(x, kQK5_0) / -16.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int q1 = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
      b[i].qs[j] = static_cast<uint8_t>((q0 & 15) | (q1 & 15) << 4);
      qh |= static_cast<uint32_t>(q0 >> 4) << j | static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    StoreQh(b[i].qh, qh);
  }
}

// As q4_1 with 5 bits: d = (max - min) / 31.
void QuantizeQ5_1(const float* x, BlockQ5_1* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    float lo, hi;
    MinMax(x, kQK5_1, &lo, &hi);
    const float d = (hi - lo) / 31.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = F32ToF16(d);
    b[i].m = F32ToF16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(31, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
      b[i].qs[j] = static_cast<uint8_t>((q0 & 15) | (q1 & 15) << 4);
      qh |= static_cast<uint32_t>(q0 >> 4) << j | static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    StoreQh(b[i].qh, qh);
  }
}

// Tries scales mapping the largest-magnitude value near either end of the
// table (-127 or 113, +-10% in 2.5% steps), assigns each x its nearest table
// value, refits d by least squares and keeps the smallest squared error.
void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_NL; ++i, x += kQK4_NL) {
    const float vmax = SignedMax(x, kQK4_NL);
    float best_d = 0.f;
    if (vmax != 0.f) {
      double best_err = INFINITY;
      for (float end : {-127.f, 113.f})
        for (int t = -4; t <= 4; ++t) {
          const float d0 = vmax / end * (1.f + 0.025f * static_cast<float>(t));
          const float id = 1.f / d0;
          double sqx = 0, sqq = 0, sxx = 0;
          for (int j = 0; j < kQK4_NL; ++j) {
            const double q = kIq4nlValues[NearestIq4nl(x[j] * id)];
            sqx += q * x[j];
            sqq += q * q;
            sxx += static_cast<double>(x[j]) * x[j];
          }
          if (sqq <= 0) continue;
          const double err = sxx - sqx * sqx / sqq;
          if (err < best_err) {
            best_err = err;
            best_d = static_cast<float>(sqx / sqq);
          }
        }
    }
    b[i].d = F32ToF16(best_d);
    const float d = F16ToF32(b[i].d);
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < 16; ++j) {
      // d == 0: index 8 (value 1) times 0.
      const int q0 = d != 0.f ? NearestIq4nl(x[j] * id) : 8;
      const int q1 = d != 0.f ? NearestIq4nl(x[j + 16] * id) : 8;
      b[i].qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
  }
}

}  // namespace rotor::ops::ref
