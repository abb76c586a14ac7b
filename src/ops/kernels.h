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
// f32 panels hold a k slice of kFloatKc per pass, rows padded to <= kFloatKpadMax.
inline constexpr int kFloatKc = 512;
inline constexpr int kFloatKpadMax = kFloatKc + 16;
// Every f32 / f16 / bf16 product of an ISA adds in one order, whatever the
// kernel (m == 1, small batches, panels) or the number of tokens, so a token's
// outputs do not depend on the batch it shares: per chunk of kFloatSumK
// values of k, one FMA chain per SIMD lane over the chunk's vector-wide slices
// in order (the row's last slice zero-padded), the lanes summed by the ISA's
// Reduce4 tree; the chunks' sums added in order (the first taken as it is).
// The chunk is the panels' k slice: prefill's panel kernels keep their code
// and order (a tile rewritten to reduce per chunk, 256 or 512 values, cost
// them 2-18% at m = 512), the one- and few-token kernels follow it.
inline constexpr int kFloatSumK = kFloatKc;
// AVX-512 integer panels: bytes per row per group of 512 weights.
inline constexpr int kIntPanelGroupBytes = 640;

// Activation layout of the m > 1 integer kernels: token t's quants start at
// qx + t * PackedQxStride(k) and its scales at dx + t * PackedDxStride(k); the
// ISA decides the order inside (QuantizeActivationsPacked). Groups of 16 blocks.
inline constexpr int64_t PackedQxStride(int64_t k) { return (k + 511) / 512 * 512; }
inline constexpr int64_t PackedDxStride(int64_t k) { return (k / 32 + 15) / 16 * 16; }

// Small batches take the matrix-vector kernels when the ISA has them (the
// weights are read once, no panel is packed): up to 16 tokens for f32 / f16 /
// bf16, up to 8 for q8_0 / q4_0 (measured crossover with the panel kernels).
inline constexpr int kGemvMaxTokensFloat = 16;
inline constexpr int kGemvMaxTokensQuant = 8;
inline constexpr int64_t GemvScratchBytes(int64_t k) {
  return kGemvMaxTokensQuant * 192 * ((k / 32 + 1) / 2);
}

