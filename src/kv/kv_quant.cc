#include "kv/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "kv/kv_quant_block.h"
#include "ops/elementwise.h"
#include "ops/quant.h"
#include "tensor/fp16.h"

namespace rotor {

bool KvTypeQuantized(KvType t) {
  return t == KvType::kQ8_0 || t == KvType::kQ4_0 || t == KvType::kQ5_0;
}

int KvQuantBlock(int head_dim) {
  for (int b : {32, 16, 8})
    if (head_dim > 0 && head_dim % b == 0) return b;
  return 0;
}

size_t KvBlockBytes(KvType t, int block) {
  switch (t) {
    case KvType::kQ8_0: return 2 + static_cast<size_t>(block);
    case KvType::kQ4_0: return 2 + static_cast<size_t>(block) / 2;
    case KvType::kQ5_0: return 2 + static_cast<size_t>(block) / 8 + static_cast<size_t>(block) / 2;
    case KvType::kF32: return 4 * static_cast<size_t>(block);
    default: return 2 * static_cast<size_t>(block);  // f16, bf16
  }
}

size_t KvHeadBytes(KvType t, int head_dim) {
  if (!KvTypeQuantized(t)) return KvBlockBytes(t, head_dim);
  const int b = KvQuantBlock(head_dim);
  CHECK_GT(b, 0);
  return static_cast<size_t>(head_dim / b) * KvBlockBytes(t, b);
}

double KvBytesPerElement(KvType t, int head_dim) {
  return static_cast<double>(KvHeadBytes(t, head_dim)) / head_dim;
}

namespace {

// Writes a q4_0 / q5_0 block: scale d, unsigned quants u[B] (level - lo).
void PackBlock(KvType t, int B, float d, const int* u, uint8_t* out) {
  const bool q5 = t == KvType::kQ5_0;
  const uint16_t dh = F32ToF16(d);
  std::memcpy(out, &dh, 2);
  uint8_t* qs = out + 2 + (q5 ? B / 8 : 0);
  uint32_t qh = 0;
  for (int i = 0; i < B / 2; ++i) {
    const int q0 = u[i], q1 = u[i + B / 2];
    qs[i] = static_cast<uint8_t>((q0 & 15) | ((q1 & 15) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << i;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (i + B / 2);
  }
  if (q5) std::memcpy(out + 2, &qh, B / 8);
}

// The reference arithmetic of kv_internal::QuantizeBlock (kv_quant_block.h)
// on x[B].
struct ScalarBlock {
  const float* x;
  int B;

  void MaxAbs(float* max, float* amax) const {
    *max = 0.f, *amax = 0.f;
    for (int i = 0; i < B; ++i)
      if (std::fabs(x[i]) > *amax) *amax = std::fabs(x[i]), *max = x[i];
  }
  void Ggml(float id, float off, int top, int* u) const {
    for (int i = 0; i < B; ++i) u[i] = std::min(top, static_cast<int>(x[i] * id + off));
  }
  void Round(float id, int lo, int hi, int* u) const {
    for (int i = 0; i < B; ++i) u[i] = std::clamp(static_cast<int>(std::lrintf(x[i] * id)), lo, hi) - lo;
  }
  double Sxx() const {
    double acc[4] = {};  // [4] lanes
    for (int i = 0; i < B; ++i) acc[i % 4] += static_cast<double>(x[i]) * x[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  void Sums(const int* u, int lo, double* sxl, double* sll) const {
    double acc[4] = {};  // [4] lanes
    int64_t ll = 0;
    for (int i = 0; i < B; ++i) {
      const int l = u[i] + lo;
      acc[i % 4] += static_cast<double>(x[i]) * l, ll += l * l;
    }
    *sxl = (acc[0] + acc[1]) + (acc[2] + acc[3]), *sll = static_cast<double>(ll);
  }
  static float F16Round(float d) { return F16ToF32(F32ToF16(d)); }
  static void Pack(KvType t, int B, float d, const int* u, uint8_t* out) {
    PackBlock(t, B, d, u, out);
  }
};

void DequantizeBlock(KvType t, int B, const uint8_t* in, float* x) {
  int8_t q[32];
  const float d = KvUnpackBlock(t, B, in, q);
  for (int i = 0; i < B; ++i) x[i] = d * static_cast<float>(q[i]);
}

}  // namespace

float KvUnpackBlock(KvType t, int B, const uint8_t* in, int8_t* q) {
  uint16_t dh;
  std::memcpy(&dh, in, 2);
  const float d = F16ToF32(dh);
  if (t == KvType::kQ8_0) {
    std::memcpy(q, in + 2, B);
    return d;
  }
  const bool q5 = t == KvType::kQ5_0;
  uint32_t qh = 0;
  if (q5) std::memcpy(&qh, in + 2, B / 8);
  const uint8_t* qs = in + 2 + (q5 ? B / 8 : 0);
  const int off = q5 ? 16 : 8;
  for (int i = 0; i < B / 2; ++i) {
    const int h0 = q5 ? static_cast<int>((qh >> i) & 1) << 4 : 0;
    const int h1 = q5 ? static_cast<int>((qh >> (i + B / 2)) & 1) << 4 : 0;
    q[i] = static_cast<int8_t>(((qs[i] & 15) | h0) - off);
    q[i + B / 2] = static_cast<int8_t>(((qs[i] >> 4) | h1) - off);
  }
  return d;
}

void KvQuantizeHeads(KvType t, int head_dim, int n_heads, const float* src, uint8_t* dst,
                     KvRounding rounding) {
  const int64_t n = static_cast<int64_t>(n_heads) * head_dim;
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kQ8_0:
      return ops::QuantizeQ8Blocks(src, n, KvQuantBlock(head_dim), dst);
    default: {  // q4_0, q5_0
      const int B = KvQuantBlock(head_dim);
      if (ActiveIsa() != Isa::kScalar) return kv_internal::avx2::QuantizeBlocks(t, B, n, src, dst, rounding);
      const size_t bb = KvBlockBytes(t, B);
      for (int64_t b = 0; b < n / B; ++b) {
        ScalarBlock x{src + b * B, B};
        kv_internal::QuantizeBlock(t, B, x, dst + b * bb, rounding);
      }
    }
  }
}

void KvDequantizeHeads(KvType t, int head_dim, int n_heads, const uint8_t* src, float* dst) {
  const int64_t n = static_cast<int64_t>(n_heads) * head_dim;
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvType::kF16:  // vectorized (compact positions re-rotate kept keys at every eviction)
      ops::DequantizeRow(DType::kF16, src, dst, n);
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = BF16ToF32(h);
      }
      return;
    default: {
      const int B = KvQuantBlock(head_dim);
      const size_t bb = KvBlockBytes(t, B);
      for (int64_t b = 0; b < n / B; ++b) DequantizeBlock(t, B, src + b * bb, dst + b * B);
    }
  }
}

void KvHadamard(float* x, int64_t n, int block) { ops::Hadamard(x, n, block); }

void KvCenterKeys(const float* k, const float* center, const float* scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = (k[i] - center[i]) / scale[i];
}

}  // namespace rotor
