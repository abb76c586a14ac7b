// Scalar definitions of the block types beyond q8_0 / q4_0 (q4_1, q5_0,
// q5_1, iq4_nl and the K-quants q2_K .. q6_K): GGML's layouts, see
// tensor/dtype.h. Called by ref::DequantizeRow / QuantizeRow.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace rotor::ops::ref {

// True for q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K.
bool IsExtraBlockType(DType t);
// n a multiple of the type's block size (32 or 256).
void DequantizeExtra(DType t, const void* src, float* dst, int64_t n);
void QuantizeExtra(DType t, const float* src, void* dst, int64_t n);

// The 6-bit scales and mins of q4_K / q5_K: sc[8], m[8].
void UnpackScalesMinsK4(const uint8_t* packed, uint8_t* sc, uint8_t* m);
// The 16 signed scales of q3_K (s6 - 32).
void UnpackScalesQ3K(const uint8_t* packed, int8_t* sc);

// Per-type quantizers (kquant_ref.cc / quantize_ref.cc).
void QuantizeQ4_1(const float* x, BlockQ4_1* b, int64_t n);
void QuantizeQ5_0(const float* x, BlockQ5_0* b, int64_t n);
void QuantizeQ5_1(const float* x, BlockQ5_1* b, int64_t n);
void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* b, int64_t n);
void QuantizeQ2_K(const float* x, BlockQ2_K* b, int64_t n);
void QuantizeQ3_K(const float* x, BlockQ3_K* b, int64_t n);
void QuantizeQ4_K(const float* x, BlockQ4_K* b, int64_t n);
void QuantizeQ5_K(const float* x, BlockQ5_K* b, int64_t n);
void QuantizeQ6_K(const float* x, BlockQ6_K* b, int64_t n);

}  // namespace rotor::ops::ref
