// KvCells::RenumberByRank (compact positions): the one-pass path, taken while
// a lane's positions rise with text index (and nothing done while they are
// 0..n-1 already), gives every token its rank in text order as the sort
// does, through random appends, evictions, moves and out-of-order sets
// (which send it to the sort); and the rotation hook sees exactly each
// cell's change of position. FirstFree, which starts where no cell below is
// empty, finds the lowest empty cell as a scan from the start does.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kv/kv_policy.h"

namespace rotor {
namespace {

// With a rotation hook (keys stored rotated) and without one (deferred: the
// one-pass path writes the positions alone).
TEST(KvCells, RenumberGivesEveryTokenItsRank) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 600; ++trial) {
    const bool hook = trial % 2 == 0;
    const int32_t n_cells = 1 + static_cast<int32_t>(rng() % 40);
    const int n_lanes = 2;
    // [lane][cell]: the position the cell was set to, plus every delta the
    // rotation hook saw since: the cell's position, if the hook is exact.
    std::vector<std::vector<int64_t>> seen(n_lanes, std::vector<int64_t>(n_cells, 0));
    KvCells cells(n_lanes, n_cells,
                  hook ? KvCells::Rotate([&](int lane, int32_t c, int32_t d) { seen[lane][c] += d; })
                       : KvCells::Rotate());
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
          if (hook) {
            ASSERT_EQ(seen[lane][order[r]], cells.pos(lane, order[r]));
          }
        }
      }
    }
  }
}

// The lowest empty cell at or after `from`, by a scan of every cell.
int32_t ScanFree(const KvCells& cells, int lane, int32_t from) {
  for (int32_t c = from; c < cells.n_cells(); ++c)
    if (cells.index(lane, c) < 0) return c;
  return -1;
}

TEST(KvCells, FirstFreeIsTheLowestEmptyCell) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t n_cells = 1 + static_cast<int32_t>(rng() % 50);
    KvCells cells(2, n_cells, nullptr);
    TextIndex next = 0;
    for (int step = 0; step < 200; ++step) {
      const int lane = static_cast<int>(rng() % 2);
      const int event = static_cast<int>(rng() % 10);
      if (event < 5) {  // admit to the lowest empty cell (the lane policies)
        const int32_t c = cells.FirstFree(lane);
        ASSERT_EQ(c, ScanFree(cells, lane, 0)) << "trial " << trial << " step " << step;
        if (c >= 0) cells.Set(lane, c, next, static_cast<int32_t>(next)), ++next;
      } else if (event < 7) {  // set any empty cell (the full policy's slots, a loaded file)
        const int32_t c = ScanFree(cells, lane, static_cast<int32_t>(rng() % n_cells));
        if (c >= 0) cells.Set(lane, c, next, static_cast<int32_t>(next)), ++next;
      } else if (event < 9 && cells.used(lane) > 0) {  // evict
        int32_t c;
        do c = static_cast<int32_t>(rng() % cells.hi(lane));
        while (cells.index(lane, c) < 0);
        cells.Free(lane, c);
      } else if (event == 9 && rng() % 8 == 0) {
        cells.Clear();
      }
      const int32_t from = static_cast<int32_t>(rng() % n_cells);
      ASSERT_EQ(cells.FirstFree(lane, from), ScanFree(cells, lane, from))
          << "trial " << trial << " step " << step << " from " << from;
    }
  }
}

// CompactLane (snapkv after its prompt's compression): the lane's tokens end
// up in cells 0..used-1, in their order, with their positions, the data hook copies each
// moved cell's K/V (here a token id per cell) before the cell is reused, the
// other lane is untouched, and FirstFree and hi follow.
TEST(KvCells, CompactLaneMovesEveryTokenBelowItsCount) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t n_cells = 1 + static_cast<int32_t>(rng() % 60);
    KvCells cells(2, n_cells, nullptr);
    std::vector<std::vector<TextIndex>> data(2, std::vector<TextIndex>(n_cells, -1));  // [lane][cell]
    int hooks = 0, callbacks = 0;
    cells.set_move_data([&](int lane, int32_t from, int32_t to) {
      ++hooks;
      ASSERT_EQ(cells.index(lane, to), -1);
      data[lane][to] = data[lane][from];
    });
    TextIndex next = 0;
    for (int32_t c = 0; c < n_cells; ++c)
      for (int lane = 0; lane < 2; ++lane)
        if (rng() % 3 != 0) {
          cells.Set(lane, c, next, static_cast<int32_t>(next * 2 + lane));
          data[lane][c] = next++;
        }
    for (int32_t c = 0; c < n_cells; ++c)  // holes anywhere, as an eviction leaves them
      if (cells.index(0, c) >= 0 && rng() % 2 == 0) cells.Free(0, c);
    std::vector<std::pair<TextIndex, int32_t>> before, other;
    for (int32_t c = 0; c < n_cells; ++c) {
      if (cells.index(0, c) >= 0) before.push_back({cells.index(0, c), cells.pos(0, c)});
      other.push_back({cells.index(1, c), cells.pos(1, c)});
    }
    cells.CompactLane(0, [&](int32_t from, int32_t to) {
      ++callbacks;
      EXPECT_LT(to, from);
      EXPECT_EQ(cells.index(0, from), -1);
    });
    EXPECT_EQ(hooks, callbacks);
    const int32_t used = cells.used(0);
    ASSERT_EQ(used, static_cast<int32_t>(before.size()));
    EXPECT_EQ(cells.hi(0), used);
    EXPECT_EQ(cells.FirstFree(0), used < n_cells ? used : -1);
    std::vector<std::pair<TextIndex, int32_t>> after;
    for (int32_t c = 0; c < used; ++c) {
      ASSERT_GE(cells.index(0, c), 0) << "trial " << trial << " cell " << c;
      EXPECT_EQ(data[0][c], cells.index(0, c)) << "the K/V moved with the token";
      after.push_back({cells.index(0, c), cells.pos(0, c)});
    }
    EXPECT_EQ(after, before);  // both in cell order: the order is kept
    for (int32_t c = 0; c < n_cells; ++c)
      EXPECT_EQ(other[c], std::make_pair(cells.index(1, c), cells.pos(1, c)));
  }
}

}  // namespace
}  // namespace rotor
