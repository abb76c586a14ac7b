// How K and V heads are stored in each KvType, and the Hadamard rotation.
//
// A cell's K (or V) row is its n_head_kv heads one after the other, each
// KvHeadBytes(type, head_dim) bytes. f32, f16 and bf16 store head_dim values.
// The block types quantize each head on its own, in blocks along head_dim of
// KvQuantBlock(head_dim) elements: 32 when head_dim is a multiple of 32 (then
// a head is GGML's row of q8_0 / q4_0 / q5_0 blocks, byte for byte), else 16
// or 8 (stories260K's head size 8: blocks of 8). A block never spans two
// heads, so per-head policies (h2o, snapkv, tova), which store each head of a
// cell for a different token, write a head without touching its neighbours.
// A block of B elements (GGML's layout with B in place of 32):
//   q8_0: f16 d, int8 q[B]                x[i] = d * q[i]
//   q4_0: f16 d, u8 qs[B / 2]             x[i] = d * ((qs[i] & 15) - 8),
//                                         x[i + B/2] = d * ((qs[i] >> 4) - 8)
//   q5_0: f16 d, u8 qh[B / 8], u8 qs[B/2] as q4_0 with bit 4 of quant i in
//                                         bit i of qh (little-endian), minus 16
// Quantization makes GGML's choices (q8_0 d = amax / 127, q = round(x / d);
// q4_0 d = max / -8, q = min(15, (int)(x / d + 8.5)); q5_0 with 16 and 31),
// or for keys in q4_0 / q5_0 the scale of least squared error (KvRounding):
// the same layout, read by the same decoders. Every path writes the same
// bytes: the scalar definitions (ops::ref::QuantizeQ8Blocks, the ScalarBlock
// of kv_quant.cc) and their AVX2 twins (ops' quant_avx2.cc, kv_quant_avx2.cc),
// which AVX-512 machines take too.
//
// Rotation (--kv-rotate): each block of B elements of a head is multiplied by
// the normalized Walsh-Hadamard matrix H_B (orthogonal and symmetric, so its
// own inverse). Rotating q and k alike leaves q.k unchanged; V rows are stored
// rotated and attention's output is rotated back. It spreads a head's
// outliers over its block before the block's one scale is chosen
// (ops::Hadamard, the same bits on every path).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_config.h"

namespace rotor {

bool KvTypeQuantized(KvType t);
// Elements per quantization (and rotation) block of a head: 32, 16 or 8 (the
// largest dividing head_dim), or 0 when head_dim is not a multiple of 8.
int KvQuantBlock(int head_dim);
// Bytes of one quantization block of `block` elements.
size_t KvBlockBytes(KvType t, int block);
// Bytes of one stored head of head_dim elements.
size_t KvHeadBytes(KvType t, int head_dim);
// Bytes per element, averaged (memory reports): 4, 2, 2, 1.0625, ...
double KvBytesPerElement(KvType t, int head_dim);

// How a q4_0 / q5_0 block's scale is chosen (q8_0 and the float types have
// one way).
enum class KvRounding {
  kGgml,  // GGML's (above): the bytes of its quantizer
  // The least squared error of five: GGML's scale, and for the block's
  // extreme mapped to level lo + 1, lo and lo - 1 (lo = -8 or -16) and to
  // GGML's scale, the least-squares scale of the levels that rounding gives
  // (each rounded to f16, as stored). Never worse than kGgml per block; a
  // third less KL divergence for 4- and 5-bit keys on stories260K
  // (docs/EVALUATION.md, "Least-squares key scales"). Keys carry a 4-bit
  // cache's loss, so the cache stores keys so and values as GGML does.
  kLeastSquares,
};
inline KvRounding KvRoundingOf(bool is_v) { return is_v ? KvRounding::kGgml : KvRounding::kLeastSquares; }

// n_heads heads of head_dim floats <-> their stored bytes.
void KvQuantizeHeads(KvType t, int head_dim, int n_heads, const float* src, uint8_t* dst,
                     KvRounding rounding = KvRounding::kGgml);
void KvDequantizeHeads(KvType t, int head_dim, int n_heads, const uint8_t* src, float* dst);

// One quantization block of `block` elements of a block type: its scale d
// and its signed integers (x[i] = d * q[i]: q8_0 -127..127, q4_0 -8..7, q5_0
// -16..15).
float KvUnpackBlock(KvType t, int block, const uint8_t* src, int8_t* q);

// Multiplies every block of `block` elements of x[n] by H_block (n a multiple
// of block, block a power of two). Applying it twice gives x back (to rounding).
void KvHadamard(float* x, int64_t n, int block);

// Deferred keys as stored with key offsets on (kv_key_offsets.h): out[i] =
// (k[i] - center[i]) / scale[i] for n values (out may be k). The cache's
// stores and attention's rows of a ubatch both use it: the same bytes.
void KvCenterKeys(const float* k, const float* center, const float* scale, int64_t n, float* out);

}  // namespace rotor
