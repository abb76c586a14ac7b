// tests/sanitizers/sweep.h: every combination outside the sanitizers, one in
// `stride` under them; EveryValueRan() reports a loop value that never ran.
#include "sanitizers/sweep.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rotor::testing {
namespace {

// Runs `sweep` over nested loops of the given sizes: how many combinations ran.
int RunSweep(const std::vector<int>& sizes, Sweep& sweep) {
  int total = 1;
  for (int s : sizes) total *= s;
  int kept = 0;
  for (int i = 0; i < total; ++i) {
    std::vector<int> at(sizes.size());
    for (int d = static_cast<int>(sizes.size()) - 1, rest = i; d >= 0; rest /= sizes[d], --d)
      at[d] = rest % sizes[d];
    bool run = false;
    switch (at.size()) {  // Next() takes the indices as a braced list
      case 2: run = sweep.Next({at[0], at[1]}); break;
      case 3: run = sweep.Next({at[0], at[1], at[2]}); break;
      default: ADD_FAILURE() << "2 or 3 loops";
    }
    kept += run;
  }
  return kept;
}

TEST(Sweep, OneInStrideFromTheOffset) {
  for (int offset = 0; offset < 7; ++offset) {
    Sweep sweep(7, offset);
    // Combination i runs when (offset + i) % 7 == 0: the first is
    // (7 - offset) % 7, then every 7th up to 149.
    const int first = (7 - offset) % 7;
    EXPECT_EQ(RunSweep({3, 5, 10}, sweep), (149 - first) / 7 + 1) << "offset " << offset;
  }
}

TEST(Sweep, AllOutsideTheSanitizersOneInStrideUnderThem) {
  Sweep sweep(7);
  const int kept = RunSweep({3, 5, 10}, sweep);
  if (kSanitized) {
    EXPECT_GE(kept, 150 / 7);
    EXPECT_LE(kept, 150 / 7 + 1);
  } else {
    EXPECT_EQ(kept, 150);
  }
  EXPECT_TRUE(sweep.EveryValueRan());
}

TEST(Sweep, ReportsALoopValueThatNeverRan) {
  // 2 x 3 combinations, stride 3, offset 0: runs (0,0) and (1,0); column 1
  // and 2 of the inner loop never run.
  Sweep missing(3, 0);
  EXPECT_EQ(RunSweep({2, 3}, missing), 2);
  const ::testing::AssertionResult r = missing.EveryValueRan();
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("value 1 of loop 1 never ran"), std::string::npos)
      << r.message();
  // 3 x 5, stride 2: the kept indices step the inner loop through every value.
  for (int offset = 0; offset < 2; ++offset) {
    Sweep covering(2, offset);
    RunSweep({3, 5}, covering);
    EXPECT_TRUE(covering.EveryValueRan()) << "offset " << offset;
  }
}

}  // namespace
}  // namespace rotor::testing
