// AVX2 arithmetic of a q4_0 / q5_0 block's choice (kv_quant_block.h): the
// reference's operations in registers, so the same bytes. Compiled without
// FP contraction: x * id + off is two roundings, as in the reference.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/check.h"
#include "kv/kv_quant_block.h"

namespace rotor::kv_internal::avx2 {
namespace {

// Double lanes (l0, l1, l2, l3) -> (l0 + l1) + (l2 + l3).
inline double SumLanes(__m256d acc) {
  const __m256d pairs = _mm256_hadd_pd(acc, acc);  // [l0 + l1, l0 + l1, l2 + l3, l2 + l3]
  return _mm_cvtsd_f64(_mm_add_sd(_mm256_castpd256_pd128(pairs), _mm256_extractf128_pd(pairs, 1)));
}

class Block {
 public:
  Block(const float* x, int B) : x_(x), regs_(B / 8) {
    for (int j = 0; j < regs_; ++j) v_[j] = _mm256_loadu_ps(x + 8 * j);
  }

  void MaxAbs(float* max, float* amax) const {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    // max(|v|, m): a NaN in v gives m back, as the reference skips it.
    for (int j = 0; j < regs_; ++j) m = _mm256_max_ps(_mm256_and_ps(v_[j], abs_mask), m);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    *amax = _mm_cvtss_f32(m4), *max = 0.f;
    if (*amax == 0.f) return;
    const __m256 a = _mm256_set1_ps(*amax);
    for (int j = 0; j < regs_; ++j) {  // the first value of that magnitude
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v_[j], abs_mask), a, _CMP_EQ_OQ));
      if (hit != 0) {
        *max = x_[8 * j + __builtin_ctz(static_cast<unsigned>(hit))];
        return;
      }
    }
  }

  void Ggml(float id, float off, int top, int* u) const {
    const __m256 vid = _mm256_set1_ps(id), voff = _mm256_set1_ps(off);
    const __m256i vtop = _mm256_set1_epi32(top);
    for (int j = 0; j < regs_; ++j) {
      const __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v_[j], vid), voff));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 8 * j), _mm256_min_epi32(q, vtop));
    }
  }

  // Nearest, ties to even: lrintf in the default rounding mode.
  void Round(float id, int lo, int hi, int* u) const {
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    for (int j = 0; j < regs_; ++j) {
      const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v_[j], vid));
      const __m256i c = _mm256_min_epi32(_mm256_max_epi32(q, vlo), vhi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 8 * j), _mm256_sub_epi32(c, vlo));
    }
  }

  double Sxx() const {
    __m256d acc = _mm256_setzero_pd();
    for (int j = 0; j < regs_; ++j)
      for (__m256d xd : {Low(j), High(j)}) acc = _mm256_add_pd(acc, _mm256_mul_pd(xd, xd));
    return SumLanes(acc);
  }

  void Sums(const int* u, int lo, double* sxl, double* sll) const {
    __m256d acc = _mm256_setzero_pd();
    __m256i ll = _mm256_setzero_si256();
    const __m256i vlo = _mm256_set1_epi32(lo);
    for (int j = 0; j < regs_; ++j) {
      const __m256i l =
          _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 8 * j)), vlo);
      ll = _mm256_add_epi32(ll, _mm256_mullo_epi32(l, l));
      acc = _mm256_add_pd(acc, _mm256_mul_pd(Low(j), _mm256_cvtepi32_pd(_mm256_castsi256_si128(l))));
      acc = _mm256_add_pd(acc, _mm256_mul_pd(High(j), _mm256_cvtepi32_pd(_mm256_extracti128_si256(l, 1))));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(ll), _mm256_extracti128_si256(ll, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    *sxl = SumLanes(acc), *sll = static_cast<double>(_mm_cvtsi128_si32(s));
  }

  // F16C rounds to nearest even as F32ToF16 does (NaN aside).
  static float F16Round(float d) { return _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)); }

  // kv_quant.cc's PackBlock in 4-value steps: low nibbles from u[i], high from u[i + B / 2];
  // q5_0's fifth bits gathered by movemask.
  static void Pack(KvType t, int B, float d, const int* u, uint8_t* out) {
    const bool q5 = t == KvType::kQ5_0;
    const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(out, &dh, 2);
    uint8_t* qs = out + 2 + (q5 ? B / 8 : 0);
    const __m128i nibble = _mm_set1_epi32(15);
    uint32_t qh = 0;
    for (int i = 0; i < B / 2; i += 4) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u + i));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u + B / 2 + i));
      const __m128i both =
          _mm_or_si128(_mm_and_si128(lo, nibble), _mm_slli_epi32(_mm_and_si128(hi, nibble), 4));
      const __m128i w = _mm_packus_epi32(both, both);
      const int bytes = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));
      std::memcpy(qs + i, &bytes, 4);
      if (q5) {
        qh |= static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_slli_epi32(lo, 27)))) << i;
        qh |= static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_slli_epi32(hi, 27))))
              << (i + B / 2);
      }
    }
    if (q5) std::memcpy(out + 2, &qh, B / 8);
  }

 private:
  __m256d Low(int j) const { return _mm256_cvtps_pd(_mm256_castps256_ps128(v_[j])); }
  __m256d High(int j) const { return _mm256_cvtps_pd(_mm256_extractf128_ps(v_[j], 1)); }

  const float* x_;
  int regs_;
  __m256 v_[4];  // [regs_][8] the block
};

}  // namespace

void QuantizeBlocks(KvType t, int B, int64_t n, const float* x, uint8_t* out, KvRounding rounding) {
  CHECK(B == 8 || B == 16 || B == 32);  // Block holds at most 4 registers
  const size_t bb = KvBlockBytes(t, B);
  for (int64_t b = 0; b < n / B; ++b) {
    Block block(x + b * B, B);
    QuantizeBlock(t, B, block, out + b * bb, rounding);
  }
}

}  // namespace rotor::kv_internal::avx2
