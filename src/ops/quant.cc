#include "ops/quant.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/ref/blocks_ref.h"
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
         t == DType::kQ4_0 || ref::IsExtraBlockType(t);
}

namespace {

// The block types q4_1 .. q6_K: dequantized (AVX-512 or scalar) kChunk (512)
// elements at a time, then the ISA's f32 dot / axpy kernel.
constexpr int64_t kChunk = internal::kFloatSumK;
static_assert(kChunk % 256 == 0, "whole K-quant super-blocks");

void DequantizeExtra(DType t, const void* src, float* dst, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: row not a multiple of the block size");
  if (ActiveIsa() == Isa::kAvx512) return internal::avx512::DequantizeBlocks(t, src, dst, n);
  ref::DequantizeExtra(t, src, dst, n);
}

// One chunk of at most kFloatSumK values in the f32 products' order.
float DotChunkF32(const float* w, const float* x, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::DotChunkF32(w, x, n);
    case Isa::kAvx2:
      return internal::avx2::DotChunkF32(w, x, n);
    case Isa::kScalar:
      break;
  }
  return ref::DotRow(DType::kF32, w, x, n);
}

void AxpyF32(float a, const float* w, float* y, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::AxpyRow(DType::kF32, a, w, y, n);
    case Isa::kAvx2:
      return internal::avx2::AxpyRow(DType::kF32, a, w, y, n);
    case Isa::kScalar:
      break;
  }
  ref::AxpyRow(DType::kF32, a, w, y, n);
}

float DotExtra(DType t, const void* w_row, const float* x, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: DotRow: row not a multiple of the block size");
  alignas(64) float buf[kChunk];  // [kChunk] dequantized weights
  const int64_t chunk_bytes = RowBytes(t, kChunk);
  // Chunk by chunk as the f32 kernels add (kernels.h), so a token's row
  // alone equals its row in a batch (dequantized rows through the panels).
  float sum = 0.f;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    DequantizeExtra(t, static_cast<const uint8_t*>(w_row) + i / kChunk * chunk_bytes, buf, len);
    const float s = DotChunkF32(buf, x + i, len);
    sum = i == 0 ? s : sum + s;
  }
  return sum;
}

void AxpyExtra(DType t, float a, const void* row, float* y, int64_t n) {
  CHECK_MSG(n % Traits(t).block_size == 0, "ops: AxpyRow: row not a multiple of the block size");
  alignas(64) float buf[kChunk];  // [kChunk] dequantized row
  const int64_t chunk_bytes = RowBytes(t, kChunk);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    DequantizeExtra(t, static_cast<const uint8_t*>(row) + i / kChunk * chunk_bytes, buf, len);
    AxpyF32(a, buf, y + i, len);
  }
}

}  // namespace

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  if (ref::IsExtraBlockType(t)) return DequantizeExtra(t, src, dst, n);
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

void F32ToF16Row(const float* src, uint16_t* dst, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return internal::avx512::F32ToF16Row(src, dst, n);
    case Isa::kAvx2:
      return internal::avx2::F32ToF16Row(src, dst, n);
    case Isa::kScalar:
      break;
  }
  ref::QuantizeRow(DType::kF16, src, dst, n);
}

void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out) {
  // AVX-512 machines take the AVX2 kernel: a block is at most 32 values.
  if (ActiveIsa() != Isa::kScalar && (block == 8 || block == 16 || block == 32))
    return internal::avx2::QuantizeQ8Blocks(x, n, block, out);
  ref::QuantizeQ8Blocks(x, n, block, out);
}

void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d) {
  CHECK(block > 0 && n % block == 0);
  if (ActiveIsa() != Isa::kScalar && (block == 8 || block == 16 || block == 32))
    return internal::avx2::QuantizeQ8BlocksF32(x, n, block, q, d);
  ref::QuantizeQ8BlocksF32(x, n, block, q, d);
}

float DotRow(DType t, const void* w_row, const float* x, int64_t n) {
  if (ref::IsExtraBlockType(t)) return DotExtra(t, w_row, x, n);
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
  if (ref::IsExtraBlockType(t)) return AxpyExtra(t, a, row, y, n);
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
