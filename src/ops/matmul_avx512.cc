// AVX-512 matmul kernels (Zen 4: F, BW, VL, DQ, VNNI, BF16).
//
// f32 / f16 / bf16 weights: converted exactly to f32, FMA in f32, added in
// kernels.h's order (chunks of kFloatSumK) on every path, so any m gives a
// token the same bits.
//   m == 1 and small m: gemv_avx512.cc (weights read once).
//   m > 1: a panel of 8 rows converted to f32 once per token chunk, then a
//   4-row x 5-token register tile (20 accumulators) over k.
// q8_0 / q4_0 weights, activations quantized to q8_0 (qx signed, dx f32):
//   one zmm covers a block pair (64 weights); vpdpbusd needs an unsigned
//   operand, so one side is biased and the bias removed exactly in int32 by
//   starting the dot product from a correction vector:
//   m == 1: weights unsigned (q8_0: w + 128 = w ^ 0x80; q4_0: the nibble, w + 8),
//           correction -bias * (4-byte partial sums of x), once per block pair.
//   m > 1: activations unsigned (x + 128), weights signed; a panel of 8 rows
//           holds per block pair the weights, their correction -128 * (partial
//           sums of w) and the scales as a lane pattern, made once per token chunk.
//   Each block pair's int32 lanes are converted to f32 and accumulated with
//   the scale pattern d_w * d_x (lanes 0-7: block b, 8-15: block b + 1).
#include <immintrin.h>

#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

constexpr int kPr = kPanelRows;  // rows per panel

// ---------------------------------------------------------------- f32 family

// Converts k values [k0, k0 + kc) of rows [r0, r0 + kPr) to f32 (zero rows past
// n, zeros past kc up to a multiple of 16): panel [kPr, kpad].
template <DType kT>
void PackFloatPanel(const Weight& w, int64_t r0, int64_t k0, int64_t kc, float* panel,
                    int64_t kpad) {
  const int64_t kc16 = (kc + 15) / 16 * 16;
  for (int r = 0; r < kPr; ++r) {
    float* dst = panel + r * kpad;
    if (r0 + r >= w.n) {
      for (int64_t i = 0; i < kc16; i += 16) _mm512_store_ps(dst + i, _mm512_setzero_ps());
      continue;
    }
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
    // Plain loads but for the tail: masked loads are slow on Zen when they cross a page.
    for (int64_t i = 0; i < kc16; i += 16)
      _mm512_store_ps(dst + i, i + 16 <= kc ? LoadW<kT>(row, k0 + i)
                                            : LoadWMasked<kT>(row, k0 + i, TailMask16(kc - i)));
  }
}

// y[t * ldy + r] (+)= for 4 panel rows (f32, stride kpad) and kTok tokens (x
// stride ldx) over k values [0, k) of the given pointers: one chunk of kernels.h's order
// (kFloatSumK == kFloatKc), added to y when `accumulate`.
template <int kTok>
void TileFloat(const float* panel, int64_t kpad, const float* x, int64_t ldx, int64_t k,
               bool accumulate, int n_rows, float* y, int64_t ldy) {
  __m512 acc[4][kTok];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = _mm512_load_ps(panel + r * kpad + i);
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (i < k) {
    const __mmask16 mk = TailMask16(k - i);
    __m512 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = _mm512_load_ps(panel + r * kpad + i);
    for (int t = 0; t < kTok; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + t * ldx + i);
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < kTok; ++t) {
    __m128 s = Reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
    if (n_rows == 4) {
      if (accumulate) s = _mm_add_ps(s, _mm_loadu_ps(y + t * ldy));
      _mm_storeu_ps(y + t * ldy, s);
    } else {
      alignas(16) float out[4];  // [4]
      _mm_store_ps(out, s);
      for (int r = 0; r < n_rows; ++r)
        y[t * ldy + r] = accumulate ? y[t * ldy + r] + out[r] : out[r];
    }
  }
}

constexpr int kFloatTokens = 5;

template <int kTok = kFloatTokens>
void TileFloatAny(int n_tok, const float* panel, int64_t kpad, const float* x, int64_t ldx,
                  int64_t k, bool accumulate, int n_rows, float* y, int64_t ldy) {
  if constexpr (kTok > 1) {
    if (n_tok < kTok)
      return TileFloatAny<kTok - 1>(n_tok, panel, kpad, x, ldx, k, accumulate, n_rows, y, ldy);
  }
  TileFloat<kTok>(panel, kpad, x, ldx, k, accumulate, n_rows, y, ldy);
}