// Row-interleaved q8_0 / q4_0 (PackWeight, matmul.h): per group of 32 rows,
// one stream of block pairs: the 32 rows' f16 scales of both blocks (128
// bytes), then the two blocks' quants. A block is lines of 128 bytes, each
// 4 bytes x 32 rows (a zmm of rows 0-15, then one of rows 16-31): 8 lines
// for q8_0 (unsigned q + 128), 4 for q4_0, as stored (byte i: element i in
// the low nibble, i + 16 in the high one; unsigned q + 8). One stream for 32
// rows lets a kernel feed each broadcast activation to both halves' products
// (BENCHMARKS.md, "Fifty-second session"). An odd last block is padded to a
// pair.
//
// Row-interleaved q2_K .. q6_K: per group of 16 rows, one record per
// super-block (256 weights), records end to end. A record holds each field of
// the 16 rows' blocks side by side: f16 fields (d, dmin) as 16 halves, byte
// fields as zmm of 4 bytes x 16 rows (bytes 4 i .. 4 i + 3 of every row in
// zmm i), bytes unchanged, except the quants of q2_K, q3_K, q5_K and q6_K:
// their 2-, 3-, 5- and 6-bit values are recombined so that 2 zmm hold 8 zmm
// of values (q2_K), 3 zmm hold 8 (q3_K), 5 zmm hold 8 (q5_K) and 3 zmm hold 4
// (q6_K): PackedQ2Byte .. PackedQ6Byte; and q3_K's 6-bit scales, stored as
// 16 int8 (sc - 32) per row. Offsets: PackedK below. Same size as the rows
// (q6_K: + 32 bytes per record, to keep records 64-byte aligned; q3_K: + 96,
// the unpacked scales and the alignment).
inline constexpr int kPackedRows = 16;
inline constexpr bool IsPackedK(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}
// Rows per group: 16 for the K-quants, 32 for q8_0 / q4_0.
inline constexpr int PackedRows(DType t) { return IsPackedK(t) ? kPackedRows : 2 * kPackedRows; }
// Groups of a packed matrix of n rows (the last may be partial).
inline constexpr int64_t PackedGroupCount(DType t, int64_t n) {
  return (n + PackedRows(t) - 1) / PackedRows(t);
}
inline constexpr int kPackedLine = 128;  // q8_0 / q4_0: bytes of one quad of 32 rows
// Byte offsets inside a K record; -1: the type has no such field.
struct PackedKLayout {
  int d, dmin, scales, qs, bytes;
};
inline constexpr PackedKLayout PackedK(DType t) {
  // q4_K: d, dmin, 12 scale bytes (3 zmm), qs 128 (32 zmm).
  // q5_K: d, dmin, scales (3 zmm), the 5-bit values (40 zmm).
  // q6_K: 16 int8 scales (4 zmm), the 6-bit values (48 zmm), d, padding.
  // q3_K: 16 int8 scales sc - 32 (4 zmm), the 3-bit values (24 zmm), d, padding.
  // q2_K: the 16 scale bytes sc | m << 4 (4 zmm), the 2-bit values (16 zmm), d, dmin.
  return t == DType::kQ4_K   ? PackedKLayout{0, 32, 64, 256, 2304}
         : t == DType::kQ5_K ? PackedKLayout{0, 32, 64, 256, 2816}
         : t == DType::kQ3_K ? PackedKLayout{1792, -1, 0, 256, 1856}
         : t == DType::kQ2_K ? PackedKLayout{1280, 1312, 0, 256, 1344}
                             : PackedKLayout{3328, -1, 0, 256, 3392};
}
// q2_K values in a record: sub-block s (16 weights from 16 s; scale byte s)
// is zmm s from qs. Byte 4 r + b of it holds, for row r, v_c = q(16 s + 4 c +
// b) in bits 2 c (c < 4): v_c is zmm of values c of the sub-block, quad 4 (s
// % 2) + c of activation block s / 2. q: the 2-bit value, the weight being
// d * sc * q - dmin * m.
inline constexpr int PackedQ2Byte(int s, int r, int b) { return 64 * s + 4 * r + b; }
// q3_K values in a record: block j (32 weights from 32 j; sub-blocks 2 j and
// 2 j + 1) is 3 zmm from qs + 192 j. Byte 4 r + b of zmm i holds, for row r,
// v_2i = q(32 j + 8 i + b) in bits 0-2 and v_2i+1 = q(32 j + 8 i + 4 + b) in
// bits 3-5; bits 6-7 of zmm 0 and 1 hold bits 0-1 of v_6 and v_7, bits 6 and
// 7 of zmm 2 their bit 2. v_i: the 3-bit values of weights 32 j + 4 i + b
// (zmm of values i: quad i of activation block j). q: the unsigned 3-bit
// value (2 bits of qs, 1 of hmask), the weight being d * (sc - 32) * (q - 4).
inline constexpr int PackedQ3Byte(int j, int i, int r, int b) {
  return 192 * j + 64 * i + 4 * r + b;
}
// q6_K values in a record: sub-block s (16 weights from 16 s, scale s) is 3
// zmm from qs + 192 s. Byte 4 r + b of zmm i (i < 3) holds, for row r, the
// value q(16 s + 4 i + b) in bits 0-5 and 2 bits of q(16 s + 12 + b) in bits
// 6-7 (its bits 0-1 in zmm 0, 2-3 in zmm 1, 4-5 in zmm 2). q: the unsigned
// 6-bit value, the weight being d * sc * (q - 32).
inline constexpr int PackedQ6Byte(int s, int i, int r, int b) {
  return 192 * s + 64 * i + 4 * r + b;
}
// q5_K values in a record: sub-block j (32 weights from 32 j) is 5 zmm from
// qs + 320 j. Byte 4 r + b of zmm i holds, for row r, v_i = q(32 j + 4 i + b)
// in bits 0-4 and three bits of v_5..v_7 in bits 5-7: zmm 0, 1, 2 bits 0-2 of
// v_5, v_6, v_7; zmm 3 bits 3-4 of v_5 and bit 3 of v_7; zmm 4 bits 3-4 of
// v_6 and bit 4 of v_7. q: the 5-bit value, the weight d * sc * q - dmin * m.
inline constexpr int PackedQ5Byte(int j, int i, int r, int b) {
  return 320 * j + 64 * i + 4 * r + b;
}
// q5_0 (d (q - 16)) and iq4_nl (d times an int8 table) blocks are q8_0 blocks
// of the same scale: their packed copies are q8_0's layout, read by q8_0's
// kernels (1.55x and 1.89x their rows' bytes; the f32 path they took before
// ran 3.4x slower than q8_0's packed kernel for one token, 4.5x for 512).
inline constexpr DType PackedLayout(DType t) {
  return t == DType::kQ5_0 || t == DType::kIQ4_NL ? DType::kQ8_0 : t;
}
inline constexpr int PackedBlockBytes(DType t) {
  return PackedLayout(t) == DType::kQ8_0 ? 1024 : 512;
}
inline constexpr int64_t PackedPairBytes(DType t) { return 128 + 2 * PackedBlockBytes(t); }
inline constexpr int64_t PackedGroupBytes(DType t, int64_t k) {
  return IsPackedK(t) ? k / 256 * PackedK(t).bytes : (k / 32 + 1) / 2 * PackedPairBytes(t);
}
// Block j of a q8_0 / q4_0 group: its 32 scales and its quants.
inline constexpr int64_t PackedScalesAt(DType t, int64_t j) {
  return j / 2 * PackedPairBytes(t) + j % 2 * 64;
}
inline constexpr int64_t PackedQuantsAt(DType t, int64_t j) {
  return j / 2 * PackedPairBytes(t) + 128 + j % 2 * PackedBlockBytes(t);
}

