#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "base/check.h"

namespace rotor::ops {
namespace {

constexpr int kMaxStackPairs = 512;

void CheckConfig(const RopeConfig& cfg) {
  CHECK_MSG(cfg.n_rot > 0 && cfg.n_rot % 2 == 0 && cfg.n_rot <= cfg.head_dim,
            "ops: rope: n_rot must be even, > 0 and <= head_dim");
}

// cos/sin of the angles at position pos (a float, as llama2.c computes it).
void Angles(const RopeConfig& cfg, float pos, float* cos, float* sin) {
  for (int i = 0; i < cfg.n_rot / 2; ++i) {
    const float freq =
        1.0f / std::pow(cfg.base, static_cast<float>(2 * i) / static_cast<float>(cfg.n_rot));
    float val = pos * freq;
    if (cfg.freq_factors != nullptr) val /= cfg.freq_factors[i];
    cos[i] = std::cos(val);
    sin[i] = std::sin(val);
  }
}

template <typename F>
void WithAngles(const RopeConfig& cfg, F&& fn) {
  float stack_cos[kMaxStackPairs], stack_sin[kMaxStackPairs];  // [n_rot / 2]
  if (cfg.n_rot / 2 <= kMaxStackPairs) {
    fn(stack_cos, stack_sin);
  } else {
    std::vector<float> cos(cfg.n_rot / 2), sin(cfg.n_rot / 2);  // [n_rot / 2]
    fn(cos.data(), sin.data());
  }
}

}  // namespace

float RopeTheta(const RopeConfig& cfg, int i, double pos) {
  const float freq =
      1.0f / std::pow(cfg.base, static_cast<float>(2 * i) / static_cast<float>(cfg.n_rot));
  float val = static_cast<float>(pos) * freq;
  if (cfg.freq_factors != nullptr) val /= cfg.freq_factors[i];
  return val;
}

void RopeRotate(const RopeConfig& cfg, const float* cos, const float* sin, float* x) {
  const int half = cfg.n_rot / 2;
  if (cfg.layout == RopeLayout::kNormal) {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * cos[i] - x1 * sin[i];
      x[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
    }
  } else {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[i], x1 = x[i + half];
      x[i] = x0 * cos[i] - x1 * sin[i];
      x[i + half] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void Rope(const RopeConfig& cfg, float* x, int64_t n_tokens, int64_t n_heads,
          const int32_t* positions) {
  CheckConfig(cfg);
  WithAngles(cfg, [&](float* cos, float* sin) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      Angles(cfg, static_cast<float>(positions[t]), cos, sin);
      RopeWithAngles(cfg, cos, sin, x + t * n_heads * cfg.head_dim, 1, n_heads);
    }
  });
}

void RopeAngles(const RopeConfig& cfg, const int32_t* positions, int64_t n_tokens, float* cos,
                float* sin) {
  CheckConfig(cfg);
  const int64_t n_pairs = cfg.n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t)
    Angles(cfg, static_cast<float>(positions[t]), cos + t * n_pairs, sin + t * n_pairs);
}

void RopeWithAngles(const RopeConfig& cfg, const float* cos, const float* sin, float* x,
                    int64_t n_tokens, int64_t n_heads) {
  CheckConfig(cfg);
  const int64_t n_pairs = cfg.n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h)
      RopeRotate(cfg, cos + t * n_pairs, sin + t * n_pairs, x + (t * n_heads + h) * cfg.head_dim);
}

void RopeShift(const RopeConfig& cfg, float* x, int64_t n_heads, int32_t delta) {
  CheckConfig(cfg);
  WithAngles(cfg, [&](float* cos, float* sin) {
    Angles(cfg, static_cast<float>(delta), cos, sin);
    RopeWithAngles(cfg, cos, sin, x, 1, n_heads);
  });
}

}  // namespace rotor::ops
