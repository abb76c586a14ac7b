// AVX2 + FMA + F16C matmul kernels (16 ymm registers).
//
// f32 / f16 / bf16: converted exactly to f32, FMA in f32, added in kernels.h's
// order (chunks of kFloatSumK) on both paths. m == 1: 4 rows per pass; m > 1:
// 8-row panels converted to f32 per 512-wide k slice, 4-row x 3-token
// register tiles.
// q8_0 / q4_0 (q4_0 unpacked to signed w = nibble - 8), activations quantized
// to q8_0: one block per ymm; maddubs needs an unsigned operand, so the sign
// trick: |w| (<= 128) times x * sign(w) (|x| <= 127): each pair sum <= 2 * 128 *
// 127 = 32512 fits int16 without saturation; madd with ones gives int32 lanes,
// exact. Each block's 8 lanes are converted to f32 and accumulated with the
// scale d_w * d_x.
#include <immintrin.h>

#include <cstring>

#include "ops/kernels.h"

namespace rotor::ops::internal::avx2 {
namespace {

constexpr int kPr = kPanelRows;
constexpr int kGemvPrefetch = 16 << 10;

// {sum(a), sum(b), sum(c), sum(d)}.
inline __m128 Reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

inline float HalfToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ---------------------------------------------------------------- f32 family

template <DType kT>
inline __m256 LoadW(const uint8_t* row, int64_t i) {
  if constexpr (kT == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    if constexpr (kT == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType kT>
inline float LoadOne(const uint8_t* row, int64_t i) {
  if constexpr (kT == DType::kF32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  } else if constexpr (kT == DType::kF16) {
    return HalfToFloat(row + 2 * i);
  } else {
    uint16_t b;
    std::memcpy(&b, row + 2 * i, 2);
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
}

// Up to 8 elements from i (zeros past `left`).
template <DType kT>
inline __m256 LoadWPartial(const uint8_t* row, int64_t i, int64_t left) {
  if (left >= 8) return LoadW<kT>(row, i);
  alignas(32) float buf[8] = {};  // [8]
  for (int64_t j = 0; j < left; ++j) buf[j] = LoadOne<kT>(row, i + j);
  return _mm256_load_ps(buf);
}

inline __m256 LoadXPartial(const float* x, int64_t left) {
  if (left >= 8) return _mm256_loadu_ps(x);
  alignas(32) float buf[8] = {};  // [8]
  for (int64_t j = 0; j < left; ++j) buf[j] = x[j];
  return _mm256_load_ps(buf);
}

// y[r0 .. r0 + kR) for one token, chunk by chunk in kernels.h's order (one
// FMA chain per row: 4 rows per pass hide the FMA latency).
template <DType kT, int kR>
inline void GemvFloatRows(const Weight& w, const float* x, int64_t r0, float* y) {
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m128 tot = _mm_setzero_ps();  // 4 rows: the chunk sums so far
  for (int64_t k0 = 0; k0 < w.k; k0 += kFloatSumK) {
    const int64_t k1 = w.k - k0 < kFloatSumK ? w.k : k0 + kFloatSumK;
    __m256 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_setzero_ps();
    int64_t i = k0;
    for (; i + 8 <= k1; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        if (i % 16 == 0 || kT == DType::kF32)
          _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i * (kT == DType::kF32 ? 4 : 2)) +
                           kGemvPrefetch,
                       _MM_HINT_T0);
        acc[r] = _mm256_fmadd_ps(LoadW<kT>(rows[r], i), xv, acc[r]);
      }
    }
    if (i < k1) {
      const __m256 xv = LoadXPartial(x + i, k1 - i);
      for (int r = 0; r < kR; ++r)
        acc[r] = _mm256_fmadd_ps(LoadWPartial<kT>(rows[r], i, k1 - i), xv, acc[r]);
    }
    const __m128 sum = Reduce4(acc[0], acc[1], acc[2], acc[3]);
    tot = k0 == 0 ? sum : _mm_add_ps(tot, sum);
  }
  alignas(16) float out[4];  // [4]
  _mm_store_ps(out, tot);
  for (int r = 0; r < kR; ++r) y[r0 + r] = out[r];
}

template <DType kT>
void GemvFloat(const Weight& w, const float* x, int64_t r0, int64_t r1, float* y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) GemvFloatRows<kT, 4>(w, x, r, y);
  for (; r < r1; ++r) GemvFloatRows<kT, 1>(w, x, r, y);
}

}  // namespace

float DotChunkF32(const float* w, const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc);
  if (i < n) acc = _mm256_fmadd_ps(LoadXPartial(w + i, n - i), LoadXPartial(x + i, n - i), acc);
  const __m256 zero = _mm256_setzero_ps();
  return _mm_cvtss_f32(Reduce4(acc, zero, zero, zero));
}