// Activations for the packed kernels, tiles of up to 8 tokens: tile i (tokens
// [8 i, 8 i + T)) starts at 8 i * nb * kPackedActBytes; per block j, T * 64
// bytes of 16 fields [field][token], 4 bytes each: 8 int32 quads, then
// sum(q) (int32), the q8_0 scale dx (f32), the sum of the first 16 q (int32;
// the sub-blocks of 16 of q2_K, q3_K, q6_K), dx * sum(q) (f32; the q4_K /
// q5_K mins), the int32 biases -128 sum(q) and -8 sum(q) that start the
// AVX-512 q8_0 / q4_0 sums (a broadcast from memory is a load; from a
// register it is a shuffle), and dx times the sums of the first and the last
// 16 q (f32; q2_K's mins per sub-block of 16).
inline constexpr int kPackedTileTokens = 8;
inline constexpr int kPackedActBytes = 64;
inline constexpr int kActSum = 8, kActScale = 9, kActSumLo = 10, kActXsum = 11;
inline constexpr int kActBiasQ8 = 12, kActBiasQ4 = 13, kActXsumLo = 14, kActXsumHi = 15;

// q2_K .. q6_K rows as stored, on AVX-512 and AVX2 (a product without a
// packed copy: a model loaded with pack_matrices false, tests, ops_bench; a
// model's packed copies take PackedMatmul for every m): the integer kernel
// GemvK (activations quantized to 8 bits), kGemvKTile tokens a call with each
// weight super-block unpacked once for them (q3_K / q6_K on AVX-512: 8), the
// rest token by token; every (row, token) output takes the same operations
// for any m. Or the f32 panels on dequantized rows (x not rounded), faster
// for prompts than GemvK (which ran pp512 at 0.65x on a 110M Q3_K_M model,
// 2 threads; BENCHMARKS.md "Seventy-third session"). Which one a row takes is
// the caller's (MatmulScratch::SetSampledRows: sampled tokens the integer
// kernel, prompt text the panels, in any batch); unmarked products take the
// integer kernel up to kGemvKMaxTokens rows. The scalar ISA and the other
// block types dequantize weight rows and run the f32 kernels (exact).
inline constexpr int kGemvKMaxTokens = 16;
inline constexpr int kGemvKTile = 4;
// Elements per activation sum of GemvK's xsum: q2_K sums per 16, the others per 32.
inline constexpr int64_t KXsumStride(DType t, int64_t k) {
  return t == DType::kQ2_K ? k / 16 : k / 32;
}
inline constexpr bool HasIntegerGemv(DType t, bool /*avx512*/) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}
// Rows the f32 fallback of the block types dequantizes per task.
inline constexpr int kDequantRows = 8;

// Aborts: t is not a type the kernel handles (portable code).
[[noreturn]] void UnsupportedType(DType t);

