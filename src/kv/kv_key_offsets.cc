#include "kv/kv_key_offsets.h"

#include <utility>

#include "base/check.h"

namespace rotor {

KvKeyOffsets::KvKeyOffsets(Compute compute, int n_layer, int row_floats)
    : compute_(std::move(compute)), n_layer_(n_layer), row_floats_(row_floats) {}

const float* KvKeyOffsets::Part(int part, int layer) const {
  std::call_once(once_, [this] {
    values_ = compute_();
    CHECK_EQ(values_.size(), 3 * static_cast<size_t>(n_layer_) * row_floats_);
  });
  CHECK(layer >= 0 && layer < n_layer_);
  return values_.data() + (static_cast<size_t>(part) * n_layer_ + layer) * row_floats_;
}

}  // namespace rotor
