// Y = X * W^T for every weight type: the projections of a Llama forward pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/memory.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace rotor::ops {

// A weight matrix in GGML order: ne[0] = k (input features, contiguous),
// ne[1] = n (output rows). Row i starts at data + i * row_bytes.
struct Weight {
  DType type;
  int64_t k;
  int64_t n;
  const void* data;
  size_t row_bytes;  // >= RowBytes(type, k)
  // Optional: the same matrix in PackWeight's layout (q8_0, q4_0, q3_K,
  // q4_K, q5_K, q6_K). The AVX-512 and AVX2 kernels use it for every m; the
  // scalar ISA reads `data`, which stays valid.
  const uint8_t* packed = nullptr;
};

// Row-interleaved copies for the q8_0 / q4_0 / q3_K .. q6_K kernels
// of AVX-512 and AVX2 (which reads each 64-byte vector as two halves of 8
// rows): groups of rows (16; q8_0 / q4_0 32, kernels.h) whose weights sit
// side by side, 4 bytes of each row per 64-byte vector of 16 rows, so one
// instruction advances 16 rows (AVX2: 8) and the f32 scaling runs once per
// block (sub-block) for them
// (ops_bench, 2 threads: AVX-512 q8_0 / q4_0 1.1-1.3x the row-major kernels
// for one token, 2.1-2.5x for 8; AVX2 1.1-1.8x and 1.7-3.5x; BENCHMARKS.md
// "Packed weights", "Packed K-quants", "Batched decode on AVX2"). Same size
// as the rows (+ an odd block's padding; per super-block q6_K + 32 bytes,
// q3_K + 96).
// Worth it when those kernels run: PackingHelps().
bool PackingHelps(DType type);
// Bytes PackWeight writes (64-byte aligned destination).
int64_t PackedWeightBytes(const Weight& w);
// Copies w (a PackingHelps type, k a multiple of its block) into dst in the
// packed layout. Rows [r0, r1) only (multiples of 16, or r1 = n), so callers
// can split the work.
void PackWeight(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1);

// A weight view over packed rows (row_bytes = RowBytes(type, k)).
inline Weight MakeWeight(DType type, int64_t k, int64_t n, const void* data) {
  return Weight{type, k, n, data, static_cast<size_t>(RowBytes(type, k))};
}

// Working memory of Matmul: the q8_0-quantized activations and per-thread
// weight panels. Sized once (constructor or Reserve); Matmul never allocates
// except once when first used with a pool larger than any before.
class MatmulScratch {
 public:
  MatmulScratch() = default;
  MatmulScratch(int64_t max_m, int64_t max_k, int max_threads = 0) {
    Reserve(max_m, max_k, max_threads);
  }
  // max_threads 0: HardwareThreads().
  void Reserve(int64_t max_m, int64_t max_k, int max_threads = 0);

  int64_t max_m() const { return max_m_; }
  int64_t max_k() const { return max_k_; }

  // Which of the next products' rows are sampled tokens fed back (1) and which
  // are given text (0: prompts), for the weights whose kernel depends on it
  // (q2_K .. q6_K rows as stored, without a packed copy: sampled rows take
  // the integer kernel, text rows the f32 panels, whatever else shares the
  // call, so a sequence's outputs do not depend on its batch). Read by every
  // product of exactly that many rows until changed; empty (the default),
  // such weights choose by the number of rows (up to kGemvKMaxTokens the
  // integer kernel).
  void SetSampledRows(std::span<const uint8_t> rows) { sampled_.assign(rows.begin(), rows.end()); }
  std::span<const uint8_t> sampled_rows() const { return sampled_; }

  // Internal to the kernels.
  // Activations quantized to q8_0 (f32 scales, not f16), in the kernel's order:
  int8_t* qx() { return qx_.data(); }  // [max_m, PackedQxStride(max_k)]
  float* dx() { return dx_.data(); }   // [max_m, PackedDxStride(max_k)]
  void EnsureThreads(int n_threads);
  // Per-thread panel of repacked weights: PanelBytes(max_k) bytes each.
  uint8_t* panel(int thread) { return panels_.data() + static_cast<size_t>(thread) * panel_bytes_; }
  static size_t PanelBytes(int64_t max_k);
  // Activations of the packed (row-interleaved) kernels:
  // [max_m * max_k / 32 * kPackedActBytes] bytes, in tiles of 8 tokens (kernels.h).
  uint8_t* acts() { return acts_.data(); }
  // Per-block sums of the quantized activations (K-quant kernels): [max_m, max_k / 16].
  float* xsum() { return xsum_.data(); }
  // Per-thread dequantized weight rows (block types without integer
  // kernels): [kDequantRows = 8, max_k] floats each.
  float* rows(int thread) {
    return rows_.data() +
           static_cast<size_t>(thread) * kRowsPerThread * static_cast<size_t>(max_k_);
  }
  static constexpr int kRowsPerThread = 8;

