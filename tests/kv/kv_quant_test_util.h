// Shared by the kv_quant_test binary's files (kv_quant_test.cc,
// fold_tile_test.cc): every K/V element type and random inputs.
#pragma once

#include <random>
#include <vector>

#include "kv/kv_config.h"

namespace rotor::testing {

inline constexpr KvType kAllKvTypes[] = {KvType::kF32,  KvType::kF16,  KvType::kBF16,
                                         KvType::kQ8_0, KvType::kQ4_0, KvType::kQ5_0};

// n values drawn from N(0, scale^2) by a generator seeded with `seed`.
inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace rotor::testing
