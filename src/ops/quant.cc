#include "ops/quant.h"

#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/ref/ref.h"

namespace rotor::ops {
namespace internal {
void UnsupportedType(DType t) {
  std::fprintf(stderr, "rotor: ops: unsupported type %u\n", static_cast<unsigned>(t));
  std::abort();
}
}  // namespace internal

bool IsSupported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0;
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::DequantizeRow(t, src, dst, n);
    case Isa::kAvx2:
      return internal::avx2::DequantizeRow(t, src, dst, n);
    case Isa::kScalar:
      break;
  }
  ref::DequantizeRow(t, src, dst, n);
}

// Writers and synth only: the scalar path is the definition.
void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  ref::QuantizeRow(t, src, dst, n);
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::DotRow(t, w_row, x, n);
    case Isa::kAvx2:
      return internal::avx2::DotRow(t, w_row, x, n);
    case Isa::kScalar:
      break;
  }
  return ref::DotRow(t, w_row, x, n);
}

void AxpyRow(DType t, float a, const void* row, float* y, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::AxpyRow(t, a, row, y, n);
    case Isa::kAvx2:
      return internal::avx2::AxpyRow(t, a, row, y, n);
    case Isa::kScalar:
      break;
  }
  ref::AxpyRow(t, a, row, y, n);
}

}  // namespace rotor::ops