 private:
  int64_t max_m_ = 0, max_k_ = 0;
  int n_threads_ = 0;
  size_t panel_bytes_ = 0;
  AlignedBuffer<int8_t> qx_;
  AlignedBuffer<float> dx_;
  AlignedBuffer<uint8_t> panels_;  // [n_threads, panel_bytes_]
  AlignedBuffer<float> xsum_;      // [max_m, max_k / 16]
  std::vector<uint8_t> sampled_;   // SetSampledRows
  AlignedBuffer<uint8_t> acts_;    // [max_m, max_k / 32, kPackedActBytes] (tiles of 8)
  AlignedBuffer<float> rows_;      // [n_threads, kRowsPerThread, max_k]
};

// Y[m, n] = X[m, k] * W^T; y's row stride is ldy floats (>= n). Every type
// ops::IsSupported accepts; k a multiple of the type's block (32; 256 for the
// K-quants). Error per output y = sum_j w_j x_j (u = 2^-24, w the exactly
// dequantized weights, d_x(j) = amax of x's block of 32 / 127):
// - f32: FMA in f32. f16/bf16: weights converted exactly to f32, then f32 FMA:
//   ~(k / 8 + 64) u sum |w x|.
// - q8_0/q4_0 (every m, every ISA): X quantized to q8_0 per block of 32 (f32
//   scale), exact integer block dot products, f32 accumulation of the scaled
//   block sums: <= sum_j |w_j| d_x(j) / 2 (= |w_j| amax_block / 254) + the f32
//   accumulation (nb + 64) u sum |w| |x|.
// - q2_K, q3_K, q4_K, q5_K, q6_K rows as stored on AVX-512 or AVX2, the rows
//   SetSampledRows marks (unmarked calls: m <= 16): the same q8_0
//   activation quantization (sum_j |w_j| d_x(j) / 2), exact int32 sums of 4
//   products, f32 accumulation of the scaled lane sums and of the sub-block
//   min terms (q2_K/q4_K/q5_K: dmin * m_i * d_x * sum of qx over the
//   sub-block): + (k / 4 + 64) u sum |w_j| (|x_j| + d_x(j)).
// - q3_K, q4_K, q5_K, q6_K with a packed copy on AVX-512 or AVX2 (every m): the
//   same bound.
// - q4_1, q5_0, q5_1, iq4_nl (always), the K-quants' other rows, and every
//   block type on the scalar ISA: weight rows dequantized exactly to f32
//   (GGML's arithmetic), x not quantized, the f32 kernels: the f32 bound.
// m == 1 is matrix-vector (memory-bound: each weight read once, 4 rows per
// pass (f32 / f16 / bf16 on AVX-512: one), software prefetch); small batches
// (AVX-512: m <= 16 for float types, <= 8 for q types) use the same kernels
// with several tokens per weight load;
// larger m packs 8-row weight panels once per chunk of <= 256 tokens and runs
// register tiles (f32: 4 rows x 5 tokens; int8: 4 x 4 over a layout where each
// int32 lane accumulates a whole block, so the f32 scaling runs once per 16
// blocks). Weights with a packed copy on AVX-512 (AVX2: q8_0 / q4_0) take
// one kernel for every m instead (see PackWeight): the scaled block sums of a row are
// accumulated one block after the other (nb roundings, within the bound
// above), identically for every m. Threads split rows (and token chunks)
// through the pool. Not reentrant for one scratch: concurrent calls need
// their own MatmulScratch.
void Matmul(ThreadPool& pool, const Weight& w, const float* x, int64_t m, float* y, int64_t ldy,
            MatmulScratch& scratch);

// One product of a MatmulGroup: Y[m, w.n] (row stride ldy) = X * W^T.
struct MatmulOut {
  const Weight* w;
  float* y;
  int64_t ldy;
};
// Several weights applied to the same X (Q, K and V; gate and up): the same
// results as one Matmul per weight, bit for bit. When the weights share type
// and k and the matrix-vector kernels apply (m == 1, or small batches on
// AVX-512), X is quantized once and every row of every weight is split among
// the threads in one parallel region (one synchronisation instead of one per
// weight); otherwise the Matmuls run one after the other.
void MatmulGroup(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x, int64_t m,
                 MatmulScratch& scratch);

}  // namespace rotor::ops
