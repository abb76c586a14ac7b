#include "ops/matmul.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/quant.h"
#include "ops/ref/blocks_ref.h"
#include "ops/ref/ref.h"

namespace rotor::ops {
namespace {

bool IsQuant(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

// One token's activations -> q8_0 blocks (natural order) on the given ISA.
void QuantizeActivationsOn(Isa isa, const float* x, int8_t* q, float* d, int64_t k) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::avx512::QuantizeActivations(x, q, d, k);
    case Isa::kAvx2:
      return internal::avx2::QuantizeActivations(x, q, d, k);
    case Isa::kScalar:
      return ref::QuantizeActivations(x, q, d, k);
  }
}

// The scalar path: ref math per output, threads over rows.
void ScalarGemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0,
                int64_t r1, float* y) {
  for (int64_t r = r0; r < r1; ++r) y[r] = ref::MatmulDot(w, r, x, qx, dx);
}

// qx/dx in natural order at the packed strides.
void ScalarGemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0,
                int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* /*panel*/) {
  const int64_t qs = internal::PackedQxStride(w.k), ds = internal::PackedDxStride(w.k);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = r0; r < r1; ++r)
      y[t * ldy + r] =
          ref::MatmulDot(w, r, x + t * w.k, qx ? qx + t * qs : nullptr, dx ? dx + t * ds : nullptr);
}

// Tokens [t0, t1) of an unpacked K-quant through the integer kernel, each
// token's activations quantized to 8 bits; the threads split the rows, each
// weight read once for all the tokens.
void IntegerRows(ThreadPool& pool, const Weight& w, const float* x, int64_t t0, int64_t t1,
                 float* y, int64_t ldy, MatmulScratch& scratch, Isa isa) {
  const int64_t k = w.k, xs = internal::KXsumStride(w.type, k), group = k / xs;
  int8_t* qx = scratch.qx();     // [m, k]
  float* dx = scratch.dx();      // [m, k / 32]
  float* xsum = scratch.xsum();  // [m, xs]: dx * (sum of qx) per group
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* q = qx + t * k;
    const float* d = dx + t * (k / ref::kBlock);
    QuantizeActivationsOn(isa, x + t * k, qx + t * k, dx + t * (k / ref::kBlock), k);
    for (int64_t b = 0; b < xs; ++b) {
      int32_t s = 0;
      for (int64_t j = 0; j < group; ++j) s += q[b * group + j];
      xsum[t * xs + b] = d[b * group / ref::kBlock] * static_cast<float>(s);
    }
  }
  auto gemv = isa == Isa::kAvx512 ? &internal::avx512::GemvK : &internal::avx2::GemvK;
  pool.ParallelFor(w.n, internal::kPanelRows, [&](int64_t r0, int64_t r1, int) {
    gemv(w, qx, dx, xsum, t0, t1, r0, r1, y, ldy);
  });
}

// Tokens [t0, t1) through the f32 panels: tasks of kRowsPerThread rows
// dequantized once x a chunk of <= 256 tokens.
void PanelRows(ThreadPool& pool, const Weight& w, const float* x, int64_t t0, int64_t t1,
               float* y, int64_t ldy, MatmulScratch& scratch, Isa isa) {
  const size_t rb = w.row_bytes;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  auto gemm = isa == Isa::kAvx512 ? &internal::avx512::Gemm : &internal::avx2::Gemm;
  constexpr int64_t kRows = MatmulScratch::kRowsPerThread;
  const int64_t tb = 256, n_tb = (t1 - t0 + tb - 1) / tb, n_rb = (w.n + kRows - 1) / kRows;
  CHECK_LE(n_rb * n_tb, int64_t{1} << 30);
  pool.Run(static_cast<int>(n_rb * n_tb), [&](int task, int thread) {
    const int64_t r0 = task % n_rb * kRows, a = t0 + task / n_rb * tb;
    const int64_t rows = std::min(kRows, w.n - r0);
    float* f = scratch.rows(thread);  // [rows, k]
    for (int64_t r = 0; r < rows; ++r)
      DequantizeRow(w.type, data + (r0 + r) * rb, f + r * w.k, w.k);
    const Weight fw = MakeWeight(DType::kF32, w.k, rows, f);
    gemm(fw, x, nullptr, nullptr, a, std::min(t1, a + tb), 0, rows, y + r0, ldy,
         scratch.panel(thread));
  });
}

