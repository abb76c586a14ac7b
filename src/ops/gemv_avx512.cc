// AVX-512 matrix-vector kernels (m == 1, and small batches of up to 16 / 8
// tokens, see kernels.h): every weight is read once, straight from the
// (memory-mapped) matrix, one row at a time (q types: 4 rows per pass) with
// software prefetch; a batch is taken 4 tokens at a time while 4 rows stay in L1.
// q8_0 / q4_0: one zmm covers a block pair (64 weights); the weights are made
// unsigned for vpdpbusd (q8_0: w + 128 = w ^ 0x80; q4_0: the nibble, w + 8) and
// the bias removed exactly in int32 by starting the dot product from
// -bias * (4-byte partial sums of x).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/avx512_util.h"
#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

// Software prefetch distance of the m == 1 kernels: the hardware prefetcher
// alone leaves 4 interleaved row streams at ~17-25 GB/s on this Zen; 8-16 KiB
// ahead (measured per type, 1 thread) keeps enough lines in flight for DRAM.
constexpr int kGemvPrefetch = 16 << 10;
constexpr int kGemvPrefetchQ8 = 8 << 10;

// ---------------------------------------------------------------- f32 family

// The sums of kN consecutive chunks of one row (kFloatSumK values each from
// k0, the last one `last` values long), one FMA chain each, run side by side
// (kN chains hide the FMA latency): out[0 .. kN).
template <DType kT, int kN>
inline void RowChunkSums(const uint8_t* row, const float* x, int64_t k0, int64_t last,
                         float* out) {
  constexpr int64_t kC = kFloatSumK;
  constexpr int kBytes = kT == DType::kF32 ? 4 : 2;
  __m512 acc[4];
  for (int c = 0; c < 4; ++c) acc[c] = _mm512_setzero_ps();
  const int64_t last16 = last / 16 * 16;
  int64_t i = 0;
  for (; i < last16; i += 16) {
#pragma GCC unroll 4
    for (int c = 0; c < kN; ++c) {
      const int64_t at = k0 + c * kC + i;
      _mm_prefetch(reinterpret_cast<const char*>(row + at * kBytes) + kGemvPrefetch, _MM_HINT_T0);
      acc[c] = _mm512_fmadd_ps(LoadW<kT>(row, at), _mm512_loadu_ps(x + at), acc[c]);
    }
  }
  if (i < last) {  // the row's last values
    const __mmask16 mk = TailMask16(last - i);
    const int64_t at = k0 + (kN - 1) * kC + i;
    acc[kN - 1] = _mm512_fmadd_ps(LoadWMasked<kT>(row, at, mk), _mm512_maskz_loadu_ps(mk, x + at),
                                  acc[kN - 1]);
  }
  // The chunks before the last are whole: their slices past the last one's.
  for (int64_t j = last16; kN > 1 && j < kC; j += 16) {
#pragma GCC unroll 4
    for (int c = 0; c + 1 < kN; ++c) {
      const int64_t at = k0 + c * kC + j;
      _mm_prefetch(reinterpret_cast<const char*>(row + at * kBytes) + kGemvPrefetch, _MM_HINT_T0);
      acc[c] = _mm512_fmadd_ps(LoadW<kT>(row, at), _mm512_loadu_ps(x + at), acc[c]);
    }
  }
  _mm_store_ps(out, Reduce4(acc[0], acc[1], acc[2], acc[3]));
}

