// AVX-512 machines' decode scores of cached block-type keys (fold_cached8.h):
// the u8 x s8 products by VNNI's vpdpbusd, two 32-element blocks of a key
// per 512-bit vector (one instruction where AVX2 takes four), the eight
// keys' int32 lanes summed across lanes for both blocks at once (Sum8x2);
// then each block's sums take fold_cached8.h's Scores8Int's float steps in
// the same order, so the scores are the same bit for bit
// (KvQuantFold.Avx2VnniEqualsAvx2BitForBit).
#include <immintrin.h>

#include "attention/fold.h"
#include "attention/fold_cached8.h"

namespace rotor::attn {
namespace {

// Lanes [0, 8) of the result: the sums of lanes [0, 8) of d[0..8) (each
// key's first block); lanes [8, 16): of lanes [8, 16) (its second block).
inline __m512i Sum8x2(const __m512i (&d)[8]) {
  // e[i], 128-bit blocks: key i's first block (4 partial sums), key i's
  // second, key i + 4's first, key i + 4's second.
  __m512i e[4];
  for (int i = 0; i < 4; ++i)
    e[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(d[i], d[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(d[i], d[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  // f[i], each 128-bit block: 2 partial sums of e[i]'s key, 2 of e[i + 2]'s.
  __m512i f[2];
  for (int i = 0; i < 2; ++i)
    f[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(e[i], e[i + 2]),
                            _mm512_unpackhi_epi64(e[i], e[i + 2]));
  // Keys 0, 2, 1, 3 (first block), the same (second), 4, 6, 5, 7 (first),
  // the same (second); put back in order (the permutation is its own inverse).
  const __m512 f0 = _mm512_castsi512_ps(f[0]), f1 = _mm512_castsi512_ps(f[1]);
  const __m512i r =
      _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(2, 0, 2, 0))),
                       _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(3, 1, 3, 1))));
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), r);
}

struct DotVnni {
  static constexpr bool kWide = true;
  // Query heads of a KV head per Scores8: each block pair of the eight keys
  // is unpacked once for all of them, then scored head by head (eight
  // registers of products live at a time, so four do not spill).
  static constexpr int kHeads = 4;

  // What the unsigned bytes of a block of type T exceed its integers by.
  template <Elem T>
  static constexpr int kOffset = T == Elem::kQ8_0 ? 128 : QuantOffset<T>();

  // Lane i: the sum of the products of bytes [4 i, 4 i + 4) of a (u8) and b (s8).
  static __m256i U8S8(__m256i a, __m256i b) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
  }

  // Scores8Int (fold_cached8.h) with blocks k and k + 1 of each key in one
  // 512-bit vector: q8_0 as k + 128 (u8, one xor per key for every head;
  // no int16 step to saturate, as vpmaddubsw has) times q, 128 * sum(q)
  // taken off after the sum (as the prefill tile does); the nibble types as
  // their unsigned quants. The integers are exact, so the sums are
  // Scores8Int's; the float steps are its, block by block in order.
  template <Elem T, int G>
  static void Scores8(FoldState& s, const uint8_t* const kp[8], int h0, int c,
                      const int32_t* qsum) {
    const int hd = s.head_dim, nb = hd / 32;
    constexpr int kBytes = BlockBytes<T, 32>();
    __m256 acc[G];
    for (int u = 0; u < G; ++u) acc[u] = _mm256_setzero_ps();
    const uint8_t* blk[8];  // the eight keys' block k (its d_k first)
    int k = 0;
    for (; k + 2 <= nb; k += 2) {
      __m512i n[8];  // key i's blocks k and k + 1 as unsigned bytes
      for (int i = 0; i < 8; ++i) {
        const uint8_t* b0 = kp[i] + k * kBytes;
        if constexpr (T == Elem::kQ8_0) {  // k + 128: the sign bit flipped
          const __m512i x =
              _mm512_inserti64x4(_mm512_castsi256_si512(Ints32<T>(b0)), Ints32<T>(b0 + kBytes), 1);
          n[i] = _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
        } else {
          n[i] = _mm512_inserti64x4(_mm512_castsi256_si512(Unsigned32<T>(b0)),
                                    Unsigned32<T>(b0 + kBytes), 1);
        }
      }
      for (int i = 0; i < 8; ++i) blk[i] = kp[i] + k * kBytes;
      const __m256 dk0 = F16x8(blk);
      for (int i = 0; i < 8; ++i) blk[i] += kBytes;
      const __m256 dk1 = F16x8(blk);
      for (int u = 0; u < G; ++u) {
        const __m512i q = _mm512_loadu_si512(s.q8 + static_cast<size_t>(h0 + u) * hd + 32 * k);
        __m512i dot[8];
        for (int i = 0; i < 8; ++i) dot[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), n[i], q);
        const __m512i sums = Sum8x2(dot);
        ScaleBlock<T, kOffset<T>>(s, h0 + u, nb, k, _mm512_castsi512_si256(sums), dk0, qsum, acc[u]);
        ScaleBlock<T, kOffset<T>>(s, h0 + u, nb, k + 1, _mm512_extracti64x4_epi64(sums, 1), dk1, qsum,
                                  acc[u]);
      }
    }
    if (k < nb) Block8Int<DotVnni, T, G>(s, kp, h0, k, qsum, acc);  // an odd last block
    for (int u = 0; u < G; ++u) _mm256_storeu_ps(s.scores + (h0 + u) * kBlock + c, acc[u]);
  }
};

}  // namespace

bool ScoresCachedVnni(FoldState& s, const KeyBlock& b) { return ScoresCached<DotVnni>(s, b); }

}  // namespace rotor::attn