// k-chunk outermost: a panel slice (8 rows x kFloatKc, 16 KiB) stays in L1 while
// the task's tokens sweep it, and the tokens' x slices (<= 256 x 2 KiB) in L2.
template <DType kT>
void GemmFloat(const Weight& w, const float* x, int64_t t0, int64_t t1, int64_t r0, int64_t r1,
               float* y, int64_t ldy, uint8_t* panel_bytes) {
  // Row stride off a multiple of 4 KiB so the 8 rows do not share L1 sets.
  constexpr int64_t kpad = kFloatKpadMax;
  float* panel = reinterpret_cast<float*>(panel_bytes);  // [kPr, kpad]
  for (int64_t k0 = 0; k0 < w.k; k0 += kFloatKc) {
    const int64_t kc = w.k - k0 < kFloatKc ? w.k - k0 : kFloatKc;
    for (int64_t p = r0; p < r1; p += kPr) {
      PackFloatPanel<kT>(w, p, k0, kc, panel, kpad);
      const int64_t p_end = p + kPr < r1 ? p + kPr : r1;
      for (int64_t t = t0; t < t1; t += kFloatTokens) {
        const int n_tok = static_cast<int>(t1 - t < kFloatTokens ? t1 - t : kFloatTokens);
        for (int64_t r = p; r < p_end; r += 4) {
          const int n_rows = static_cast<int>(p_end - r < 4 ? p_end - r : 4);
          TileFloatAny(n_tok, panel + (r - p) * kpad, kpad, x + t * w.k + k0, w.k, kc, k0 > 0,
                       n_rows, y + t * ldy + r, ldy);
        }
      }
    }
  }
}

}  // namespace

float DotChunkF32(const float* w, const float* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc);
  if (i < n) {
    const __mmask16 mk = TailMask16(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, w + i), _mm512_maskz_loadu_ps(mk, x + i), acc);
  }
  const __m512 zero = _mm512_setzero_ps();
  return _mm_cvtss_f32(Reduce4(acc, zero, zero, zero));
}

namespace {

// ---------------------------------------------------------------- q8_0 / q4_0

// ---- m > 1: the block-interleaved layout.
// 16 blocks (512 values) form a group of 8 chunks of 64 bytes; int32 lane L of
// chunk c holds bytes [4c, 4c + 4) of block L, so 8 vpdpbusd over the chunks
// leave each lane with one whole block's dot product and the f32 scaling runs
// once per 16 blocks instead of once per 2. The last group is zero-padded (k =
// 768 computes 2 groups for 1.5: ymm code for a half group measured slower).
constexpr int kGroupBytes = 512;
constexpr int kPanelGroupBytes =
    kIntPanelGroupBytes;  // per row per group: 8 chunks, corrections, scales

// Z[p] = blocks (p, p + 8) in natural order -> the 8 chunks, in place.
inline void TransposeGroup(__m512i z[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    // u[e], u[4 + e]: per 128-bit lane, element e of z[4i..4i+3].
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  for (int e = 0; e < 4; ++e) {
    z[e] = _mm512_permutex2var_epi64(u[e], lo, u[4 + e]);
    z[4 + e] = _mm512_permutex2var_epi64(u[e], hi, u[4 + e]);
  }
}

// Int panel of rows [r0, r0 + kPr): for group g and row r, at
// ((g * kPr + r) * kPanelGroupBytes): 8 chunks of signed weights, 16 int32
// corrections -128 * (block sums of w), 16 f32 block scales. Zero past n / nb.
template <DType kT>
void PackQuantPanel(const Weight& w, int64_t r0, uint8_t* panel) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t nb = w.k / 32, ng = (nb + 15) / 16;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < kPr; ++r) {
    const bool valid = r0 + r < w.n;
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (valid ? r0 + r : 0) * w.row_bytes;
    for (int64_t g = 0; g < ng; ++g) {
      uint8_t* dst = panel + (g * kPr + r) * kPanelGroupBytes;
      __m512i z[8];
      alignas(32) uint16_t scales[16] = {};  // [16] f16, in lane order
      for (int p = 0; p < 8; ++p) {
        __m256i blk2[2];
        for (int h = 0; h < 2; ++h) {
          const int64_t b = g * 16 + p + 8 * h;
          blk2[h] = _mm256_setzero_si256();
          if (!valid || b >= nb) continue;
          const uint8_t* blk = row + b * kBlockBytes;
          std::memcpy(&scales[p + 8 * h], blk, 2);
          if constexpr (kT == DType::kQ8_0) {
            blk2[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          } else {
            const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
            const __m256i nib = _mm256_and_si256(
                _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
                _mm256_set1_epi8(15));
            blk2[h] = _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
          }
        }
        z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(blk2[0]), blk2[1], 1);
      }
      TransposeGroup(z);
      __m512i sum = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        _mm512_store_si512(dst + 64 * c, z[c]);
        sum = _mm512_dpbusd_epi32(sum, bias, z[c]);
      }
      _mm512_store_si512(dst + 512, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
      _mm512_store_ps(dst + 576,
                      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales))));
    }
  }
}

