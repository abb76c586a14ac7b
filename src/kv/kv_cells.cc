#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "kv/kv_policy.h"

namespace rotor {

KvCells::KvCells(int n_lanes, int32_t n_cells, Rotate rotate)
    : n_lanes_(n_lanes),
      n_cells_(n_cells),
      rotate_(std::move(rotate)),
      index_(static_cast<size_t>(n_lanes) * n_cells, -1),
      pos_(static_cast<size_t>(n_lanes) * n_cells, 0),
      used_(n_lanes, 0),
      hi_(n_lanes, 0),
      ordered_(n_lanes, 1),
      max_index_(n_lanes, -1),
      max_pos_(n_lanes, -1),
      free_from_(n_lanes, 0) {}

int32_t KvCells::max_used() const { return *std::max_element(used_.begin(), used_.end()); }
int32_t KvCells::max_hi() const { return *std::max_element(hi_.begin(), hi_.end()); }

void KvCells::Set(int lane, int32_t c, TextIndex index, int32_t pos) {
  DCHECK(c >= 0 && c < n_cells_);
  const size_t at = At(lane, c);
  CHECK(index_[at] < 0);
  CHECK(index >= 0);
  index_[at] = index;
  pos_[at] = pos;
  if (index <= max_index_[lane] || pos <= max_pos_[lane] || pos < 0) ordered_[lane] = 0;
  max_index_[lane] = std::max(max_index_[lane], index);
  max_pos_[lane] = std::max(max_pos_[lane], pos);
  ++used_[lane];
  hi_[lane] = std::max(hi_[lane], c + 1);
  if (c == free_from_[lane]) free_from_[lane] = c + 1;
}

void KvCells::Free(int lane, int32_t c) {
  const size_t at = At(lane, c);
  CHECK(index_[at] >= 0);
  index_[at] = -1;
  --used_[lane];
  free_from_[lane] = std::min(free_from_[lane], c);
  if (c + 1 == hi_[lane])
    while (hi_[lane] > 0 && index_[At(lane, hi_[lane] - 1)] < 0) --hi_[lane];
}

void KvCells::Move(int lane, int32_t c, int32_t pos) {
  ordered_[lane] = 0;
  MoveTo(lane, c, pos);
}

void KvCells::MoveTo(int lane, int32_t c, int32_t pos) {
  const size_t at = At(lane, c);
  const int32_t delta = pos - pos_[at];
  if (delta == 0) return;
  pos_[at] = pos;
  if (!rotate_) return;
  if (defer_rotations_)
    rotations_.push_back({lane, c, delta});
  else
    rotate_(lane, c, delta);
}

int32_t KvCells::FirstFree(int lane, int32_t from) const {
  const TextIndex* index = lane_index(lane);
  for (int32_t c = std::max(from, free_from_[lane]); c < n_cells_; ++c)
    if (index[c] < 0) return c;
  return -1;
}

void KvCells::RenumberByRank(int lane) {
  const TextIndex* index = lane_index(lane);
  const int32_t* pos = lane_pos(lane);
  // Unique positions (rising with text index) as many as 1 + an upper
  // bound of them: they are 0..n-1 already.
  if (ordered_[lane] && max_pos_[lane] == used_[lane] - 1) return;
  // One pass (positions are below about the cell count when compact): a
  // token's rank is the count of positions below its own.
  if (ordered_[lane] && max_pos_[lane] < 4 * static_cast<int64_t>(n_cells_) + 1024) {
    below_.assign(static_cast<size_t>(max_pos_[lane]) + 2, 0);
    for (int32_t c = 0; c < hi_[lane]; ++c)
      if (index[c] >= 0) below_[pos[c] + 1] = 1;
    for (size_t p = 1; p < below_.size(); ++p) below_[p] += below_[p - 1];
    if (rotate_) {
      for (int32_t c = 0; c < hi_[lane]; ++c)
        if (index[c] >= 0) MoveTo(lane, c, below_[pos[c]]);
    } else {  // nothing to re-rotate: the positions alone, without a call per cell
      int32_t* p = pos_.data() + At(lane, 0);
      for (int32_t c = 0; c < hi_[lane]; ++c)
        if (index[c] >= 0) p[c] = below_[p[c]];
    }
  } else {
    std::vector<int32_t> order;
    order.reserve(used_[lane]);
    for (int32_t c = 0; c < hi_[lane]; ++c)
      if (index[c] >= 0) order.push_back(c);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return index[a] < index[b]; });
    for (size_t r = 0; r < order.size(); ++r) MoveTo(lane, order[r], static_cast<int32_t>(r));
    ordered_[lane] = 1;
  }
  max_pos_[lane] = used_[lane] - 1;
}

void KvCells::CompactLane(int lane, const std::function<void(int32_t from, int32_t to)>& moved) {
  CHECK(rotations_.empty());
  TextIndex* index = index_.data() + At(lane, 0);
  int32_t* pos = pos_.data() + At(lane, 0);
  const int32_t hi = hi_[lane];
  int32_t to = 0;  // the next cell to fill; every cell below it is occupied
  for (int32_t from = 0; from < hi; ++from) {
    if (index[from] < 0) continue;
    if (from != to) {
      if (move_data_) move_data_(lane, from, to);
      index[to] = index[from], pos[to] = pos[from];
      index[from] = -1;
      if (moved) moved(from, to);
    }
    ++to;
  }
  DCHECK(to == used_[lane]);
  hi_[lane] = free_from_[lane] = to;
}

void KvCells::Clear() {
  std::fill(index_.begin(), index_.end(), -1);
  std::fill(used_.begin(), used_.end(), 0);
  std::fill(hi_.begin(), hi_.end(), 0);
  std::fill(ordered_.begin(), ordered_.end(), 1);
  std::fill(max_index_.begin(), max_index_.end(), -1);
  std::fill(max_pos_.begin(), max_pos_.end(), -1);
  std::fill(free_from_.begin(), free_from_.end(), 0);
}

}  // namespace rotor