// q4_1, q5_0, q5_1, iq4_nl, q2_K..q6_K on a SIMD ISA (see Matmul's comment).
void MatmulBlocks(ThreadPool& pool, const Weight& w, const float* x, int64_t m, float* y,
                  int64_t ldy, MatmulScratch& scratch, Isa isa) {
  if (isa != Isa::kScalar && internal::HasIntegerGemv(w.type, isa == Isa::kAvx512)) {
    const std::span<const uint8_t> sampled = scratch.sampled_rows();
    if (sampled.size() != static_cast<size_t>(m)) {  // not marked: by the number of rows
      if (m <= internal::kGemvKMaxTokens)
        return IntegerRows(pool, w, x, 0, m, y, ldy, scratch, isa);
      return PanelRows(pool, w, x, 0, m, y, ldy, scratch, isa);
    }
    // Sampled tokens the integer kernel, text the panels, run by run.
    for (int64_t a = 0; a < m;) {
      int64_t b = a + 1;
      while (b < m && sampled[b] == sampled[a]) ++b;
      (sampled[a] ? IntegerRows : PanelRows)(pool, w, x, a, b, y, ldy, scratch, isa);
      a = b;
    }
    return;
  }
  if (m == 1) {
    // DotRow dequantizes and adds in the f32 kernels' order (kernels.h): the
    // bits the panels below give the same token in a batch.
    const size_t rb = w.row_bytes;
    const uint8_t* data = static_cast<const uint8_t*>(w.data);
    pool.ParallelFor(w.n, internal::kPanelRows, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) y[r] = DotRow(w.type, data + r * rb, x, w.k);
    });
    return;
  }
  PanelRows(pool, w, x, 0, m, y, ldy, scratch, isa);
}

// Every product of `outs` (all packed, one k) for m tokens on the ISA (AVX-512
// or AVX2): X quantized once
// into the tile layout, then the 16-row groups of all the weights, laid end to
// end, split among the threads. Up to 16 tokens one pass over the weights
// (AVX-512 q8_0 / q4_0: 9-16 tokens in one kernel; the others run both tiles
// over each 4 groups, in L2); more, tasks of 4 groups each run every tile of
// 8 tokens.
void PackedProducts(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x, int64_t m,
                    MatmulScratch& scratch, Isa isa) {
  auto packed_matmul =
      isa == Isa::kAvx2 ? &internal::avx2::PackedMatmul : &internal::avx512::PackedMatmul;
  const int64_t k = outs[0].w->k;
  uint8_t* acts = scratch.acts();  // [m, k / 32, kPackedActBytes] in tiles
  int8_t* qx = scratch.qx();       // [m, PackedQxStride(k)]: per-token quantization
  float* dx = scratch.dx();        // [m, PackedDxStride(k)]
  const int64_t qs = internal::PackedQxStride(k), ds = internal::PackedDxStride(k);
  // Blocks [j0, j1) of every token (q8_0 quantizes each block alone). The
  // threads split the blocks, not the tokens: a tile keeps its tokens' fields
  // side by side, so threads holding tokens of one tile wrote the same cache
  // lines (split by blocks, batch 8 decode ran 14-44% faster: BENCHMARKS.md,
  // "Activation tiles split by blocks"). Ranges of 8 blocks hold whole
  // lines of every tile (8 x T tokens x 64 bytes = 8 T lines). AVX-512
  // quantizes and lays out each block in one pass (batch 8 decode 1.035x
  // the two passes below: BENCHMARKS.md, "Forty-eighth session").
  auto pack = [&](int64_t j0, int64_t j1, int) {
    if (isa == Isa::kAvx512) return internal::avx512::PackActivationTiles(x, m, k, j0, j1, acts);
    for (int64_t t = 0; t < m; ++t) {
      QuantizeActivationsOn(isa, x + t * k + j0 * 32, qx + t * qs + j0 * 32, dx + t * ds + j0,
                            (j1 - j0) * 32);
      ref::PackActivations(qx + t * qs, dx + t * ds, t, m, k, j0, j1, acts);
    }
  };
  static_assert(8 * internal::kPackedActBytes % 64 == 0);
  const int64_t nb = k / 32;
  if (m == 1)
    pack(0, nb, 0);
  else
    pool.ParallelFor(nb, 8, pack);
  // Groups of 16 rows (K-quants) or 32 (q8_0 / q4_0: PackedRows).
  auto groups_of = [](const Weight& w) { return internal::PackedGroupCount(w.type, w.n); };
  int64_t groups = 0;
  for (const MatmulOut& o : outs) groups += groups_of(*o.w);
  auto run = [&](int64_t g0, int64_t g1) {
    int64_t base = 0;
    for (const MatmulOut& o : outs) {
      const int64_t ng = groups_of(*o.w);
      const int64_t a = std::max(g0, base) - base, b = std::min(g1, base + ng) - base;
      base += ng;
      if (a < b) packed_matmul(*o.w, acts, m, a, b, o.y, o.ldy);
    }
  };
  // Work in chunks of 64 rows: 4 groups of 16 rows or 2 of 32.
  const int64_t chunk = 64 / internal::PackedRows(outs[0].w->type);
  if (m <= 2 * internal::kPackedTileTokens) {
    // Up to 16 tokens: each thread streams its own range of the weights, 64
    // rows at a time, and takes groups from the back of the
    // other's range when its own is done (the threads' waits at the end of
    // each product: 14% of a batch-8 step's samples before, 8% after;
    // BENCHMARKS.md, "Products of up to 8 tokens balanced by stealing").
    // Dynamic chunks from one shared front lost 10-25% at batch 2 and 4.
    pool.ParallelForStealing(groups, chunk, [&](int64_t g0, int64_t g1, int) { run(g0, g1); });
    return;
  }
  const int64_t n_tasks = (groups + chunk - 1) / chunk;
  CHECK_LE(n_tasks, int64_t{1} << 30);
  pool.Run(static_cast<int>(n_tasks),
           [&](int task, int) { run(task * chunk, std::min(groups, (task + 1) * chunk)); });
}

