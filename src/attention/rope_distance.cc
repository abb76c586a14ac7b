#include "attention/rope_distance.h"

#include <cmath>

namespace rotor {

RopeDistanceTable::RopeDistanceTable(const ops::RopeConfig& cfg, int64_t max_distance)
    : cfg_(cfg), max_distance_(max_distance), partner_(cfg.head_dim) {
  const int hd = cfg.head_dim, half = cfg.n_rot / 2;
  for (int l = 0; l < hd; ++l) partner_[l] = l;
  for (int i = 0; i < half; ++i) {
    const int a = cfg.layout == ops::RopeLayout::kNormal ? 2 * i : i;
    const int b = cfg.layout == ops::RopeLayout::kNormal ? 2 * i + 1 : i + half;
    partner_[a] = b;
    partner_[b] = a;
  }
  const int64_t n_coarse = max_distance / kFine + 1;
  coarse_cos_.resize(static_cast<size_t>(n_coarse) * hd);
  coarse_sin_.resize(static_cast<size_t>(n_coarse) * hd);
  for (int64_t i = 0; i < n_coarse; ++i)
    Compute(i * kFine, &coarse_cos_[i * hd], &coarse_sin_[i * hd]);
  fine_cos_.resize(static_cast<size_t>(kFine) * hd);
  fine_sin_.resize(static_cast<size_t>(kFine) * hd);
  for (int64_t d = 0; d < kFine; ++d) Compute(d, &fine_cos_[d * hd], &fine_sin_[d * hd]);
  fine_sin_neg_.resize(fine_sin_.size());
  for (size_t i = 0; i < fine_sin_.size(); ++i) fine_sin_neg_[i] = -fine_sin_[i];
}

// Rotation by -theta of pair (a, b): a' = a cos + b sin, b' = b cos - a sin.
void RopeDistanceTable::Compute(int64_t d, float* cos, float* sin) const {
  const int hd = cfg_.head_dim, half = cfg_.n_rot / 2;
  for (int l = 0; l < hd; ++l) cos[l] = 1.0f, sin[l] = 0.0f;
  for (int i = 0; i < half; ++i) {
    const float theta = ops::RopeTheta(cfg_, i, static_cast<double>(d));
    const float c = std::cos(theta), s = std::sin(theta);
    const int a = cfg_.layout == ops::RopeLayout::kNormal ? 2 * i : i;
    const int b = partner_[a];
    cos[a] = c, cos[b] = c;
    sin[a] = s, sin[b] = -s;
  }
}

void RopeDistanceTable::Row(int64_t d, float* cos, float* sin) const {
  const int64_t a = d < 0 ? -d : d;
  if (a >= max_distance_) return Compute(d, cos, sin);
  const int hd = cfg_.head_dim;
  const float *c1 = CoarseCos(a), *s1 = CoarseSin(a), *c2 = FineCos(a), *s2 = FineSin(a);
  // R(d) = R(-d)^T: the same cosines, the sines negated.
  const float sign = d < 0 ? -1.f : 1.f;
  for (int l = 0; l < hd; ++l) {
    cos[l] = c1[l] * c2[l] - s1[l] * s2[l];
    sin[l] = sign * (s1[l] * c2[l] + c1[l] * s2[l]);
  }
}

}  // namespace rotor
