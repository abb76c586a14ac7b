// Helpers shared by the ops tests: seeded data and the ISA loop.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"

namespace rotor::ops::testing {

inline constexpr double kEps = 1.0 / (1 << 24);  // unit roundoff of f32 (2^-24)

// Every ISA this machine runs, lowest first.
inline std::vector<Isa> Isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (i <= BestIsa()) out.push_back(i);
  return out;
}

// Sets an ISA for the scope and restores the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : old_(ActiveIsa()) { SetIsa(isa); }
  ~ScopedIsa() { SetIsa(old_); }

 private:
  Isa old_;
};

// Uniform in [-scale, scale] with a few outliers (x20), like activations.
inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  for (int64_t i = 0; i < n / 97; ++i) v[rng() % n] *= 20.f;
  return v;
}

inline std::string IsaLabel(Isa isa) { return std::string(IsaName(isa)); }

}  // namespace rotor::ops::testing