namespace {

constexpr int64_t kFloatKpad = kFloatKc + 8;  // panel row stride, off a multiple of 4 KiB
static_assert(kFloatKpad <= kFloatKpadMax);
constexpr int kFloatTokens = 3;

// k values [k0, k0 + kc) of rows [r0, r0 + kPr) in f32 (zeros past n and kc): [kPr, kFloatKpad].
template <DType kT>
void PackFloatPanel(const Weight& w, int64_t r0, int64_t k0, int64_t kc, float* panel) {
  const int64_t kc8 = (kc + 7) / 8 * 8;
  for (int r = 0; r < kPr; ++r) {
    float* dst = panel + r * kFloatKpad;
    if (r0 + r >= w.n) {
      for (int64_t i = 0; i < kc8; i += 8) _mm256_store_ps(dst + i, _mm256_setzero_ps());
      continue;
    }
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
    for (int64_t i = 0; i < kc8; i += 8)
      _mm256_store_ps(dst + i, LoadWPartial<kT>(row, k0 + i, kc - i));
  }
}

// y[t * ldy + r] (+)= for 4 panel rows and kTok tokens over k values [0, k): one
// chunk of kernels.h's order (kFloatSumK == kFloatKc), added to y when `accumulate`.
template <int kTok>
void TileFloat(const float* panel, const float* x, int64_t ldx, int64_t k, bool accumulate,
               int n_rows, float* y, int64_t ldy) {
  __m256 acc[4][kTok];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t k8 = k / 8 * 8;
  for (int64_t i = 0; i < k8; i += 8) {
#pragma GCC unroll 4
    for (int t = 0; t < kTok; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        acc[r][t] = _mm256_fmadd_ps(_mm256_load_ps(panel + r * kFloatKpad + i), xv, acc[r][t]);
    }
  }
  if (k8 < k) {
    for (int t = 0; t < kTok; ++t) {
      const __m256 xv = LoadXPartial(x + t * ldx + k8, k - k8);
      for (int r = 0; r < 4; ++r)
        acc[r][t] = _mm256_fmadd_ps(_mm256_load_ps(panel + r * kFloatKpad + k8), xv, acc[r][t]);
    }
  }
  for (int t = 0; t < kTok; ++t) {
    alignas(16) float out[4];  // [4]
    _mm_store_ps(out, Reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
    for (int r = 0; r < n_rows; ++r) y[t * ldy + r] = accumulate ? y[t * ldy + r] + out[r] : out[r];
  }
}

template <int kTok = kFloatTokens>
void TileFloatAny(int n_tok, const float* panel, const float* x, int64_t ldx, int64_t k,
                  bool accumulate, int n_rows, float* y, int64_t ldy) {
  if constexpr (kTok > 1) {
    if (n_tok < kTok)
      return TileFloatAny<kTok - 1>(n_tok, panel, x, ldx, k, accumulate, n_rows, y, ldy);
  }
  TileFloat<kTok>(panel, x, ldx, k, accumulate, n_rows, y, ldy);
}

template <DType kT>
void GemmFloat(const Weight& w, const float* x, int64_t t0, int64_t t1, int64_t r0, int64_t r1,
               float* y, int64_t ldy, uint8_t* panel_bytes) {
  float* panel = reinterpret_cast<float*>(panel_bytes);  // [kPr, kFloatKpad]
  for (int64_t k0 = 0; k0 < w.k; k0 += kFloatKc) {
    const int64_t kc = w.k - k0 < kFloatKc ? w.k - k0 : kFloatKc;
    for (int64_t p = r0; p < r1; p += kPr) {
      PackFloatPanel<kT>(w, p, k0, kc, panel);
      const int64_t p_end = p + kPr < r1 ? p + kPr : r1;
      for (int64_t t = t0; t < t1; t += kFloatTokens) {
        const int n_tok = static_cast<int>(t1 - t < kFloatTokens ? t1 - t : kFloatTokens);
        for (int64_t r = p; r < p_end; r += 4) {
          const int n_rows = static_cast<int>(p_end - r < 4 ? p_end - r : 4);
          TileFloatAny(n_tok, panel + (r - p) * kFloatKpad, x + t * w.k + k0, w.k, kc, k0 > 0,
                       n_rows, y + t * ldy + r, ldy);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- q8_0 / q4_0

// The 32 signed weights of a block and its scale.
template <DType kT>
inline __m256i LoadBlock(const uint8_t* blk, float* d) {
  *d = HalfToFloat(blk);
  if constexpr (kT == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
        _mm256_set1_epi8(15));
    return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
  }
}

// 8 int32 lanes summing to dot(w, x) for signed bytes, given |w|.
inline __m256i BlockDot(__m256i abs_w, __m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

template <DType kT, int kR>
inline void GemvQuantRows(const Weight& w, const int8_t* qx, const float* dx, int64_t r0,
                          float* y) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t nb = w.k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 32 * b));
    // q4_0: the nibbles (w + 8) are unsigned already: dot(w, x) = dot(nib, x) - 8 sum(x).
    __m256i corr = _mm256_setzero_si256();
    if constexpr (kT == DType::kQ4_0)
      corr = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xv), ones16);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const uint8_t* blk = rows[r] + b * kBlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kGemvPrefetch, _MM_HINT_T0);
      const float dw = HalfToFloat(blk);
      __m256i d;
      if constexpr (kT == DType::kQ8_0) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        d = BlockDot(_mm256_sign_epi8(wv, wv), wv, xv);
      } else {
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m256i nib = _mm256_and_si256(
            _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
            _mm256_set1_epi8(15));
        d = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(nib, xv), ones16), corr);
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(dw * dx[b]), acc[r]);
    }
  }
  __m256 s[4];
  for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r] : _mm256_setzero_ps();
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