// y[t * ldy + r] for 4 rows of an int panel (from panel row `pr`) and kTok
// tokens; qx/dx packed with strides qs/ds.
template <int kTok>
void TileQuant(const uint8_t* panel, int pr, int64_t nb, const int8_t* qx, int64_t qs,
               const float* dx, int64_t ds, int n_rows, float* y, int64_t ldy) {
  const int64_t ng = (nb + 15) / 16;
  __m512 facc[4][kTok];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < kTok; ++t) facc[r][t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* pg = panel + (g * kPr + pr) * kPanelGroupBytes;
    __m512i iacc[4][kTok];
    for (int r = 0; r < 4; ++r) {
      const __m512i corr = _mm512_load_si512(pg + r * kPanelGroupBytes + 512);
      for (int t = 0; t < kTok; ++t) iacc[r][t] = corr;
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m512i wc[4];
      for (int r = 0; r < 4; ++r) wc[r] = _mm512_load_si512(pg + r * kPanelGroupBytes + 64 * c);
#pragma GCC unroll 8
      for (int t = 0; t < kTok; ++t) {
        const __m512i xc = _mm512_load_si512(qx + t * qs + g * kGroupBytes + 64 * c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) iacc[r][t] = _mm512_dpbusd_epi32(iacc[r][t], xc, wc[r]);
      }
    }
    for (int r = 0; r < 4; ++r) {
      const __m512 sw =
          _mm512_load_ps(reinterpret_cast<const float*>(pg + r * kPanelGroupBytes + 576));
      for (int t = 0; t < kTok; ++t) {
        const __m512 s = _mm512_mul_ps(sw, _mm512_load_ps(dx + t * ds + g * 16));
        facc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][t]), s, facc[r][t]);
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    const __m128 s = Reduce4(facc[0][t], facc[1][t], facc[2][t], facc[3][t]);
    if (n_rows == 4) {
      _mm_storeu_ps(y + t * ldy, s);
    } else {
      alignas(16) float out[4];  // [4]
      _mm_store_ps(out, s);
      for (int r = 0; r < n_rows; ++r) y[t * ldy + r] = out[r];
    }
  }
}

constexpr int kQuantTokens = 4;

template <int kTok = kQuantTokens>
void TileQuantAny(int n_tok, const uint8_t* panel, int pr, int64_t nb, const int8_t* qx, int64_t qs,
                  const float* dx, int64_t ds, int n_rows, float* y, int64_t ldy) {
  if constexpr (kTok > 1) {
    if (n_tok < kTok)
      return TileQuantAny<kTok - 1>(n_tok, panel, pr, nb, qx, qs, dx, ds, n_rows, y, ldy);
  }
  TileQuant<kTok>(panel, pr, nb, qx, qs, dx, ds, n_rows, y, ldy);
}

template <DType kT>
void GemmQuant(const Weight& w, const int8_t* qx, const float* dx, int64_t t0, int64_t t1,
               int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* panel) {
  const int64_t nb = w.k / 32;
  const int64_t qs = PackedQxStride(w.k), ds = PackedDxStride(w.k);
  for (int64_t p = r0; p < r1; p += kPr) {
    PackQuantPanel<kT>(w, p, panel);
    const int64_t p_end = p + kPr < r1 ? p + kPr : r1;
    for (int64_t t = t0; t < t1; t += kQuantTokens) {
      const int n_tok = static_cast<int>(t1 - t < kQuantTokens ? t1 - t : kQuantTokens);
      for (int64_t r = p; r < p_end; r += 4) {
        const int n_rows = static_cast<int>(p_end - r < 4 ? p_end - r : 4);
        TileQuantAny(n_tok, panel, static_cast<int>(r - p), nb, qx + t * qs, qs, dx + t * ds, ds,
                     n_rows, y + t * ldy + r, ldy);
      }
    }
  }
}

}  // namespace

// The block-interleaved activations (see TransposeGroup), stored unsigned
// (x + 128) for vpdpbusd; bit-identical quantization to QuantizeActivations.
void QuantizeActivationsPacked(const float* x, int8_t* q, float* d, int64_t k) {
  const int64_t nb = k / 32, ng = (nb + 15) / 16;
  alignas(64) int8_t tmp[kGroupBytes];  // [16 blocks, 32] natural order
  alignas(64) float dtmp[16];           // [16]
  for (int64_t g = 0; g < ng; ++g) {
    const int64_t nbg = nb - 16 * g < 16 ? nb - 16 * g : 16;
    QuantizeActivations(x + g * kGroupBytes, tmp, dtmp, nbg * 32);
    for (int64_t b = nbg; b < 16; ++b) {
      std::memset(tmp + 32 * b, 0, 32);
      dtmp[b] = 0.f;
    }
    __m512i z[8];
    for (int p = 0; p < 8; ++p)
      z[p] = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp + 32 * p))),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp + 32 * (p + 8))), 1);
    TransposeGroup(z);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int c = 0; c < 8; ++c)
      _mm512_storeu_si512(q + g * kGroupBytes + 64 * c, _mm512_xor_si512(z[c], bias));
    for (int lane = 0; lane < 16; ++lane) d[g * 16 + lane] = dtmp[lane];
  }
}

void Gemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0,
          int64_t t1, int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* panel) {
  switch (w.type) {
    case DType::kF32:
      return GemmFloat<DType::kF32>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kF16:
      return GemmFloat<DType::kF16>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kBF16:
      return GemmFloat<DType::kBF16>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kQ8_0:
      return GemmQuant<DType::kQ8_0>(w, qx, dx, t0, t1, r0, r1, y, ldy, panel);
    case DType::kQ4_0:
      return GemmQuant<DType::kQ4_0>(w, qx, dx, t0, t1, r0, r1, y, ldy, panel);
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