// One row at a time: a single sequential stream per thread (ops_bench, four
// alternating runs, 2 threads, against 4 rows per pass: f16 1.18x / 1.22x,
// f32 1.13x / 0.99x, bf16 1.22x / 1.18x), up to 4 of its chunks side by side.
template <DType kT>
void GemvFloat(const Weight& w, const float* x, int64_t r0, int64_t r1, float* y) {
  const int64_t n_chunks = (w.k + kFloatSumK - 1) / kFloatSumK;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
    float sum = 0.f;
    for (int64_t c = 0; c < n_chunks; c += 4) {
      const int64_t n = n_chunks - c < 4 ? n_chunks - c : 4, k0 = c * kFloatSumK;
      const int64_t left = w.k - (k0 + (n - 1) * kFloatSumK);
      const int64_t last = left < kFloatSumK ? left : kFloatSumK;  // the group's last chunk
      alignas(16) float s[4];  // [4] chunk sums
      switch (n) {
        case 1:
          RowChunkSums<kT, 1>(row, x, k0, last, s);
          break;
        case 2:
          RowChunkSums<kT, 2>(row, x, k0, last, s);
          break;
        case 3:
          RowChunkSums<kT, 3>(row, x, k0, last, s);
          break;
        default:
          RowChunkSums<kT, 4>(row, x, k0, last, s);
      }
      for (int64_t j = 0; j < n; ++j) sum = c + j == 0 ? s[0] : sum + s[j];
    }
    y[r] = sum;
  }
}

// ---------------------------------------------------------------- q8_0 / q4_0

inline int LoadU32(const uint8_t* p) {
  int v;
  std::memcpy(&v, p, 4);
  return v;
}

// Activations of block pair j of a quantized row for the m == 1 kernels: 64
// int8 (32 if half) and the scale pattern. For q4_0 the 16-byte chunks come in
// the order the nibbles unpack: (x_b[0:16], x_b1[0:16], x_b[16:32], x_b1[16:32]).
template <DType kT>
inline __m512i LoadGemvActs(const int8_t* qx, const float* dx, int64_t j, bool half,
                            __m512* scale) {
  __m512i xv;
  const float d0 = dx[2 * j], d1 = half ? 0.f : dx[2 * j + 1];
  xv = half ? _mm512_maskz_loadu_epi8(0xffffffffull, qx + 64 * j) : _mm512_loadu_si512(qx + 64 * j);
  if constexpr (kT == DType::kQ4_0) {
    *scale = _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
    return _mm512_shuffle_i64x2(xv, xv, _MM_SHUFFLE(3, 1, 2, 0));
  }
  *scale = Pattern2(d0, d1);
  return xv;
}

// One row's block pair for the m == 1 kernels: weights made unsigned (q8_0:
// w ^ 0x80; q4_0: the nibbles) in the lane order of LoadGemvActs, and the
// scale pattern, from one 64-byte load (plus 4 bytes for q8_0) and vpermw.
template <DType kT>
inline __m512i LoadGemvQuants(const uint8_t* blk, bool half, bool tail, __m512* scale) {
  if constexpr (kT == DType::kQ8_0) {
    // [d0 q0[32] d1 q1[32]]: q0 = words 1..16, q1 = words 18..33, d0 = word 0, d1 = word 17.
    const __m512i a =
        half ? _mm512_maskz_loadu_epi8((1ull << 34) - 1, blk) : _mm512_loadu_si512(blk);
    const __m512i b = half ? _mm512_setzero_si512()
                           : _mm512_castsi128_si512(_mm_cvtsi32_si128(LoadU32(blk + 64)));
    const __m512i qidx =
        _mm512_set_epi16(33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 16, 15, 14,
                         13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i didx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 17,
                                          17, 17, 17, 17, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0);
    *scale = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, a)));
    const __m512i q = _mm512_permutex2var_epi16(a, qidx, b);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    // [d0 qs0[16] d1 qs1[16]]: qs0 = words 1..8, qs1 = words 10..17, d0 = word 0, d1 = word 9.
    // A plain 64-byte load while the row has that many bytes left (masked loads
    // are slow on Zen when they cross a page).
    const __m512i a =
        !tail ? _mm512_loadu_si512(blk)
              : _mm512_maskz_loadu_epi8(half ? (1ull << 18) - 1 : (1ull << 36) - 1, blk);
    const __m512i qidx = _mm512_set_epi16(17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1,
                                          17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i didx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9,
                                          9, 0, 0, 0, 0, 9, 9, 9, 9, 0, 0, 0, 0);
    *scale = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, a)));
    __m512i q = _mm512_permutexvar_epi16(qidx, a);  // [qs0 qs1 qs0 qs1]
    q = _mm512_mask_srli_epi16(q, 0xffff0000u, q, 4);
    return _mm512_and_si512(q, _mm512_set1_epi8(15));
  }
}

