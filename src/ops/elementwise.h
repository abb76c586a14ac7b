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
// Each block of `block` values of x (a power of 2; n a multiple of it) times
// H / sqrt(block), H[i][j] = (-1)^popcount(i & j): an orthogonal rotation that
// is its own inverse. Butterflies of stride 1, 2, 4, ..., then the norm; the
// fast paths (blocks of 8, 16, 32) do the same additions in the same order, so
// every path gives the same bits.
void Hadamard(float* x, int64_t n, int block);

}  // namespace rotor::ops
