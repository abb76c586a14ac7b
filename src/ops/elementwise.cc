#include "ops/elementwise.h"

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

}  // namespace rotor::ops