// The first block pair of a row of nb blocks that needs the edge path: pairs
// before it are whole and have at least 64 readable bytes (2j + 4 <= nb).
inline int64_t FirstEdgePair(int64_t nb) { return std::max<int64_t>(0, (nb - 2) / 2); }

// Block pair j of a row: prefetches ahead, returns LoadGemvQuants'.
template <DType kT>
inline __m512i LoadRowPair(const uint8_t* row, int64_t j, bool half, bool tail, __m512* scale) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const uint8_t* blk = row + 2 * j * kBlockBytes;
  const char* pf =
      reinterpret_cast<const char*>(blk) + (kT == DType::kQ8_0 ? kGemvPrefetchQ8 : kGemvPrefetch);
  _mm_prefetch(pf, _MM_HINT_T0);
  if constexpr (kT == DType::kQ8_0) _mm_prefetch(pf + 64, _MM_HINT_T0);
  return LoadGemvQuants<kT>(blk, half, tail, scale);
}

// Block pair j of kR rows for one token into acc (kEdge: as GemvQuantMultiStep).
template <DType kT, int kR, bool kEdge>
inline void GemvQuantStep(const uint8_t* const* rows, const int8_t* qx, const float* dx, int64_t nb,
                          int64_t j, __m512 (&acc)[kR]) {
  const __m512i bias = _mm512_set1_epi8(kT == DType::kQ8_0 ? static_cast<char>(0x80) : 8);
  const bool half = kEdge && 2 * j + 1 == nb;
  const bool tail = kEdge && 2 * j + 4 > nb;  // fewer than 64 bytes of the row left (q4_0)
  __m512 sx;
  const __m512i xv = LoadGemvActs<kT>(qx, dx, j, half, &sx);
  // -bias * (partial sums of x): removes the weights' bias in int32.
  const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv));
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) {
    __m512 sw;
    const __m512i wu = LoadRowPair<kT>(rows[r], j, half, tail, &sw);
    const __m512i d = _mm512_dpbusd_epi32(corr, wu, xv);
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sw, sx), acc[r]);
  }
}

template <DType kT, int kR>
inline void GemvQuantRows(const Weight& w, const int8_t* qx, const float* dx, int64_t r0,
                          float* y) {
  const int64_t nb = w.k / 32, nbp = (nb + 1) / 2;
  const int64_t j_edge = FirstEdgePair(nb);
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j < j_edge; ++j) GemvQuantStep<kT, kR, false>(rows, qx, dx, nb, j, acc);
  for (; j < nbp; ++j) GemvQuantStep<kT, kR, true>(rows, qx, dx, nb, j, acc);
  __m512 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r] : _mm512_setzero_ps();
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r];
}

template <DType kT>
void GemvQuant(const Weight& w, const int8_t* qx, const float* dx, int64_t r0, int64_t r1,
               float* y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) GemvQuantRows<kT, 4>(w, qx, dx, r, y);
  for (; r < r1; ++r) GemvQuantRows<kT, 1>(w, qx, dx, r, y);
}

// ---------------------------------------------------------------- several tokens

