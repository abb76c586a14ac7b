// Dequantization of q4_1, q5_0, q5_1, iq4_nl and the K-quants: the scalar
// definitions (same f32 operation order as GGML: sub-block scale d * sc first,
// then scale * q - min).
#include <cstring>

#include "base/check.h"
#include "ops/ref/blocks_ref.h"
#include "tensor/fp16.h"

namespace rotor::ops::ref {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void DequantizeQ4_1(const BlockQ4_1* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 15) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeQ5_0(const BlockQ5_0* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = F16ToF32(b[i].d);
    const uint32_t qh = LoadU32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 15) | static_cast<int>((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void DequantizeQ5_1(const BlockQ5_1* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    const uint32_t qh = LoadU32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 15) | static_cast<int>((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void DequantizeIQ4_NL(const BlockIQ4_NL* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_NL; ++i, y += kQK4_NL) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[b[i].qs[j] & 15]);
      y[j + 16] = d * static_cast<float>(kIq4nlValues[b[i].qs[j] >> 4]);
    }
  }
}

// Element e = 128 h + 32 j + l of a super-block: half h, quarter j, lane l
// (see dtype.h); loops over (h, j, sub-block of 16, l) keep the scales fixed
// inside the innermost loop.
void DequantizeQ2_K(const BlockQ2_K* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int s = 0; s < 2; ++s, y += 16) {
          const uint8_t sc = b[i].scales[8 * h + 2 * j + s];
          const float dl = d * static_cast<float>(sc & 15), ml = dmin * static_cast<float>(sc >> 4);
          const uint8_t* q = b[i].qs + 32 * h + 16 * s;
          for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>((q[l] >> (2 * j)) & 3) - ml;
        }
  }
}

void DequantizeQ3_K(const BlockQ3_K* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(b[i].d);
    int8_t sc[16];  // [16] sub-block scales
    UnpackScalesQ3K(b[i].scales, sc);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int s = 0; s < 2; ++s, y += 16) {
          const float dl = d * static_cast<float>(sc[8 * h + 2 * j + s]);
          const uint8_t* q = b[i].qs + 32 * h + 16 * s;
          const uint8_t* hm = b[i].hmask + 16 * s;
          const int bit = 4 * h + j;
          for (int l = 0; l < 16; ++l)
            y[l] = dl * static_cast<float>(((q[l] >> (2 * j)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4));
        }
  }
}

template <typename B, bool kFifth>
void DequantizeQ45_K(const B* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    uint8_t sc[8], m[8];  // [8] sub-block scales, [8] mins
    UnpackScalesMinsK4(b[i].scales, sc, m);
    for (int s = 0; s < 8; ++s, y += 32) {  // sub-block s: chunk s / 2, nibble s % 2
      const float dl = d * static_cast<float>(sc[s]), ml = dmin * static_cast<float>(m[s]);
      const uint8_t* q = b[i].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 15;
        if constexpr (kFifth) v |= ((b[i].qh[l] >> s) & 1) << 4;
        y[l] = dl * static_cast<float>(v) - ml;
      }
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int s = 0; s < 2; ++s, y += 16) {
          const float dl = d * static_cast<float>(b[i].scales[8 * h + 2 * j + s]);
          const uint8_t* ql = b[i].ql + 64 * h + 32 * (j & 1) + 16 * s;
          const uint8_t* qh = b[i].qh + 32 * h + 16 * s;
          const int lshift = j < 2 ? 0 : 4;
          for (int l = 0; l < 16; ++l) {
            const int q = (((ql[l] >> lshift) & 15) | ((qh[l] >> (2 * j)) & 3) << 4) - 32;
            y[l] = dl * static_cast<float>(q);
          }
        }
  }
}

}  // namespace

bool IsExtraBlockType(DType t) {
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void UnpackScalesMinsK4(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int i = 0; i < 4; ++i) {
    sc[i] = s[i] & 63;
    m[i] = s[i + 4] & 63;
    sc[i + 4] = static_cast<uint8_t>((s[i + 8] & 15) | (s[i] >> 6) << 4);
    m[i + 4] = static_cast<uint8_t>((s[i + 8] >> 4) | (s[i + 4] >> 6) << 4);
  }
}

void UnpackScalesQ3K(const uint8_t* s, int8_t* sc) {
  for (int i = 0; i < 16; ++i) {
    const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = static_cast<int8_t>((lo | hi << 4) - 32);
  }
}

void DequantizeExtra(DType t, const void* src, float* dst, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: row not a multiple of the block size");
  switch (t) {
    case DType::kQ4_1:
      return DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case DType::kQ5_0:
      return DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case DType::kQ5_1:
      return DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case DType::kIQ4_NL:
      return DequantizeIQ4_NL(static_cast<const BlockIQ4_NL*>(src), dst, n);
    case DType::kQ2_K:
      return DequantizeQ2_K(static_cast<const BlockQ2_K*>(src), dst, n);
    case DType::kQ3_K:
      return DequantizeQ3_K(static_cast<const BlockQ3_K*>(src), dst, n);
    case DType::kQ4_K:
      return DequantizeQ45_K<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::kQ5_K:
      return DequantizeQ45_K<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::kQ6_K:
      return DequantizeQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
    default:
      CHECK_MSG(false, "ops: DequantizeExtra: not an extra block type");
  }
}

void QuantizeExtra(DType t, const float* src, void* dst, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: row not a multiple of the block size");
  switch (t) {
    case DType::kQ4_1:
      return QuantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::kQ5_0:
      return QuantizeQ5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::kQ5_1:
      return QuantizeQ5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::kIQ4_NL:
      return QuantizeIQ4_NL(src, static_cast<BlockIQ4_NL*>(dst), n);
    case DType::kQ2_K:
      return QuantizeQ2_K(src, static_cast<BlockQ2_K*>(dst), n);
    case DType::kQ3_K:
      return QuantizeQ3_K(src, static_cast<BlockQ3_K*>(dst), n);
    case DType::kQ4_K:
      return QuantizeQ4_K(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ5_K:
      return QuantizeQ5_K(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::kQ6_K:
      return QuantizeQ6_K(src, static_cast<BlockQ6_K*>(dst), n);
    default:
      CHECK_MSG(false, "ops: QuantizeExtra: not an extra block type");
  }
}

}  // namespace rotor::ops::ref
