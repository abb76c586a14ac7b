// Scalar reference kernels: the straightforward definitions the fast paths are
// tested against. They build anywhere and are the kScalar path.
#pragma once

#include <cstdint>

#include "ops/matmul.h"
#include "ops/rope.h"
#include "tensor/dtype.h"

namespace rotor::ops::ref {

inline constexpr int kBlock = 32;  // q8_0 / q4_0 block size

void DequantizeRow(DType t, const void* src, float* dst, int64_t n);
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);
// Exact dequantization, double accumulation.
float DotRow(DType t, const void* w_row, const float* x, int64_t n);
void AxpyRow(DType t, float a, const void* row, float* y, int64_t n);

// Activations for the integer kernels: per block of 32, d = amax / 127 kept in
// f32, q = roundf(x / d) in [-127, 127]. q: [k], d: [k / 32].
void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k);
// Blocks [j0, j1) of token t of m, quantized by QuantizeActivations (q [k],
// d [k / 32]), into the packed kernels' activation tiles at acts
// (ops/kernels.h, kPackedActBytes).
void PackActivations(const int8_t* q, const float* d, int64_t t, int64_t m, int64_t k, int64_t j0,
                     int64_t j1, uint8_t* acts);
// q8_0 blocks of `block` values (ops::QuantizeQ8Blocks).
void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out);
// ops::QuantizeQ8BlocksF32: q [n], d [n / block].
void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d);

// Single-threaded Y[m, n] = X[m, k] * W^T with the math the fast paths use:
// f32/f16/bf16 exact products summed in double; q8_0/q4_0 with X quantized by
// QuantizeActivations, exact integer block sums, s_b = d_w * d_x rounded to f32
// (as the fast paths do), sum_b s_b * isum_b in double. The other block types
// (q4_1 .. q6_K): rows dequantized exactly, products with f32 x in double.
void Matmul(const Weight& w, const float* x, int64_t m, float* y, int64_t ldy);
// One output: row r of w against one quantized/f32 activation row.
float MatmulDot(const Weight& w, int64_t r, const float* x, const int8_t* qx, const float* dx);

void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps);
void Softmax(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);
void Add(float* x, const float* y, int64_t n);
void Scale(float* x, float s, int64_t n);
// Each block of x times the normalized Walsh-Hadamard matrix (ops::Hadamard).
void Hadamard(float* x, int64_t n, int block);

}  // namespace rotor::ops::ref