// y[t * ldy + r] for rows [r0, r0 + kR) and kTok tokens: each weight is loaded
// and converted once for all tokens.
template <DType kT, int kR, int kTok>
inline void GemvFloatMultiRows(const Weight& w, const float* x, int64_t r0, float* y, int64_t ldy) {
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m128 tot[kTok];  // [kTok] x 4 rows: the chunk sums so far (kernels.h's order)
  for (int64_t k0 = 0; k0 < w.k; k0 += kFloatSumK) {
    const int64_t k1 = w.k - k0 < kFloatSumK ? w.k : k0 + kFloatSumK;
    __m512 acc[kR][kTok];
    for (int r = 0; r < kR; ++r)
      for (int t = 0; t < kTok; ++t) acc[r][t] = _mm512_setzero_ps();
    int64_t i = k0;
    for (; i + 16 <= k1; i += 16) {
      __m512 wv[kR];
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const char* p = reinterpret_cast<const char*>(rows[r] + i * (kT == DType::kF32 ? 4 : 2)) +
                        kGemvPrefetch;
        _mm_prefetch(p, _MM_HINT_T0);
        wv[r] = LoadW<kT>(rows[r], i);
      }
#pragma GCC unroll 4
      for (int t = 0; t < kTok; ++t) {
        const __m512 xv = _mm512_loadu_ps(x + t * w.k + i);
#pragma GCC unroll 4
        for (int r = 0; r < kR; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
    if (i < k1) {
      const __mmask16 mk = TailMask16(k1 - i);
      __m512 wv[kR];
      for (int r = 0; r < kR; ++r) wv[r] = LoadWMasked<kT>(rows[r], i, mk);
      for (int t = 0; t < kTok; ++t) {
        const __m512 xv = _mm512_maskz_loadu_ps(mk, x + t * w.k + i);
        for (int r = 0; r < kR; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
    for (int t = 0; t < kTok; ++t) {
      __m512 s[4];
      for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r][t] : _mm512_setzero_ps();
      const __m128 sum = Reduce4(s[0], s[1], s[2], s[3]);
      tot[t] = k0 == 0 ? sum : _mm_add_ps(tot[t], sum);
    }
  }
  for (int t = 0; t < kTok; ++t) {
    alignas(16) float out[4];  // [4]
    _mm_store_ps(out, tot[t]);
    for (int r = 0; r < kR; ++r) y[t * ldy + r0 + r] = out[r];
  }
}

// The activation side of every block pair of kTok tokens: at xs + (t * nbp +
// j) * 192: 64 x bytes (in LoadGemvActs order), 16 int32 corrections, 16 f32 scales.
template <DType kT>
void PrepareGemvActs(const int8_t* qx, const float* dx, int64_t k, int64_t m, uint8_t* xs) {
  const __m512i bias = _mm512_set1_epi8(kT == DType::kQ8_0 ? static_cast<char>(0x80) : 8);
  const int64_t nb = k / 32, nbp = (nb + 1) / 2;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < nbp; ++j) {
      __m512 sx;
      const __m512i xv = LoadGemvActs<kT>(qx + t * k, dx + t * nb, j, 2 * j + 1 == nb, &sx);
      uint8_t* dst = xs + (t * nbp + j) * 192;
      _mm512_store_si512(dst, xv);
      _mm512_store_si512(dst + 64,
                         _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv)));
      _mm512_store_ps(dst + 128, sx);
    }
}

// One block pair j of kR rows x kTok tokens into acc. kEdge: the pair may be
// the row's last half pair or within 64 bytes of its end (masked loads).
template <DType kT, int kR, int kTok, bool kEdge>
inline void GemvQuantMultiStep(const uint8_t* const* rows, const uint8_t* xs, int64_t nb,
                               int64_t nbp, int64_t j, __m512 (&acc)[kR][kTok]) {
  const bool half = kEdge && 2 * j + 1 == nb, tail = kEdge && 2 * j + 4 > nb;
  __m512i wu[kR];
  __m512 sw[kR];
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) {
    wu[r] = LoadRowPair<kT>(rows[r], j, half, tail, &sw[r]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTok; ++t) {
    const uint8_t* xj = xs + (t * nbp + j) * 192;
    const __m512i xv = _mm512_load_si512(xj), corr = _mm512_load_si512(xj + 64);
    const __m512 sx = _mm512_load_ps(reinterpret_cast<const float*>(xj + 128));
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const __m512i d = _mm512_dpbusd_epi32(corr, wu[r], xv);
      acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sw[r], sx), acc[r][t]);
    }
  }
}

template <DType kT, int kR, int kTok>
inline void GemvQuantMultiRows(const Weight& w, const uint8_t* xs, int64_t r0, float* y,
                               int64_t ldy) {
  const int64_t nb = w.k / 32, nbp = (nb + 1) / 2;
  const int64_t j_edge = FirstEdgePair(nb);
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j < j_edge; ++j) GemvQuantMultiStep<kT, kR, kTok, false>(rows, xs, nb, nbp, j, acc);
  for (; j < nbp; ++j) GemvQuantMultiStep<kT, kR, kTok, true>(rows, xs, nb, nbp, j, acc);
  for (int t = 0; t < kTok; ++t) {
    __m512 s[4];
    for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r][t] : _mm512_setzero_ps();
    alignas(16) float out[4];  // [4]
    _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
    for (int r = 0; r < kR; ++r) y[t * ldy + r0 + r] = out[r];
  }
}

