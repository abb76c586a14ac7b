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
      for (int64_t h = 0; h < n_heads; ++h)
        RopeRotate(cfg, cos, sin, x + (t * n_heads + h) * cfg.head_dim);
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

RopeTable::RopeTable(const RopeConfig& cfg, int64_t max_pos)
    : cfg_(cfg), n_pairs_(cfg.n_rot / 2), max_pos_(max_pos) {
  CheckConfig(cfg);
  CHECK_GE(max_pos, 0);
  // The table does not keep a pointer the caller owns.
  cfg_.freq_factors = nullptr;
  cos_.resize(static_cast<size_t>(max_pos * n_pairs_));
  sin_.resize(static_cast<size_t>(max_pos * n_pairs_));
  for (int64_t p = 0; p < max_pos; ++p)
    Angles(cfg, static_cast<float>(p), cos_.data() + p * n_pairs_, sin_.data() + p * n_pairs_);
}

void RopeWithTable(const RopeTable& t, float* x, int64_t n_tokens, int64_t n_heads,
                   const int32_t* positions) {
  const int head_dim = t.config().head_dim;
  for (int64_t i = 0; i < n_tokens; ++i) {
    CHECK_MSG(positions[i] >= 0 && positions[i] < t.max_pos(),
              "ops: rope: position outside the table");
    const float* cos = t.Cos(positions[i]);
    const float* sin = t.Sin(positions[i]);
    for (int64_t h = 0; h < n_heads; ++h)
      RopeRotate(t.config(), cos, sin, x + (i * n_heads + h) * head_dim);
  }
}

void RopeShift(const RopeConfig& cfg, float* x, int64_t n_heads, int32_t delta) {
  CheckConfig(cfg);
  WithAngles(cfg, [&](float* cos, float* sin) {
    Angles(cfg, static_cast<float>(delta), cos, sin);
    for (int64_t h = 0; h < n_heads; ++h) RopeRotate(cfg, cos, sin, x + h * cfg.head_dim);
  });
}

}  // namespace rotor::ops
