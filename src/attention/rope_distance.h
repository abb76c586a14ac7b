// Deferred RoPE: keys are stored before rotation and rotated inside attention.
// Since <R(a) q, R(b) k> = <q, R(b - a) k>, a key at distance d = a - b behind
// an unrotated query is rotated by -d: k' = c(d) * k + s(d) * swap(k), where
// swap exchanges the two lanes of each rotation pair and s carries the sign.
// The table holds c and s per distance, one float per lane (head_dim lanes,
// lanes past n_rot have c = 1, s = 0), so the kernel needs no per-pair logic.
// Distances are bounded by the cache size plus a ubatch, whatever the text
// position: the table's memory is fixed however long generation runs.
//
// The rows are stored in two levels, d = 64 hi + lo: a coarse row per 64
// distances and 64 fine rows, combined by angle addition inside the kernel
// (c = c1 c2 - s1 s2, s = s1 c2 + c1 s2 holds lane-wise with the sign folded
// in). The two tables stay in cache (~100 KB at 8K distances) instead of
// streaming a row per key from memory beside the keys themselves.
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
  static constexpr int kFine = 64;
  // Rows of head_dim floats: the coarse rows of distance 64 * (d / 64) and the
  // fine rows of distance d % 64, for d in [0, max_distance).
  const float* CoarseCos(int64_t d) const { return coarse_cos_.data() + (d / kFine) * cfg_.head_dim; }
  const float* CoarseSin(int64_t d) const { return coarse_sin_.data() + (d / kFine) * cfg_.head_dim; }
  const float* FineCos(int64_t d) const { return fine_cos_.data() + (d % kFine) * cfg_.head_dim; }
  const float* FineSin(int64_t d) const { return fine_sin_.data() + (d % kFine) * cfg_.head_dim; }
  // The fine rows' sines negated: with FineCos, the row of distance -d for
  // d in [0, 64), what Row(-d) computes (a key d cells after a tile block's
  // first, TaskRunner::RotateTile).
  const float* FineSinNegated(int64_t d) const {
    return fine_sin_neg_.data() + (d % kFine) * cfg_.head_dim;
  }
  // The same rows for any distance (keys farther than the table: sinks in
  // original-position mode), computed into cos/sin [head_dim].
  void Compute(int64_t d, float* cos, float* sin) const;
  // The whole row of any distance d, negative too, into cos/sin [head_dim]:
  // the two levels combined by angle addition (as the folds combine them)
  // when |d| is within the table, the row of -d's transpose (sin negated)
  // for d < 0, else Compute. The prefill tiles of deferred keys rotate keys
  // and queries by such rows (attention.cc, TaskRunner::RotateTile).
  void Row(int64_t d, float* cos, float* sin) const;
  // Lane partner of each lane in a rotation pair.
  const std::vector<int>& partner() const { return partner_; }

 private:
  ops::RopeConfig cfg_;
  int64_t max_distance_;
  std::vector<int> partner_;   // [head_dim]
  std::vector<float> coarse_cos_, coarse_sin_;  // [max_distance / 64 + 1, head_dim]
  std::vector<float> fine_cos_, fine_sin_;      // [64, head_dim]
  std::vector<float> fine_sin_neg_;             // [64, head_dim]
};

}  // namespace rotor
