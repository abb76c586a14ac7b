// AVX2 decode scores of cached block-type keys (fold_cached8.h): the u8 x s8
// products by vpmaddubsw, summed into int32 by vpmaddwd with ones.
#include <immintrin.h>

#include "attention/fold.h"
#include "attention/fold_cached8.h"

namespace rotor::attn {
namespace {

struct DotAvx2 {
  static constexpr bool kWide = false;
  static constexpr int kHeads = 2;  // query heads of a KV head per Scores8Int (fours spill)
  // Lane i: the sum of the products of bytes [4 i, 4 i + 4) of a (u8) and b (s8).
  static __m256i U8S8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
  }
};

}  // namespace

bool ScoresCachedAvx2(FoldState& s, const KeyBlock& b) { return ScoresCached<DotAvx2>(s, b); }

}  // namespace rotor::attn
