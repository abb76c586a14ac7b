#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "ops/kernels.h"
#include "ops/ref/blocks_ref.h"
#include "ops/ref/ref.h"
#include "tensor/fp16.h"

namespace rotor::ops::ref {
namespace {

void DequantizeQ8_0(const BlockQ8_0* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[i * kQK8_0 + j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void DequantizeQ4_0(const BlockQ4_0* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = F16ToF32(b[i].d);
    float* out = dst + i * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      out[j] = d * static_cast<float>((b[i].qs[j] & 15) - 8);
      out[j + kQK4_0 / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void QuantizeQ8_0(const float* x, BlockQ8_0* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = F32ToF16(d);
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* b, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* xb = x + i * kQK4_0;
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = F32ToF16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(xb[j + kQK4_0 / 2] * id + 8.5f));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void CheckBlocks(DType t, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: row not a multiple of the block size");
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  CheckBlocks(t, n);
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0:
      DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case DType::kQ4_0:
      DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
    default:
      CHECK_MSG(IsExtraBlockType(t), "ops: DequantizeRow: unsupported type");
      DequantizeExtra(t, src, dst, n);
  }
}

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  CheckBlocks(t, n);
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0:
      QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case DType::kQ4_0:
      QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    default:
      CHECK_MSG(IsExtraBlockType(t), "ops: QuantizeRow: unsupported type");
      QuantizeExtra(t, src, dst, n);
  }
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  CheckBlocks(t, n);
  const int64_t chunk = 256;
  float buf[chunk];  // [chunk] dequantized weights
  const int64_t bytes_per_chunk = RowBytes(t, chunk);
  double sum = 0;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    DequantizeRow(t, static_cast<const uint8_t*>(w_row) + i / chunk * bytes_per_chunk, buf, len);
    for (int64_t j = 0; j < len; ++j) sum += static_cast<double>(buf[j]) * x[i + j];
  }
  return static_cast<float>(sum);
}

void AxpyRow(DType t, float a, const void* row, float* y, int64_t n) {
  CheckBlocks(t, n);
  const int64_t chunk = 256;
  float buf[chunk];  // [chunk] dequantized row
  const int64_t bytes_per_chunk = RowBytes(t, chunk);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    DequantizeRow(t, static_cast<const uint8_t*>(row) + i / chunk * bytes_per_chunk, buf, len);
    for (int64_t j = 0; j < len; ++j) y[i + j] += a * buf[j];
  }
}

namespace {

// One block of n values: d = amax / 127 (f32), q = roundf(x / d). Returns d.
float QuantizeQ8(const float* x, int n, int8_t* q) {
  float amax = 0.f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int j = 0; j < n; ++j) q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  return d;
}

}  // namespace

void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k) {
  CHECK_MSG(k % kBlock == 0, "ops: activation row not a multiple of 32");
  QuantizeQ8BlocksF32(x, k, kBlock, q, d);
}

void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out) {
  CHECK(block > 0 && n % block == 0);
  for (int64_t b = 0; b < n / block; ++b, out += 2 + block) {
    const uint16_t dh = F32ToF16(QuantizeQ8(x + b * block, block, reinterpret_cast<int8_t*>(out + 2)));
    std::memcpy(out, &dh, 2);
  }
}

void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d) {
  CHECK(block > 0 && n % block == 0);
  for (int64_t b = 0; b < n / block; ++b) d[b] = QuantizeQ8(x + b * block, block, q + b * block);
}

// Blocks [j0, j1) of token t of m, quantized (q [k], d [k / 32]), into the
// packed kernels' activation tiles at acts (kernels.h: kPackedActBytes): per
// block its 8 int32 quads, sum(q), d, the sum of its first 16 q, d * sum(q),
// -128 sum(q), -8 sum(q), d times the sums of its first and last 16 q.
void PackActivations(const int8_t* q, const float* d, int64_t t, int64_t m, int64_t k, int64_t j0,
                     int64_t j1, uint8_t* acts) {
  const int64_t nb = k / 32, tile = t / internal::kPackedTileTokens;
  const int64_t tt = t % internal::kPackedTileTokens;
  const int64_t tokens =
      std::min<int64_t>(internal::kPackedTileTokens, m - tile * internal::kPackedTileTokens);
  int32_t* base = reinterpret_cast<int32_t*>(acts + tile * internal::kPackedTileTokens * nb *
                                                        internal::kPackedActBytes);
  CHECK(0 <= j0 && j0 <= j1 && j1 <= nb);
  for (int64_t j = j0; j < j1; ++j) {
    int32_t* aj = base + j * tokens * (internal::kPackedActBytes / 4);
    const int8_t* qj = q + j * 32;  // [32]
    int32_t quads[8];               // [8]
    std::memcpy(quads, qj, sizeof(quads));
    for (int i = 0; i < 8; ++i) aj[i * tokens + tt] = quads[i];
    int32_t lo = 0, hi = 0;
    for (int i = 0; i < 16; ++i) lo += qj[i], hi += qj[16 + i];
    const float xsum = d[j] * static_cast<float>(lo + hi);
    aj[internal::kActSum * tokens + tt] = lo + hi;
    std::memcpy(&aj[internal::kActScale * tokens + tt], &d[j], 4);
    aj[internal::kActSumLo * tokens + tt] = lo;
    std::memcpy(&aj[internal::kActXsum * tokens + tt], &xsum, 4);
    aj[internal::kActBiasQ8 * tokens + tt] = -128 * (lo + hi);
    aj[internal::kActBiasQ4 * tokens + tt] = -8 * (lo + hi);
    const float xsum_lo = d[j] * static_cast<float>(lo), xsum_hi = d[j] * static_cast<float>(hi);
    std::memcpy(&aj[internal::kActXsumLo * tokens + tt], &xsum_lo, 4);
    std::memcpy(&aj[internal::kActXsumHi * tokens + tt], &xsum_hi, 4);
  }
}

}  // namespace rotor::ops::ref
