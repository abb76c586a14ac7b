// Row conversions between f32 and the weight types rotor reads (f32, f16,
// bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K),
// and dot products of one weight row with an f32 vector.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace rotor::ops {

// True for the types these kernels read: f32, f16, bf16, q8_0, q4_0, q4_1,
// q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K (Traits(t).supported).
bool IsSupported(DType t);

// n elements of type t -> f32, exactly GGML's f32 arithmetic. n is a multiple
// of Traits(t).block_size (32; 256 for the K-quants).
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);
// f32 -> n elements of type t, GGML's choices: f16/bf16 round to nearest even;
// q8_0 d = amax / 127, q = roundf(x / d); q4_0 d = max / -8 (max: the signed
// value of largest magnitude), q = min(15, (int)(x / d + 8.5)); q5_0 the same
// with 16 / 31; q4_1 / q5_1 d = (max - min) / 15 (31), m = min, q =
// (int)((x - min) / d + 0.5). iq4_nl: a scale search per block with a least-
// squares refit. K-quants: per sub-block scale (and min) search with least-
// squares refits, sub-block scales quantized against the f16 super-block
// scale(s), values re-rounded with the final scales (GGML's format, error
// comparable to llama-quantize without an importance matrix; not byte-equal).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);
// f32 -> f16, round to nearest even: the bytes of QuantizeRow(kF16) for every
// value but NaN (hardware keeps the NaN's payload; still a NaN).
void F32ToF16Row(const float* src, uint16_t* dst, int64_t n);
// f32 -> q8_0 blocks of `block` values (n a multiple of it; GGML's layout with
// `block` in place of 32, 2 + block bytes each): f16 d = amax / 127 (rounded
// from the f32 d), q = roundf(x * (1 / d)) with the f32 d. The fast paths for
// blocks of 8, 16 and 32 write the same bytes as the scalar one.
void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out);
// The same quantization with the f32 d kept: q [n] and d [n / block] (the
// values QuantizeQ8Blocks stores before d is rounded to f16). The fast paths
// for blocks of 8, 16 and 32 give the same values as the scalar one.
void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d);
// Dot product of one weight row (dequantized exactly) with f32 x, accumulated in
// f32 lanes: |error| <= ~(n / 8 + 16) * 2^-24 * sum |w_i x_i|. x is not quantized.
float DotRow(DType t, const void* w_row, const float* x, int64_t n);
// y += a * dequantize(row): the value side of attention over a typed cache.
void AxpyRow(DType t, float a, const void* row, float* y, int64_t n);

}  // namespace rotor::ops
