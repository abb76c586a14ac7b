#include <cstring>
#include <vector>

#include "base/check.h"
#include "ops/ref/blocks_ref.h"
#include "ops/ref/ref.h"
#include "tensor/fp16.h"

namespace rotor::ops::ref {
namespace {

// Exact integer dot of one weight block with 32 quantized activations.
int32_t BlockDot(DType t, const uint8_t* blk, const int8_t* q) {
  int32_t s = 0;
  if (t == DType::kQ8_0) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(blk);
    for (int j = 0; j < kQK8_0; ++j) s += b->qs[j] * q[j];
  } else {
    const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(blk);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      s += ((b->qs[j] & 15) - 8) * q[j];
      s += ((b->qs[j] >> 4) - 8) * q[j + kQK4_0 / 2];
    }
  }
  return s;
}

}  // namespace

float MatmulDot(const Weight& w, int64_t r, const float* x, const int8_t* qx, const float* dx) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  double sum = 0;
  switch (w.type) {
    case DType::kF32: {
      const float* wr = reinterpret_cast<const float*>(row);
      for (int64_t j = 0; j < w.k; ++j) sum += static_cast<double>(wr[j]) * x[j];
      break;
    }
    case DType::kF16: {
      const uint16_t* wr = reinterpret_cast<const uint16_t*>(row);
      for (int64_t j = 0; j < w.k; ++j) sum += static_cast<double>(F16ToF32(wr[j])) * x[j];
      break;
    }
    case DType::kBF16: {
      const uint16_t* wr = reinterpret_cast<const uint16_t*>(row);
      for (int64_t j = 0; j < w.k; ++j) sum += static_cast<double>(BF16ToF32(wr[j])) * x[j];
      break;
    }
    case DType::kQ8_0:
    case DType::kQ4_0: {
      const int64_t bytes = Traits(w.type).type_size;
      for (int64_t b = 0; b < w.k / kBlock; ++b) {
        const uint8_t* blk = row + b * bytes;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float s = F16ToF32(dh) * dx[b];
        sum += static_cast<double>(s) * BlockDot(w.type, blk, qx + b * kBlock);
      }
      break;
    }
    default: {
      CHECK_MSG(IsExtraBlockType(w.type), "ops: Matmul: unsupported weight type");
      std::vector<float> wr(w.k);  // [k] the row, dequantized exactly
      DequantizeExtra(w.type, row, wr.data(), w.k);
      for (int64_t j = 0; j < w.k; ++j) sum += static_cast<double>(wr[j]) * x[j];
      break;
    }
  }
  return static_cast<float>(sum);
}

void Matmul(const Weight& w, const float* x, int64_t m, float* y, int64_t ldy) {
  CHECK_GE(ldy, w.n);
  const bool quant = w.type == DType::kQ8_0 || w.type == DType::kQ4_0;
  std::vector<int8_t> qx(quant ? w.k : 0);          // [k]
  std::vector<float> dx(quant ? w.k / kBlock : 0);  // [k / 32]
  for (int64_t t = 0; t < m; ++t) {
    const float* xt = x + t * w.k;
    if (quant) QuantizeActivations(xt, qx.data(), dx.data(), w.k);
    for (int64_t r = 0; r < w.n; ++r) y[t * ldy + r] = MatmulDot(w, r, xt, qx.data(), dx.data());
  }
}

}  // namespace rotor::ops::ref
