// KvCells::RenumberByRank (compact positions): the one-pass path, taken while
// a lane's positions rise with text index, gives every token its rank in text
// order as the sort does, through random appends, evictions, moves and
// out-of-order sets (which send it to the sort); and the rotation hook sees
// exactly each cell's change of position.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kv/kv_policy.h"

namespace rotor {
namespace {

TEST(KvCells, RenumberGivesEveryTokenItsRank) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n_cells = 1 + static_cast<int32_t>(rng() % 40);
    const int n_lanes = 2;
    // [lane][cell]: the position the cell was set to, plus every delta the
    // rotation hook saw since: the cell's position, if the hook is exact.
    std::vector<std::vector<int64_t>> seen(n_lanes, std::vector<int64_t>(n_cells, 0));
    KvCells cells(n_lanes, n_cells, [&](int lane, int32_t c, int32_t d) { seen[lane][c] += d; });
    TextIndex next = 1000, older = 999;  // appended tokens; older ones set late (unique)
    for (int step = 0; step < 50; ++step) {
      for (int lane = 0; lane < n_lanes; ++lane) {
        const int event = static_cast<int>(rng() % 20);
        if (event == 0 && cells.used(lane) > 0) {  // a move from outside (a shift)
          for (int32_t c = 0; c < cells.hi(lane); ++c)
            if (cells.index(lane, c) >= 0) {
              cells.Move(lane, c, cells.pos(lane, c) + 3);  // the hook sees +3
              break;
            }
        } else if (event == 1) {  // an older token set after newer ones (a copied lane)
          const int32_t c = cells.FirstFree(lane);
          if (c >= 0) {
            cells.Set(lane, c, older--, 0);
            seen[lane][c] = 0;
          }
        }
        for (int e = 0; e < static_cast<int>(rng() % 3) && cells.used(lane) > 0; ++e) {
          int32_t c;
          do c = static_cast<int32_t>(rng() % cells.hi(lane));
          while (cells.index(lane, c) < 0);
          cells.Free(lane, c);
        }
        for (int a = static_cast<int>(rng() % 4); a > 0; --a) {  // appends at compact positions
          const int32_t c = cells.FirstFree(lane);
          if (c < 0) break;
          cells.Set(lane, c, next++, cells.max_used());
          seen[lane][c] = cells.pos(lane, c);
        }
      }
      for (int lane = 0; lane < n_lanes; ++lane) {
        cells.RenumberByRank(lane);
        std::vector<int32_t> order;
        for (int32_t c = 0; c < cells.hi(lane); ++c)
          if (cells.index(lane, c) >= 0) order.push_back(c);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return cells.index(lane, a) < cells.index(lane, b);
        });
        for (size_t r = 0; r < order.size(); ++r) {
          ASSERT_EQ(cells.pos(lane, order[r]), static_cast<int32_t>(r))
              << "trial " << trial << " step " << step << " lane " << lane;
          ASSERT_EQ(seen[lane][order[r]], cells.pos(lane, order[r]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotor
