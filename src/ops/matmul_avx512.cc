// AVX-512 matmul kernels (Zen 4: F, BW, VL, DQ, VNNI, BF16).
//
// f32 / f16 / bf16 weights: converted exactly to f32, FMA in f32.
//   m == 1: 4 rows per pass, two accumulators each, weights read once.
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

#include "ops/kernels.h"

namespace rotor::ops::internal::avx512 {
namespace {

constexpr int kPr = kPanelRows;  // rows per panel
constexpr int kBpBytes = 192;    // int panel bytes per row per block pair: w, correction, scales

inline __mmask16 TailMask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// {sum(a), sum(b), sum(c), sum(d)}.
inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d.
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  // Per 128-bit lane: [a, b, c, d] partial sums.
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// ---------------------------------------------------------------- f32 family

template <DType kT>
inline __m512 LoadW(const uint8_t* row, int64_t i) {
  if constexpr (kT == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    if constexpr (kT == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <DType kT>
inline __m512 LoadWMasked(const uint8_t* row, int64_t i, __mmask16 mk) {
  if constexpr (kT == DType::kF32) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(row) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (kT == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// y[r0 .. r0 + kR) for one token.
template <DType kT, int kR>
inline void GemvFloatRows(const Weight& w, const float* x, int64_t r0, float* y) {
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc0[kR], acc1[kR];
  for (int r = 0; r < kR; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= w.k; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      acc0[r] = _mm512_fmadd_ps(LoadW<kT>(rows[r], i), x0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(LoadW<kT>(rows[r], i + 16), x1, acc1[r]);
    }
  }
  for (; i < w.k; i += 16) {
    const __mmask16 mk = TailMask16(w.k - i);
    const __m512 x0 = _mm512_maskz_loadu_ps(mk, x + i);
    for (int r = 0; r < kR; ++r) acc0[r] = _mm512_fmadd_ps(LoadWMasked<kT>(rows[r], i, mk), x0, acc0[r]);
  }
  __m512 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? _mm512_add_ps(acc0[r], acc1[r]) : _mm512_setzero_ps();
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r];
}

template <DType kT>
void GemvFloat(const Weight& w, const float* x, int64_t r0, int64_t r1, float* y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) GemvFloatRows<kT, 4>(w, x, r, y);
  for (; r < r1; ++r) GemvFloatRows<kT, 1>(w, x, r, y);
}

// Converts rows [r0, r0 + kPr) (zero rows past n, zeros past k) to f32:
// panel [kPr, kpad], kpad = k rounded up to 16.
template <DType kT>
void PackFloatPanel(const Weight& w, int64_t r0, float* panel, int64_t kpad) {
  for (int r = 0; r < kPr; ++r) {
    float* dst = panel + r * kpad;
    if (r0 + r >= w.n) {
      for (int64_t i = 0; i < kpad; i += 16) _mm512_store_ps(dst + i, _mm512_setzero_ps());
      continue;
    }
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
    for (int64_t i = 0; i < kpad; i += 16) _mm512_store_ps(dst + i, LoadWMasked<kT>(row, i, TailMask16(w.k - i)));
  }
}

// y[t * ldy + r] for 4 panel rows (f32, stride kpad) and kT tokens (x stride k).
template <int kTok>
void TileFloat(const float* panel, int64_t kpad, const float* x, int64_t k, int n_rows, float* y,
               int64_t ldy) {
  __m512 acc[4][kTok];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = _mm512_load_ps(panel + r * kpad + i);
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * k + i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (i < k) {
    const __mmask16 mk = TailMask16(k - i);
    __m512 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = _mm512_load_ps(panel + r * kpad + i);
    for (int t = 0; t < kTok; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + t * k + i);
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < kTok; ++t) {
    const __m128 s = Reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
    if (n_rows == 4) {
      _mm_storeu_ps(y + t * ldy, s);
    } else {
      alignas(16) float out[4];  // [4]
      _mm_store_ps(out, s);
      for (int r = 0; r < n_rows; ++r) y[t * ldy + r] = out[r];
    }
  }
}

constexpr int kFloatTokens = 5;

void TileFloatAny(int n_tok, const float* panel, int64_t kpad, const float* x, int64_t k, int n_rows,
                  float* y, int64_t ldy) {
  switch (n_tok) {
    case 5: return TileFloat<5>(panel, kpad, x, k, n_rows, y, ldy);
    case 4: return TileFloat<4>(panel, kpad, x, k, n_rows, y, ldy);
    case 3: return TileFloat<3>(panel, kpad, x, k, n_rows, y, ldy);
    case 2: return TileFloat<2>(panel, kpad, x, k, n_rows, y, ldy);
    default: return TileFloat<1>(panel, kpad, x, k, n_rows, y, ldy);
  }
}

template <DType kT>
void GemmFloat(const Weight& w, const float* x, int64_t t0, int64_t t1, int64_t r0, int64_t r1, float* y,
               int64_t ldy, uint8_t* panel_bytes) {
  const int64_t kpad = (w.k + 15) / 16 * 16;
  float* panel = reinterpret_cast<float*>(panel_bytes);  // [kPr, kpad]
  for (int64_t p = r0; p < r1; p += kPr) {
    PackFloatPanel<kT>(w, p, panel, kpad);
    const int64_t p_end = p + kPr < r1 ? p + kPr : r1;
    for (int64_t t = t0; t < t1; t += kFloatTokens) {
      const int n_tok = static_cast<int>(t1 - t < kFloatTokens ? t1 - t : kFloatTokens);
      for (int64_t r = p; r < p_end; r += 4) {
        const int n_rows = static_cast<int>(p_end - r < 4 ? p_end - r : 4);
        TileFloatAny(n_tok, panel + (r - p) * kpad, kpad, x + t * w.k, w.k, n_rows, y + t * ldy + r, ldy);
      }
    }
  }
}

// ---------------------------------------------------------------- q8_0 / q4_0

// Lane pattern {a x8, b x8} of two f32 values.
inline __m512 Pattern2(float a, float b) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

inline __m512 HalfPattern(const uint8_t* h0, const uint8_t* h1) {
  uint16_t a, b;
  std::memcpy(&a, h0, 2);
  std::memcpy(&b, h1, 2);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (static_cast<uint32_t>(b) << 16))));
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// The 64 quants of blocks (b, b + 1) of a row, as stored: q8_0 signed, q4_0
// nibbles 0..15. Only block b if `half`. Returns them and the scale pattern.
template <DType kT>
inline __m512i LoadQuants(const uint8_t* blk, bool half, __m512* scale) {
  if constexpr (kT == DType::kQ8_0) {
    const uint8_t* blk1 = blk + sizeof(BlockQ8_0);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    if (half) {
      uint16_t d;
      std::memcpy(&d, blk, 2);
      *scale = Pattern2(_cvtsh_ss(d), 0.f);
      return _mm512_castsi256_si512(lo);
    }
    *scale = HalfPattern(blk, blk1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk1 + 2)), 1);
  } else {
    const uint8_t* blk1 = blk + sizeof(BlockQ4_0);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i q1 = half ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk1 + 2));
    if (half) {
      uint16_t d;
      std::memcpy(&d, blk, 2);
      *scale = Pattern2(_cvtsh_ss(d), 0.f);
    } else {
      *scale = HalfPattern(blk, blk1);
    }
    const __m256i q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q01), _mm256_srli_epi16(q01, 4), 1);
    // [q0, q1, q0 >> 4, q1 >> 4] -> [q0, q0 >> 4, q1, q1 >> 4], low nibbles.
    const __m512i nib = _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(15));
    return half ? _mm512_maskz_mov_epi8(0xffffffffull, nib) : nib;
  }
}

// Activations of block pair j of a quantized row: 64 int8 (32 if half) and the scale pattern.
inline __m512i LoadActs(const int8_t* qx, const float* dx, int64_t j, bool half, __m512* scale) {
  if (half) {
    *scale = Pattern2(dx[2 * j], 0.f);
    return _mm512_maskz_loadu_epi8(0xffffffffull, qx + 64 * j);
  }
  *scale = Pattern2(dx[2 * j], dx[2 * j + 1]);
  return _mm512_loadu_si512(qx + 64 * j);
}

template <DType kT, int kR>
inline void GemvQuantRows(const Weight& w, const int8_t* qx, const float* dx, int64_t r0, float* y) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const __m512i bias = _mm512_set1_epi8(kT == DType::kQ8_0 ? static_cast<char>(0x80) : 8);
  const int64_t nb = w.k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m512 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < (nb + 1) / 2; ++j) {
    const bool half = 2 * j + 1 == nb;
    __m512 sx;
    const __m512i xv = LoadActs(qx, dx, j, half, &sx);
    // -bias * (partial sums of x): removes the weights' bias in int32.
    const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv));
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + 2 * j * kBlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024, _MM_HINT_T0);
      __m512 sw;
      __m512i wq = LoadQuants<kT>(blk, half, &sw);
      if constexpr (kT == DType::kQ8_0) wq = _mm512_xor_si512(wq, bias);
      const __m512i d = _mm512_dpbusd_epi32(corr, wq, xv);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sw, sx), acc[r]);
    }
  }
  __m512 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r] : _mm512_setzero_ps();
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r];
}