// The packed kernels of the ISA read w (AVX-512 and AVX2: every packed type).
bool RunsPacked(const Weight& w, Isa isa) {
  return w.packed != nullptr && isa != Isa::kScalar;
}

bool AllPacked(std::span<const MatmulOut> outs, Isa isa) {
  for (const MatmulOut& o : outs)
    if (!RunsPacked(*o.w, isa) || o.w->k != outs[0].w->k) return false;
  return true;
}

}  // namespace

size_t MatmulScratch::PanelBytes(int64_t max_k) {
  // The larger of: an f32 panel of kPanelRows rows x a 512-wide k slice (row
  // stride padded by up to 16 floats), and an integer panel of kPanelRows rows
  // x 640 bytes per 512 weights (the AVX-512 layout; AVX2 packs nothing).
  const size_t f32_panel = static_cast<size_t>(internal::kPanelRows) * 4 * internal::kFloatKpadMax;
  const size_t int_panel = static_cast<size_t>(internal::kPanelRows) *
                           internal::kIntPanelGroupBytes * static_cast<size_t>((max_k + 511) / 512);
  const size_t gemv = static_cast<size_t>(internal::GemvScratchBytes(max_k));
  return std::max({f32_panel, int_panel, gemv}) + 256;
}

void MatmulScratch::Reserve(int64_t max_m, int64_t max_k, int max_threads) {
  CHECK_GE(max_m, 1);
  CHECK_GE(max_k, 1);
  max_m_ = max_m;
  max_k_ = (max_k + ref::kBlock - 1) / ref::kBlock * ref::kBlock;
  qx_.Resize(static_cast<size_t>(max_m_ * internal::PackedQxStride(max_k_)));
  dx_.Resize(static_cast<size_t>(max_m_ * internal::PackedDxStride(max_k_)));
  panel_bytes_ = PanelBytes(max_k_);
  xsum_.Resize(static_cast<size_t>(max_m_ * (max_k_ / 16)));
  sampled_.reserve(static_cast<size_t>(max_m_));
  acts_.Resize(static_cast<size_t>(max_m_ * (max_k_ / ref::kBlock) * internal::kPackedActBytes));
  n_threads_ = 0;
  EnsureThreads(max_threads > 0 ? max_threads : HardwareThreads());
}

