#include <cmath>

#include "ops/ref/ref.h"

namespace rotor::ops::ref {

void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void Scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Hadamard(float* x, int64_t n, int block) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (float* v = x; v < x + n; v += block) {
    for (int len = 1; len < block; len <<= 1)
      for (int i = 0; i < block; i += 2 * len)
        for (int j = i; j < i + len; ++j) {
          const float a = v[j], c = v[j + len];
          v[j] = a + c, v[j + len] = a - c;
        }
    for (int i = 0; i < block; ++i) v[i] *= norm;
  }
}

}  // namespace rotor::ops::ref
