// Row and elementwise ops (single-threaded over one row; callers parallelise
// over rows). In-place use (out == x) is allowed.
#pragma once

#include <cstdint>

namespace rotor::ops {

// out = x / sqrt(mean(x^2) + eps) * weight.
void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps);
// x = exp(x - max) / sum, in place.
void Softmax(float* x, int64_t n);
// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);
// x += y.
void Add(float* x, const float* y, int64_t n);
// x *= s.
void Scale(float* x, float s, int64_t n);

}  // namespace rotor::ops