template <DType kT>
void GemvQuant(const Weight& w, const int8_t* qx, const float* dx, int64_t r0, int64_t r1, float* y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) GemvQuantRows<kT, 4>(w, qx, dx, r, y);
  for (; r < r1; ++r) GemvQuantRows<kT, 1>(w, qx, dx, r, y);
}

// Int panel of rows [r0, r0 + kPr): per block pair j and row r, at
// ((j * kPr + r) * kBpBytes): 64 signed weights, 16 int32 corrections
// -128 * (4-byte partial sums of w), 16 f32 scale lanes. Rows past n are zero.
template <DType kT>
void PackQuantPanel(const Weight& w, int64_t r0, uint8_t* panel) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t nb = w.k / 32, nbp = (nb + 1) / 2;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < kPr; ++r) {
    const bool valid = r0 + r < w.n;
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (valid ? r0 + r : 0) * w.row_bytes;
    for (int64_t j = 0; j < nbp; ++j) {
      uint8_t* dst = panel + (j * kPr + r) * kBpBytes;
      __m512i wq = _mm512_setzero_si512();
      __m512 sw = _mm512_setzero_ps();
      if (valid) {
        const bool half = 2 * j + 1 == nb;
        wq = LoadQuants<kT>(row + 2 * j * kBlockBytes, half, &sw);
        if constexpr (kT == DType::kQ4_0) {
          wq = _mm512_sub_epi8(wq, _mm512_set1_epi8(8));
          if (half) wq = _mm512_maskz_mov_epi8(0xffffffffull, wq);
        }
      }
      const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wq));
      _mm512_store_si512(dst, wq);
      _mm512_store_si512(dst + 64, corr);
      _mm512_store_ps(dst + 128, sw);
    }
  }
}

