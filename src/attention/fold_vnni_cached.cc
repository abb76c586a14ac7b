// AVX-512 machines' decode scores of cached block-type keys (fold_cached8.h):
// the u8 x s8 products of 256-bit vectors by VNNI's vpdpbusd (AVX512_VNNI +
// AVX512VL), one instruction where AVX2 takes two.
#include <immintrin.h>

#include "attention/fold.h"
#include "attention/fold_cached8.h"

namespace rotor::attn {
namespace {

struct DotVnni {
  // Lane i: the sum of the products of bytes [4 i, 4 i + 4) of a (u8) and b (s8).
  static __m256i U8S8(__m256i a, __m256i b) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
  }
};

}  // namespace

bool ScoresCachedVnni(FoldState& s, const KeyBlock& b) { return ScoresCached<DotVnni>(s, b); }

}  // namespace rotor::attn
