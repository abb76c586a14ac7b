// The per-lane attention weights kernel against its scalar reference, on
// random scores of odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/fold.h"
#include "base/cpu.h"

namespace rotor {
namespace {

using LaneWeightsFn = void (*)(const float*, size_t, int, int, const float*, const float*, float*);

void ExpectEqualsScalar(LaneWeightsFn fast) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-30.f, 5.f);
  for (int n_heads : {1, 3, 8}) {
    for (int n_keys : {1, 7, 8, 16, 33, 4099}) {
      const size_t stride = n_keys + 5;
      std::vector<float> scores(stride * n_heads), m(n_heads), l(n_heads);
      for (int h = 0; h < n_heads; ++h) {
        m[h] = -1e30f;
        for (int k = 0; k < n_keys; ++k) m[h] = std::max(m[h], scores[h * stride + k] = u(rng));
        l[h] = 0.f;
        for (int k = 0; k < n_keys; ++k) l[h] += std::exp(scores[h * stride + k] - m[h]);
      }
      std::vector<float> want(n_keys + 1, -1.f), got(n_keys + 1, -1.f);
      attn::LaneWeightsScalar(scores.data(), stride, n_heads, n_keys, m.data(), l.data(),
                              want.data());
      fast(scores.data(), stride, n_heads, n_keys, m.data(), l.data(), got.data());
      double sum = 0;
      for (int k = 0; k < n_keys; ++k) {
        EXPECT_NEAR(got[k], want[k], 1e-6 + 1e-5 * want[k]) << n_heads << " " << n_keys << " " << k;
        sum += got[k];
      }
      EXPECT_NEAR(sum, n_heads, 1e-3 * n_heads);  // probabilities of each head sum to 1
      EXPECT_EQ(got[n_keys], -1.f);               // nothing written past n_keys
    }
  }
}

TEST(LaneWeights, Avx512EqualsScalar) {
  if (BestIsa() != Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  ExpectEqualsScalar(attn::LaneWeightsAvx512);
}

TEST(LaneWeights, Avx2EqualsScalar) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  ExpectEqualsScalar(attn::LaneWeightsAvx2);
}

}  // namespace
}  // namespace rotor
