#include "ops/elementwise.h"

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/ref/ref.h"

namespace rotor::ops {

void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::RmsNorm(x, weight, out, n, eps);
    case Isa::kAvx2:
      return internal::avx2::RmsNorm(x, weight, out, n, eps);
    case Isa::kScalar:
      break;
  }
  ref::RmsNorm(x, weight, out, n, eps);
}

void Softmax(float* x, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::Softmax(x, n);
    case Isa::kAvx2:
      return internal::avx2::Softmax(x, n);
    case Isa::kScalar:
      break;
  }
  ref::Softmax(x, n);
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::SwiGlu(gate, up, out, n);
    case Isa::kAvx2:
      return internal::avx2::SwiGlu(gate, up, out, n);
    case Isa::kScalar:
      break;
  }
  ref::SwiGlu(gate, up, out, n);
}

void Add(float* x, const float* y, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::Add(x, y, n);
    case Isa::kAvx2:
      return internal::avx2::Add(x, y, n);
    case Isa::kScalar:
      break;
  }
  ref::Add(x, y, n);
}

void Scale(float* x, float s, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::Scale(x, s, n);
    case Isa::kAvx2:
      return internal::avx2::Scale(x, s, n);
    case Isa::kScalar:
      break;
  }
  ref::Scale(x, s, n);
}

void Hadamard(float* x, int64_t n, int block) {
  CHECK(block > 0 && (block & (block - 1)) == 0 && n % block == 0);
  // AVX-512 machines take the AVX2 kernel: a block is at most 32 values.
  if (ActiveIsa() != Isa::kScalar && (block == 8 || block == 16 || block == 32))
    return internal::avx2::Hadamard(x, n, block);
  ref::Hadamard(x, n, block);
}

}  // namespace rotor::ops
