// Placeholder: the avx2 matmul kernels (in progress) fall back to ref math.
#include "ops/kernels.h"
#include "ops/ref/ref.h"

namespace rotor::ops::internal::avx2 {

void Gemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0, int64_t r1,
          float* y) {
  for (int64_t r = r0; r < r1; ++r) y[r] = ref::MatmulDot(w, r, x, qx, dx);
}

void Gemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0, int64_t t1,
          int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* panel) {
  const int64_t nb = w.k / 32;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = r0; r < r1; ++r)
      y[t * ldy + r] = ref::MatmulDot(w, r, x + t * w.k, qx ? qx + t * w.k : nullptr, dx ? dx + t * nb : nullptr);
}

}  // namespace rotor::ops::internal::avx2
