// Elementwise ops on every ISA against straightforward double-precision
// definitions (and against ops/ref).
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/ref/ref.h"
#include "ops_test_util.h"
#include "tensor/fp16.h"

namespace rotor::ops {
namespace {

using testing::kEps;

constexpr int64_t kSizes[] = {1, 7, 16, 33, 4099};

// Bounds (u = 2^-24). A sum of n f32 terms in any order (scalar chain of n, or
// vector lanes) is within n u sum|terms| of the exact sum; RmsNorm's scale is
// 1/sqrt(ss/n + eps), so half that relative error plus a few roundings (sqrt,
// divide, two multiplies): (n / 2 + 8) u relative per output.
TEST(ElementwiseTest, RmsNorm) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int64_t n : kSizes) {
      const std::vector<float> x = testing::RandomVector(n, 1), w = testing::RandomVector(n, 2);
      std::vector<float> out(n), in_place = x;
      RmsNorm(x.data(), w.data(), out.data(), n, 1e-5f);
      RmsNorm(in_place.data(), w.data(), in_place.data(), n, 1e-5f);
      double ss = 0;
      for (float v : x) ss += static_cast<double>(v) * v;
      const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[i] * scale * w[i];
        ASSERT_LE(std::fabs(out[i] - want), (n / 2.0 + 8) * kEps * std::fabs(want) + 1e-30)
            << IsaName(isa) << " n=" << n << " i=" << i;
        ASSERT_EQ(in_place[i], out[i]);
      }
    }
  }
}

// exp: <= 2 ulp (fast) or 1 ulp (libm); the sum n u relative; the division
// and the final multiply 2 more roundings: (n + 8) u relative per output.
TEST(ElementwiseTest, Softmax) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int64_t n : kSizes) {
      std::vector<float> x = testing::RandomVector(n, 3, 8.f);
      if (n > 5) x[5] = -200.f;  // underflows to 0
      const std::vector<float> in = x;
      Softmax(x.data(), n);
      double max = in[0], sum = 0;
      for (float v : in) max = std::fmax(max, v);
      for (float v : in) sum += std::exp(v - max);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(in[i] - max) / sum;
        ASSERT_LE(std::fabs(x[i] - want), (n + 8) * kEps * want + 1e-38)
            << IsaName(isa) << " n=" << n << " i=" << i;
      }
    }
  }
}

// silu(g) u = g / (1 + exp(-g)) * u: exp 2 ulp, add, divide, multiply: 8 u
// relative (1 + exp(-g) >= 1, so no cancellation).
TEST(ElementwiseTest, SwiGlu) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int64_t n : kSizes) {
      std::vector<float> g = testing::RandomVector(n, 4, 10.f), u = testing::RandomVector(n, 5);
      if (n > 3) {
        g[0] = 80.f;
        g[1] = -80.f;
        g[2] = 0.f;
        g[3] = -1e-20f;
      }
      std::vector<float> out(n);
      SwiGlu(g.data(), u.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
        ASSERT_LE(std::fabs(out[i] - want), 8 * kEps * std::fabs(want) + 1e-37)
            << IsaName(isa) << " n=" << n << " g=" << g[i];
      }
    }
  }
}

TEST(ElementwiseTest, AddAndScaleAreExact) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int64_t n : kSizes) {
      const std::vector<float> a = testing::RandomVector(n, 6), b = testing::RandomVector(n, 7);
      std::vector<float> x = a;
      Add(x.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], a[i] + b[i]);
      Scale(x.data(), 0.3f, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], (a[i] + b[i]) * 0.3f);
    }
  }
}

TEST(ElementwiseTest, FastMatchesRef) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    const int64_t n = 4099;
    const std::vector<float> x = testing::RandomVector(n, 8, 4.f), w = testing::RandomVector(n, 9);
    std::vector<float> a(n), b(n);
    RmsNorm(x.data(), w.data(), a.data(), n, 1e-6f);
    ref::RmsNorm(x.data(), w.data(), b.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], n * kEps * std::fabs(b[i]) + 1e-30);
    SwiGlu(x.data(), w.data(), a.data(), n);
    ref::SwiGlu(x.data(), w.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 8 * kEps * std::fabs(b[i]) + 1e-37);
  }
}

// Hadamard on every ISA: the same bits as ref::Hadamard (the fast paths do
// the same additions in the same order), within a few ulp of the definition
// H[i][j] = (-1)^popcount(i & j) / sqrt(B) in double, and its own inverse to
// rounding. Odd block counts, and a power of 2 the fast paths leave to ref.
TEST(ElementwiseTest, HadamardMatchesRefBitsAndDefinition) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int block : {2, 8, 16, 32, 64})
      for (int64_t blocks : {1, 3, 7, 33}) {
        const int64_t n = blocks * block;
        const std::vector<float> x =
            testing::RandomVector(n, static_cast<uint32_t>(block * 100 + blocks), 3.f);
        std::vector<float> got = x, want = x;
        Hadamard(got.data(), n, block);
        ref::Hadamard(want.data(), n, block);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(FloatToBits(got[i]), FloatToBits(want[i]))
              << IsaName(isa) << " block=" << block << " i=" << i;
        for (int64_t b = 0; b < blocks; ++b)
          for (int i = 0; i < block; ++i) {
            double exact = 0, mag = 0;
            for (int j = 0; j < block; ++j) {
              const double v = x[b * block + j];
              exact += __builtin_popcount(i & j) % 2 ? -v : v;
              mag += std::fabs(v);
            }
            exact /= std::sqrt(static_cast<double>(block));
            mag /= std::sqrt(static_cast<double>(block));
            ASSERT_NEAR(got[b * block + i], exact, 8 * kEps * mag * std::log2(block) + 1e-30)
                << IsaName(isa) << " block=" << block << " i=" << i;
          }
        Hadamard(got.data(), n, block);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], x[i], 16 * kEps * std::log2(block) * 3.f * block)
              << IsaName(isa) << " block=" << block << " i=" << i;
      }
  }
}

}  // namespace
}  // namespace rotor::ops
