// Internal: the per-ISA kernel entry points behind the public ops. The ISA
// translation units (*_avx2.cc, *_avx512.cc) define them; the portable units
// dispatch on ActiveIsa(). ISA units must not call inline functions of other
// headers (an out-of-line copy compiled with ISA flags could be linked into
// the portable code), so they include only declarations and plain structs.
#pragma once

#include <cstdint>

#include "ops/matmul.h"
#include "tensor/dtype.h"

namespace rotor::ops::internal {

// Rows a Gemm call repacks into one panel; Gemm row ranges are multiples of it
// (except at the end of the matrix).
inline constexpr int kPanelRows = 8;

// Aborts: t is not one of f32, f16, bf16, q8_0, q4_0 (portable code).
[[noreturn]] void UnsupportedType(DType t);

#define ROTOR_OPS_KERNELS                                                                       \
  /* y[r] for r in [r0, r1), one token (m == 1). qx/dx: the token quantized (q types only). */   \
  void Gemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0,     \
            int64_t r1, float* y);                                                              \
  /* y[t * ldy + r] for t in [t0, t1), r in [r0, r1). x: [m, k], qx: [m, k], dx: [m, k/32]. */  \
  void Gemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0,     \
            int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* panel);         \
  void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k);                     \
  void DequantizeRow(DType t, const void* src, float* dst, int64_t n);                          \
  float DotRow(DType t, const void* w_row, const float* x, int64_t n);                          \
  void AxpyRow(DType t, float a, const void* row, float* y, int64_t n);                         \
  void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps);          \
  void Softmax(float* x, int64_t n);                                                            \
  void SwiGlu(const float* gate, const float* up, float* out, int64_t n);                       \
  void Add(float* x, const float* y, int64_t n);                                                \
  void Scale(float* x, float s, int64_t n);

namespace avx2 {
ROTOR_OPS_KERNELS
}  // namespace avx2
namespace avx512 {
ROTOR_OPS_KERNELS
}  // namespace avx512

#undef ROTOR_OPS_KERNELS

}  // namespace rotor::ops::internal