void MatmulScratch::EnsureThreads(int n_threads) {
  if (n_threads <= n_threads_) return;
  panels_.Resize(static_cast<size_t>(n_threads) * panel_bytes_);
  rows_.Resize(static_cast<size_t>(n_threads) * kRowsPerThread * static_cast<size_t>(max_k_));
  n_threads_ = n_threads;
}

void Matmul(ThreadPool& pool, const Weight& w, const float* x, int64_t m, float* y, int64_t ldy,
            MatmulScratch& scratch) {
  CHECK_MSG(IsSupported(w.type), "ops: Matmul: unsupported weight type");
  CHECK_GE(ldy, w.n);
  CHECK_GE(w.row_bytes, static_cast<size_t>(RowBytes(w.type, w.k)));
  if (m <= 0 || w.n <= 0) return;
  const bool quant = IsQuant(w.type);
  if (quant) CHECK_MSG(w.k % ref::kBlock == 0, "ops: Matmul: k not a multiple of 32");
  CHECK_MSG(m <= scratch.max_m() && w.k <= scratch.max_k(), "ops: Matmul: scratch too small");
  CHECK_MSG(w.k % Traits(w.type).block_size == 0, "ops: Matmul: k not a multiple of the block");
  scratch.EnsureThreads(pool.size());

  const Isa isa = ActiveIsa();
  if (RunsPacked(w, isa)) {
    CHECK_MSG(PackingHelps(w.type), "ops: Matmul: packed weights of a type PackWeight rejects");
    const MatmulOut out{&w, y, ldy};
    return PackedProducts(pool, std::span<const MatmulOut>(&out, 1), x, m, scratch, isa);
  }
  if (ref::IsExtraBlockType(w.type) && isa != Isa::kScalar)
    return MatmulBlocks(pool, w, x, m, y, ldy, scratch, isa);
  auto quantize = [&](const float* xr, int8_t* q, float* d) {
    QuantizeActivationsOn(isa, xr, q, d, w.k);
  };
  int8_t* qx = quant ? scratch.qx() : nullptr;  // [m, PackedQxStride(k)]
  float* dx = quant ? scratch.dx() : nullptr;   // [m, PackedDxStride(k)]

  if (m == 1) {
    if (quant) quantize(x, qx, dx);
    auto gemv = isa == Isa::kAvx512 ? &internal::avx512::Gemv
                : isa == Isa::kAvx2 ? &internal::avx2::Gemv
                                    : &ScalarGemv;
    pool.ParallelFor(w.n, internal::kPanelRows,
                     [&](int64_t r0, int64_t r1, int) { gemv(w, x, qx, dx, r0, r1, y); });
    return;
  }

  if (isa == Isa::kAvx512 &&
      m <= (quant ? internal::kGemvMaxTokensQuant : internal::kGemvMaxTokensFloat)) {
    const int64_t nb = w.k / ref::kBlock;
    for (int64_t t = 0; quant && t < m; ++t) quantize(x + t * w.k, qx + t * w.k, dx + t * nb);
    pool.ParallelFor(w.n, internal::kPanelRows, [&](int64_t r0, int64_t r1, int thread) {
      internal::avx512::GemvMulti(w, x, qx, dx, m, r0, r1, y, ldy, scratch.panel(thread));
    });
    return;
  }
  if (quant) {
    const int64_t qs = internal::PackedQxStride(w.k), ds = internal::PackedDxStride(w.k);
    pool.ParallelFor(m, 1, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) {
        switch (isa) {
          case Isa::kAvx512:
            internal::avx512::QuantizeActivationsPacked(x + t * w.k, qx + t * qs, dx + t * ds, w.k);
            break;
          case Isa::kAvx2:
            internal::avx2::QuantizeActivationsPacked(x + t * w.k, qx + t * qs, dx + t * ds, w.k);
            break;
          case Isa::kScalar:
            ref::QuantizeActivations(x + t * w.k, qx + t * qs, dx + t * ds, w.k);
            break;
        }
      }
    });
  }
  auto gemm = isa == Isa::kAvx512 ? &internal::avx512::Gemm
              : isa == Isa::kAvx2 ? &internal::avx2::Gemm
                                  : &ScalarGemm;
  // Tasks: row chunks (multiples of the panel) x token chunks. The weights are
  // re-read once per token chunk, so chunks are long; the float kernels sweep
  // k in slices of 512 (2 KiB per token in L2), the integer kernels all of k
  // (k + k / 8 bytes per token).
  const int64_t act_bytes = quant ? w.k + w.k / 8 : 2048;  // per token, in L2
  const int64_t tb = std::clamp<int64_t>((512 << 10) / act_bytes, 16, 256);
  const int64_t n_tb = (m + tb - 1) / tb;
  int64_t rb = 8 * internal::kPanelRows;
  while (rb > internal::kPanelRows && (w.n + rb - 1) / rb * n_tb < 4 * pool.size()) rb /= 2;
  const int64_t n_rb = (w.n + rb - 1) / rb;
  const int64_t n_tasks = n_rb * n_tb;
  CHECK_LE(n_tasks, int64_t{1} << 30);
  pool.Run(static_cast<int>(n_tasks), [&](int task, int thread) {
    const int64_t r0 = task % n_rb * rb, t0 = task / n_rb * tb;
    gemm(w, x, qx, dx, t0, std::min(m, t0 + tb), r0, std::min(w.n, r0 + rb), y, ldy,
         scratch.panel(thread));
  });
}