// y[t * ldy + r] for kR rows (weights read in place) and kTok tokens (natural
// q8_0 layout at strides qs / ds).
template <DType kT, int kR, int kTok>
void TileQuant(const Weight& w, int64_t r0, const int8_t* qx, int64_t qs, const float* dx,
               int64_t ds, float* y, int64_t ldy) {
  constexpr int kBlockBytes = kT == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t nb = w.k / 32;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = static_cast<const uint8_t*>(w.data) + (r0 + r) * w.row_bytes;
  __m256 acc[kR][kTok];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wv[kR], aw[kR];
    float dw[kR];
    for (int r = 0; r < kR; ++r) {
      wv[r] = LoadBlock<kT>(rows[r] + b * kBlockBytes, &dw[r]);
      aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
    }
    for (int t = 0; t < kTok; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + t * qs + 32 * b));
      const float d = dx[t * ds + b];
      for (int r = 0; r < kR; ++r) {
        const __m256i p = BlockDot(aw[r], wv[r], xv);
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[r] * d), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    __m256 s[4];
    for (int r = 0; r < 4; ++r) s[r] = r < kR ? acc[r][t] : _mm256_setzero_ps();
    alignas(16) float out[4];  // [4]
    _mm_store_ps(out, Reduce4(s[0], s[1], s[2], s[3]));
    for (int r = 0; r < kR; ++r) y[t * ldy + r0 + r] = out[r];
  }
}

template <DType kT>
void GemmQuant(const Weight& w, const int8_t* qx, const float* dx, int64_t t0, int64_t t1,
               int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t qs = PackedQxStride(w.k), ds = PackedDxStride(w.k);
  constexpr int kTok = 3;
  for (int64_t r = r0; r < r1; r += 2) {
    const bool two = r + 2 <= r1;
    for (int64_t t = t0; t < t1; t += kTok) {
      const int64_t n_tok = t1 - t < kTok ? t1 - t : kTok;
      const int8_t* qt = qx + t * qs;
      const float* dt = dx + t * ds;
      float* yt = y + t * ldy;
      if (two && n_tok == kTok) {
        TileQuant<kT, 2, kTok>(w, r, qt, qs, dt, ds, yt, ldy);
      } else {
        for (int64_t i = 0; i < n_tok; ++i)
          for (int64_t rr = r; rr < (two ? r + 2 : r + 1); ++rr)
            TileQuant<kT, 1, 1>(w, rr, qt + i * qs, qs, dt + i * ds, ds, yt + i * ldy, ldy);
      }
    }
  }
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
      return GemmQuant<DType::kQ8_0>(w, qx, dx, t0, t1, r0, r1, y, ldy);
    case DType::kQ4_0:
      return GemmQuant<DType::kQ4_0>(w, qx, dx, t0, t1, r0, r1, y, ldy);
    default:
      UnsupportedType(w.type);
  }
}

}  // namespace rotor::ops::internal::avx2