// y[t * ldy + r] for 4 rows of an int panel (starting at row offset `pr`) and kTok tokens.
template <int kTok>
void TileQuant(const uint8_t* panel, int pr, int64_t nb, const int8_t* qx, const float* dx, int64_t k,
               int n_rows, float* y, int64_t ldy) {
  const int64_t nbp = (nb + 1) / 2;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[4][kTok];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nbp; ++j) {
    const bool half = 2 * j + 1 == nb;
    const uint8_t* pj = panel + (j * kPr + pr) * kBpBytes;
    __m512i xu[kTok];
    __m512 sx[kTok];
    for (int t = 0; t < kTok; ++t) {
      xu[t] = LoadActs(qx + t * k, dx + t * nb, j, half, &sx[t]);
      xu[t] = _mm512_xor_si512(xu[t], bias);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512i wv = _mm512_load_si512(pj + r * kBpBytes);
      const __m512i corr = _mm512_load_si512(pj + r * kBpBytes + 64);
      const __m512 sw = _mm512_load_ps(reinterpret_cast<const float*>(pj + r * kBpBytes + 128));
#pragma GCC unroll 8
      for (int t = 0; t < kTok; ++t) {
        const __m512i d = _mm512_dpbusd_epi32(corr, xu[t], wv);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sw, sx[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    const __m128 s = Reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
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

void TileQuantAny(int n_tok, const uint8_t* panel, int pr, int64_t nb, const int8_t* qx, const float* dx,
                  int64_t k, int n_rows, float* y, int64_t ldy) {
  switch (n_tok) {
    case 4: return TileQuant<4>(panel, pr, nb, qx, dx, k, n_rows, y, ldy);
    case 3: return TileQuant<3>(panel, pr, nb, qx, dx, k, n_rows, y, ldy);
    case 2: return TileQuant<2>(panel, pr, nb, qx, dx, k, n_rows, y, ldy);
    default: return TileQuant<1>(panel, pr, nb, qx, dx, k, n_rows, y, ldy);
  }
}

template <DType kT>
void GemmQuant(const Weight& w, const int8_t* qx, const float* dx, int64_t t0, int64_t t1, int64_t r0,
               int64_t r1, float* y, int64_t ldy, uint8_t* panel) {
  const int64_t nb = w.k / 32;
  for (int64_t p = r0; p < r1; p += kPr) {
    PackQuantPanel<kT>(w, p, panel);
    const int64_t p_end = p + kPr < r1 ? p + kPr : r1;
    for (int64_t t = t0; t < t1; t += kQuantTokens) {
      const int n_tok = static_cast<int>(t1 - t < kQuantTokens ? t1 - t : kQuantTokens);
      for (int64_t r = p; r < p_end; r += 4) {
        const int n_rows = static_cast<int>(p_end - r < 4 ? p_end - r : 4);
        TileQuantAny(n_tok, panel, static_cast<int>(r - p), nb, qx + t * w.k, dx + t * nb, w.k, n_rows,
                     y + t * ldy + r, ldy);
      }
    }
  }
}

}  // namespace

void Gemv(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t r0, int64_t r1, float* y) {
  switch (w.type) {
    case DType::kF32: return GemvFloat<DType::kF32>(w, x, r0, r1, y);
    case DType::kF16: return GemvFloat<DType::kF16>(w, x, r0, r1, y);
    case DType::kBF16: return GemvFloat<DType::kBF16>(w, x, r0, r1, y);
    case DType::kQ8_0: return GemvQuant<DType::kQ8_0>(w, qx, dx, r0, r1, y);
    case DType::kQ4_0: return GemvQuant<DType::kQ4_0>(w, qx, dx, r0, r1, y);
    default: UnsupportedType(w.type);
  }
}

void Gemm(const Weight& w, const float* x, const int8_t* qx, const float* dx, int64_t t0, int64_t t1, int64_t r0,
          int64_t r1, float* y, int64_t ldy, uint8_t* panel) {
  switch (w.type) {
    case DType::kF32: return GemmFloat<DType::kF32>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kF16: return GemmFloat<DType::kF16>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kBF16: return GemmFloat<DType::kBF16>(w, x, t0, t1, r0, r1, y, ldy, panel);
    case DType::kQ8_0: return GemmQuant<DType::kQ8_0>(w, qx, dx, t0, t1, r0, r1, y, ldy, panel);
    case DType::kQ4_0: return GemmQuant<DType::kQ4_0>(w, qx, dx, t0, t1, r0, r1, y, ldy, panel);
    default: UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx512
