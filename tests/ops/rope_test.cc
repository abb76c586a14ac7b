// RoPE: both layouts against a double-precision rotation, the angles-once and
// shift variants against Rope.
#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops_test_util.h"

namespace rotor::ops {
namespace {

using testing::kEps;

// The angle as llama2.c computes it, in float (the definition rotor follows).
float Theta(const RopeConfig& cfg, int i, int64_t pos) {
  const float freq =
      1.0f / std::pow(cfg.base, static_cast<float>(2 * i) / static_cast<float>(cfg.n_rot));
  float val = static_cast<float>(pos) * freq;
  if (cfg.freq_factors != nullptr) val /= cfg.freq_factors[i];
  return val;
}

// The pair indices of pair i.
std::pair<int, int> Pair(const RopeConfig& cfg, int i) {
  return cfg.layout == RopeLayout::kNormal ? std::pair{2 * i, 2 * i + 1}
                                           : std::pair{i, i + cfg.n_rot / 2};
}

// Rotation in double by `theta(i)`; returns the expected head.
template <typename F>
std::vector<double> Rotate(const RopeConfig& cfg, const float* x, F&& theta) {
  std::vector<double> out(x, x + cfg.head_dim);
  for (int i = 0; i < cfg.n_rot / 2; ++i) {
    const auto [a, b] = Pair(cfg, i);
    const double t = theta(i), c = std::cos(t), s = std::sin(t);
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[a] * s + x[b] * c;
  }
  return out;
}

std::vector<RopeConfig> Configs(const std::vector<float>& ff) {
  std::vector<RopeConfig> out;
  for (RopeLayout layout : {RopeLayout::kNormal, RopeLayout::kNeox}) {
    out.push_back({.head_dim = 64, .n_rot = 64, .base = 10000.f, .layout = layout});
    out.push_back({.head_dim = 48, .n_rot = 32, .base = 500000.f, .layout = layout});
    out.push_back({.head_dim = 64,
                   .n_rot = 64,
                   .base = 500000.f,
                   .layout = layout,
                   .freq_factors = ff.data()});
  }
  return out;
}

std::vector<float> FreqFactors() {
  std::vector<float> ff(32);
  for (int i = 0; i < 32; ++i) ff[i] = 1.f + 0.25f * static_cast<float>(i % 5);
  return ff;
}

const std::vector<int32_t> kPositions = {0, 1, 7, 100, 4095, 50000};

// With the float angle as defined, cos/sin (<= 1 ulp) and the rotation's two
// products and sum: |err| <= 4 u (|x_a| + |x_b|) per element.
TEST(RopeTest, MatchesDoubleRotation) {
  const std::vector<float> ff = FreqFactors();
  for (const RopeConfig& cfg : Configs(ff)) {
    const int64_t n_heads = 3, n_tok = static_cast<int64_t>(kPositions.size());
    std::vector<float> x =
        testing::RandomVector(n_tok * n_heads * cfg.head_dim, 11);  // [n_tok, n_heads, head_dim]
    const std::vector<float> in = x;
    Rope(cfg, x.data(), n_tok, n_heads, kPositions.data());
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* xin = in.data() + (t * n_heads + h) * cfg.head_dim;
        const float* got = x.data() + (t * n_heads + h) * cfg.head_dim;
        const std::vector<double> want =
            Rotate(cfg, xin, [&](int i) { return Theta(cfg, i, kPositions[t]); });
        // The same with the exact angle: the float angle is off by <= 4 u theta.
        const std::vector<double> exact = Rotate(cfg, xin, [&](int i) {
          double th = kPositions[t] * std::pow(static_cast<double>(cfg.base), -2.0 * i / cfg.n_rot);
          return cfg.freq_factors ? th / cfg.freq_factors[i] : th;
        });
        for (int i = 0; i < cfg.n_rot / 2; ++i) {
          const auto [a, b] = Pair(cfg, i);
          const double mag = std::fabs(xin[a]) + std::fabs(xin[b]);
          const double theta = std::fabs(Theta(cfg, i, kPositions[t]));
          for (int e : {a, b}) {
            ASSERT_LE(std::fabs(got[e] - want[e]), 4 * kEps * mag)
                << "pos " << kPositions[t] << " e " << e;
            ASSERT_LE(std::fabs(got[e] - exact[e]), (4 * theta + 4) * kEps * mag)
                << "pos " << kPositions[t];
          }
        }
        for (int e = cfg.n_rot; e < cfg.head_dim; ++e)
          ASSERT_EQ(got[e], xin[e]) << "dims past n_rot change";
      }
  }
}

// The angles computed once for several calls (the forward pass's layers):
// the same bits as Rope, both layouts, partial rotation and frequency factors.
TEST(RopeTest, AnglesOnceMatchRope) {
  const std::vector<float> ff = FreqFactors();
  for (const RopeConfig& cfg : Configs(ff)) {
    const int64_t n_tok = static_cast<int64_t>(kPositions.size()), n_pairs = cfg.n_rot / 2;
    std::vector<float> cos(n_tok * n_pairs), sin(n_tok * n_pairs);  // [n_tok, n_pairs]
    RopeAngles(cfg, kPositions.data(), n_tok, cos.data(), sin.data());
    for (int64_t n_heads : {1, 3}) {
      std::vector<float> a = testing::RandomVector(n_tok * n_heads * cfg.head_dim, 13), b = a;
      Rope(cfg, a.data(), n_tok, n_heads, kPositions.data());
      RopeWithAngles(cfg, cos.data(), sin.data(), b.data(), n_tok, n_heads);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
    }
    EXPECT_EQ(cos[2 * n_pairs + 3], std::cos(Theta(cfg, 3, 7)));
    EXPECT_EQ(sin[4 * n_pairs + 1], std::sin(Theta(cfg, 1, 4095)));
  }
}

// R(theta_p) then R(theta_d) vs R(theta_{p+d}): each float angle is within
// 4 u of its exact value, so |err| <= (4 (|theta_p| + |theta_d| + |theta_p+d|) + 8) u |pair|.
TEST(RopeTest, ShiftComposes) {
  const std::vector<float> ff = FreqFactors();
  for (const RopeConfig& cfg : Configs(ff))
    for (int32_t p : {0, 5, 300, 4000})
      for (int32_t d : {1, 17, -5, 2048}) {
        if (p + d < 0) continue;
        const int64_t n_heads = 4;
        std::vector<float> a = testing::RandomVector(n_heads * cfg.head_dim, 13), b = a;
        const std::vector<float> in = a;
        Rope(cfg, a.data(), 1, n_heads, &p);
        RopeShift(cfg, a.data(), n_heads, d);
        const int32_t pd = p + d;
        Rope(cfg, b.data(), 1, n_heads, &pd);
        for (int64_t h = 0; h < n_heads; ++h)
          for (int i = 0; i < cfg.n_rot / 2; ++i) {
            const auto [ia, ib] = Pair(cfg, i);
            const float* xin = in.data() + h * cfg.head_dim;
            const double mag = std::fabs(xin[ia]) + std::fabs(xin[ib]);
            const double th = std::fabs(Theta(cfg, i, p)) + std::fabs(Theta(cfg, i, std::abs(d))) +
                              std::fabs(Theta(cfg, i, pd));
            for (int e : {ia, ib})
              ASSERT_LE(std::fabs(a[h * cfg.head_dim + e] - b[h * cfg.head_dim + e]),
                        (4 * th + 8) * kEps * mag)
                  << "p=" << p << " d=" << d << " e=" << e;
          }
      }
}

// kNeox on x equals kNormal on x with pairs (i, i + n/2) moved to (2i, 2i + 1).
TEST(RopeTest, LayoutsAgree) {
  const RopeConfig neox{.head_dim = 64, .n_rot = 64, .layout = RopeLayout::kNeox};
  const RopeConfig normal{.head_dim = 64, .n_rot = 64, .layout = RopeLayout::kNormal};
  std::vector<float> x = testing::RandomVector(64, 14), y(64);
  for (int i = 0; i < 32; ++i) {
    y[2 * i] = x[i];
    y[2 * i + 1] = x[i + 32];
  }
  const int32_t pos = 123;
  Rope(neox, x.data(), 1, 1, &pos);
  Rope(normal, y.data(), 1, 1, &pos);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(x[i], y[2 * i]);
    EXPECT_EQ(x[i + 32], y[2 * i + 1]);
  }
}

}  // namespace
}  // namespace rotor::ops