// Rows [r, r + kR) for kTok tokens.
template <DType kT, int kR, int kTok>
void GemvMultiTok(const Weight& w, const float* x, const uint8_t* xs, int64_t r, float* y,
                  int64_t ldy) {
  if constexpr (kT == DType::kQ8_0 || kT == DType::kQ4_0)
    GemvQuantMultiRows<kT, kR, kTok>(w, xs, r, y, ldy);
  else
    GemvFloatMultiRows<kT, kR, kTok>(w, x, r, y, ldy);
}

// Rows [r, r + kR) for all m tokens, 4 at a time (the rows stay in L1 between
// token chunks, so the matrix is read from memory once).
template <DType kT, int kR>
void GemvMultiRows(const Weight& w, const float* x, const uint8_t* xs, int64_t m, int64_t r,
                   float* y, int64_t ldy) {
  constexpr int kTok = 4;  // 4 rows x 4 tokens of accumulators (measured best of 2..4 x 2..4)
  const int64_t xs_stride = (w.k / 32 + 1) / 2 * 192;  // per token
  for (int64_t t = 0; t < m; t += kTok) {
    const float* xt = x + t * w.k;
    const uint8_t* xst = xs + t * xs_stride;
    float* yt = y + t * ldy;
    switch (m - t < kTok ? m - t : kTok) {
      case 1:
        GemvMultiTok<kT, kR, 1>(w, xt, xst, r, yt, ldy);
        break;
      case 2:
        GemvMultiTok<kT, kR, 2>(w, xt, xst, r, yt, ldy);
        break;
      case 3:
        GemvMultiTok<kT, kR, 3>(w, xt, xst, r, yt, ldy);
        break;
      default:
        GemvMultiTok<kT, kR, 4>(w, xt, xst, r, yt, ldy);
    }
  }
}

template <DType kT>
void GemvMultiType(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t m,
                   int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* scratch) {
  if constexpr (kT == DType::kQ8_0 || kT == DType::kQ4_0)
    PrepareGemvActs<kT>(qx, dx, w.k, m, scratch);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) GemvMultiRows<kT, 4>(w, x, scratch, m, r, y, ldy);
  for (; r < r1; ++r) GemvMultiRows<kT, 1>(w, x, scratch, m, r, y, ldy);
}

}  // namespace

void Gemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0,
          int64_t r1, float* y) {
  switch (w.type) {
    case DType::kF32:
      return GemvFloat<DType::kF32>(w, x, r0, r1, y);
    case DType::kF16:
      return GemvFloat<DType::kF16>(w, x, r0, r1, y);
    case DType::kBF16:
      return GemvFloat<DType::kBF16>(w, x, r0, r1, y);
    case DType::kQ8_0:
      return GemvQuant<DType::kQ8_0>(w, qx, dx, r0, r1, y);
    case DType::kQ4_0:
      return GemvQuant<DType::kQ4_0>(w, qx, dx, r0, r1, y);
    default:
      UnsupportedType(w.type);
  }
}

void GemvMulti(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t m,
               int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* scratch) {
  switch (w.type) {
    case DType::kF32:
      return GemvMultiType<DType::kF32>(w, x, qx, dx, m, r0, r1, y, ldy, scratch);
    case DType::kF16:
      return GemvMultiType<DType::kF16>(w, x, qx, dx, m, r0, r1, y, ldy, scratch);
    case DType::kBF16:
      return GemvMultiType<DType::kBF16>(w, x, qx, dx, m, r0, r1, y, ldy, scratch);
    case DType::kQ8_0:
      return GemvMultiType<DType::kQ8_0>(w, x, qx, dx, m, r0, r1, y, ldy, scratch);
    case DType::kQ4_0:
      return GemvMultiType<DType::kQ4_0>(w, x, qx, dx, m, r0, r1, y, ldy, scratch);
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