#define ROTOR_OPS_KERNELS                                                                       \
  /* y[r] for r in [r0, r1), one token (m == 1). qx/dx: the token quantized (q types only). */  \
  void Gemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0,     \
            int64_t r1, float* y);                                                              \
  /* y[t * ldy + r] for t in [t0, t1), r in [r0, r1). x: [m, k]; qx, dx: packed (see above). */ \
  void Gemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0,     \
            int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* panel);         \
  void QuantizeActivations(const float* x, int8_t* q, float* d, int64_t k);                     \
  /* For Gemm: q [PackedQxStride(k)], d [PackedDxStride(k)] in the ISA's own order. */          \
  void QuantizeActivationsPacked(const float* x, int8_t* q, float* d, int64_t k);               \
  void DequantizeRow(DType t, const void* src, float* dst, int64_t n);                          \
  void F32ToF16Row(const float* src, uint16_t* dst, int64_t n);                                 \
  float DotRow(DType t, const void* w_row, const float* x, int64_t n);                          \
  /* sum w[i] x[i], n <= kFloatSumK: one chunk in the f32 products' order (above). */           \
  float DotChunkF32(const float* w, const float* x, int64_t n);                                 \
  void AxpyRow(DType t, float a, const void* row, float* y, int64_t n);                         \
  void RmsNorm(const float* x, const float* weight, float* out, int64_t n, float eps);          \
  void Softmax(float* x, int64_t n);                                                            \
  void SwiGlu(const float* gate, const float* up, float* out, int64_t n);                       \
  void Add(float* x, const float* y, int64_t n);                                                \
  void Scale(float* x, float s, int64_t n);

namespace avx2 {
ROTOR_OPS_KERNELS
// q2_K .. q6_K; arguments as avx512::GemvK.
void GemvK(const Weight& w, const int8_t* qx, const float* dx, const float* xsum, int64_t t0,
           int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy);
// As avx512::PackedMatmul (the same results, bit for bit): q8_0 / q4_0, and
// q2_K .. q6_K by PackedMatmulK (gemv_packed_kquant_avx2.cc).
void PackedMatmul(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                  int64_t ldy);
void PackedMatmulK(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1,
                   float* y, int64_t ldy);
// block 8, 16 or 32 (also the AVX-512 path: a block fills at most 4 registers).
void QuantizeQ8Blocks(const float* x, int64_t n, int block, uint8_t* out);
void QuantizeQ8BlocksF32(const float* x, int64_t n, int block, int8_t* q, float* d);
void Hadamard(float* x, int64_t n, int block);
}  // namespace avx2
namespace avx512 {
ROTOR_OPS_KERNELS
// m in [2, kGemvMaxTokensFloat / Quant] tokens, each weight read once: x [m, k]; qx [m, k]
// and dx [m, k / 32] in QuantizeActivations' order; y [m, ldy]. scratch:
// GemvScratchBytes(k) bytes.
void GemvMulti(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t m,
               int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* scratch);
// q2_K .. q6_K: y[t * ldy + r] for tokens t in [t0, t1) and rows r in [r0,
// r1). Token t: qx + t k [k] and dx + t k / 32 [k / 32] from
// QuantizeActivations; xsum + t KXsumStride(type, k): q4_K / q5_K [k / 32]
// dx[b] * (sum of qx over block b), q2_K [k / 16] the same per 16, unused for
// q3_K / q6_K.
void GemvK(const Weight& w, const int8_t* qx, const float* dx, const float* xsum, int64_t t0,
           int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy);
// y[t * ldy + r] for every token t < m and the rows of groups [g0, g1) of
// w.packed (row r = 16 g + lane; rows >= w.n are not written).
void PackedMatmul(const Weight& w, const uint8_t* acts, int64_t m, int64_t g0, int64_t g1, float* y,
                  int64_t ldy);
// Blocks [j0, j1) of the m tokens of x [m, k] quantized to q8_0 into the
// activation tiles at acts (above, kPackedActBytes): the same bytes as
// QuantizeActivations and ref::PackActivations, one pass per block.
void PackActivationTiles(const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1,
                         uint8_t* acts);
// q4_1, q5_0, q5_1, iq4_nl, q2_K .. q6_K -> f32, equal to ref::DequantizeRow.
void DequantizeBlocks(DType t, const void* src, float* dst, int64_t n);
}  // namespace avx512

#undef ROTOR_OPS_KERNELS

}  // namespace rotor::ops::internal