void MatmulGroup(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x, int64_t m,
                 MatmulScratch& scratch) {
  if (outs.empty() || m <= 0) return;
  const Weight& w0 = *outs[0].w;
  const Isa isa = ActiveIsa();
  if (AllPacked(outs, isa)) {
    CHECK_MSG(m <= scratch.max_m() && w0.k <= scratch.max_k(),
              "ops: MatmulGroup: scratch too small");
    for (const MatmulOut& o : outs) CHECK_GE(o.ldy, o.w->n);
    scratch.EnsureThreads(pool.size());
    return PackedProducts(pool, outs, x, m, scratch, isa);
  }
  const bool quant = IsQuant(w0.type);
  bool fused = !ref::IsExtraBlockType(w0.type) &&
               (m == 1 || (isa == Isa::kAvx512 && m <= (quant ? internal::kGemvMaxTokensQuant
                                                              : internal::kGemvMaxTokensFloat)));
  int64_t rows = 0;
  for (const MatmulOut& o : outs) {
    fused = fused && o.w->type == w0.type && o.w->k == w0.k;
    rows += o.w->n;
  }
  if (!fused) {
    for (const MatmulOut& o : outs) Matmul(pool, *o.w, x, m, o.y, o.ldy, scratch);
    return;
  }
  for (const MatmulOut& o : outs) {
    CHECK_MSG(IsSupported(o.w->type), "ops: MatmulGroup: unsupported weight type");
    CHECK_GE(o.ldy, o.w->n);
    CHECK_GE(o.w->row_bytes, static_cast<size_t>(RowBytes(o.w->type, o.w->k)));
  }
  if (quant) CHECK_MSG(w0.k % ref::kBlock == 0, "ops: MatmulGroup: k not a multiple of 32");
  CHECK_MSG(m <= scratch.max_m() && w0.k <= scratch.max_k(), "ops: MatmulGroup: scratch too small");
  scratch.EnsureThreads(pool.size());

  int8_t* qx = quant ? scratch.qx() : nullptr;  // [m, k]
  float* dx = quant ? scratch.dx() : nullptr;   // [m, k / 32]
  const int64_t nb = w0.k / ref::kBlock;
  for (int64_t t = 0; quant && t < m; ++t)
    QuantizeActivationsOn(isa, x + t * w0.k, qx + t * w0.k, dx + t * nb, w0.k);
  auto gemv = isa == Isa::kAvx512 ? &internal::avx512::Gemv
              : isa == Isa::kAvx2 ? &internal::avx2::Gemv
                                  : &ScalarGemv;
  // The weights' rows laid end to end; each thread takes one range of them.
  pool.ParallelFor(rows, internal::kPanelRows, [&](int64_t r0, int64_t r1, int thread) {
    int64_t base = 0;
    for (const MatmulOut& o : outs) {
      const int64_t a = std::max(r0, base) - base, b = std::min(r1, base + o.w->n) - base;
      base += o.w->n;
      if (a >= b) continue;
      if (m == 1)
        gemv(*o.w, x, qx, dx, a, b, o.y);
      else
        internal::avx512::GemvMulti(*o.w, x, qx, dx, m, a, b, o.y, o.ldy, scratch.panel(thread));
    }
  });
}

}  // namespace rotor::ops
