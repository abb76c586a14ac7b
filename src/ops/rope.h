// Rotary position embedding, computed the way llama2.c / llama.cpp do in float:
// freq_i = 1 / powf(base, (float)(2i) / n_rot), theta_i = pos * freq_i
// (divided by freq_factors[i] when given), cos/sin of theta in float.
#pragma once

#include <cstdint>

namespace rotor::ops {

// kNormal: pairs (x[2i], x[2i+1]) (Llama GGUF). kNeox: pairs (x[i], x[i + n_rot/2]).
enum class RopeLayout { kNormal, kNeox };

struct RopeConfig {
  int head_dim;
  int n_rot;  // dims >= n_rot are left unchanged; even, <= head_dim
  float base = 10000.f;
  RopeLayout layout = RopeLayout::kNormal;
  const float* freq_factors = nullptr;  // [n_rot / 2] or null
};

// The angle of pair i at position pos (float, as above).
float RopeTheta(const RopeConfig& cfg, int i, double pos);

// x: [n_tokens, n_heads, head_dim] in place; positions: [n_tokens].
void Rope(const RopeConfig& cfg, float* x, int64_t n_tokens, int64_t n_heads,
          const int32_t* positions);

// The angles Rope takes for each of n_tokens positions, computed once for
// several Rope calls at those positions (every layer of a forward pass):
// cos, sin: [n_tokens, n_rot / 2] each.
void RopeAngles(const RopeConfig& cfg, const int32_t* positions, int64_t n_tokens, float* cos,
                float* sin);
// Rope with the angles of RopeAngles (row t for token t): the same result.
void RopeWithAngles(const RopeConfig& cfg, const float* cos, const float* sin, float* x,
                    int64_t n_tokens, int64_t n_heads);

// Rotates one head vector (head_dim floats) by the angles in cos/sin [n_pairs].
void RopeRotate(const RopeConfig& cfg, const float* cos, const float* sin, float* x);
// Rotates one token's heads x: [n_heads, head_dim] by a position delta (the
// re-rotation of cached K): Rope(p) then RopeShift(d) ~= Rope(p + d).
void RopeShift(const RopeConfig& cfg, float* x, int64_t n_heads, int32_t delta);

}  // namespace rotor::ops
