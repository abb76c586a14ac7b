// Deferred RoPE: keys are stored before rotation and rotated inside attention.
// Since <R(a) q, R(b) k> = <q, R(b - a) k>, a key at distance d = a - b behind
// an unrotated query is rotated by -d: k' = c(d) * k + s(d) * swap(k), where
// swap exchanges the two lanes of each rotation pair and s carries the sign.
// The table holds c and s per distance, one float per lane (head_dim lanes,
// lanes past n_rot have c = 1, s = 0), so the kernel needs no per-pair logic.
// Distances are bounded by the cache size plus a ubatch, whatever the text
// position: the table's memory is fixed however long generation runs.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/rope.h"

namespace rotor {

class RopeDistanceTable {
 public:
  RopeDistanceTable(const ops::RopeConfig& cfg, int64_t max_distance);
  int64_t max_distance() const { return max_distance_; }
  int head_dim() const { return cfg_.head_dim; }
  const ops::RopeConfig& config() const { return cfg_; }
  // Rows of head_dim floats for distance d in [0, max_distance).
  const float* Cos(int64_t d) const { return cos_.data() + d * cfg_.head_dim; }
  const float* Sin(int64_t d) const { return sin_.data() + d * cfg_.head_dim; }
  // The same rows for any distance (keys farther than the table: sinks in
  // original-position mode), computed into cos/sin [head_dim].
  void Compute(int64_t d, float* cos, float* sin) const;
  // Lane partner of each lane in a rotation pair.
  const std::vector<int>& partner() const { return partner_; }

 private:
  ops::RopeConfig cfg_;
  int64_t max_distance_;
  std::vector<int> partner_;   // [head_dim]
  std::vector<float> cos_;     // [max_distance, head_dim]
  std::vector<float> sin_;     // [max_distance, head_dim]
};

}  // namespace rotor
