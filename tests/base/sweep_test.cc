// tests/sanitizers/sweep.h: every combination outside the sanitizers, one in
// `stride` under them; and for the loop sizes and strides of the numeric
// sweeps, every value of every loop runs whatever the offset (the running
// test's name) is.
#include "sanitizers/sweep.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace rotor::testing {
namespace {

struct Shape {
  std::vector<int> sizes;  // of the nested loops, outermost first
  int stride;
  const char* where;
};

// The sweeps of the suite (keep in step with their strides).
const Shape kShapes[] = {
    {{3, 5, 10, 2}, 7, "AttentionF16: ISA x shape x policy x threads"},
    {{3, 6, 4, 6, 1}, 7, "AttentionQuant: ISA x shape x policy x type x threads"},
    {{16, 6, 6}, 5, "KvQuantFold Avx2: case x K type x V type"},
    {{6, 2, 2, 7, 2}, 5, "QuantModels: policy x RoPE x positions x type x ISA"},
    {{3, 5, 2, 3}, 7, "ArchModes: ISA x case x RoPE x step"},
    {{3, 5, 3}, 4, "F16Models: ISA x case x step"},
    {{3, 46, 6}, 5, "MatmulTest: ISA x case x m"},
    {{3, 18, 8}, 5, "MatmulTest packed: ISA x case x m"},
    {{3, 45, 5}, 7, "MatmulBlockTypesTest: ISA x case x m"},
    {{3, 3, 21, 8}, 7, "MatmulBlockTypesTest packed: threads x ISA x case x m"},
};

int Combinations(const Shape& s) {
  int n = 1;
  for (int size : s.sizes) n *= size;
  return n;
}

// Runs `sweep` over the shape's loops: how many combinations ran, and the
// values of each loop that did.
int RunSweep(const Shape& s, Sweep sweep, std::vector<std::set<int>>* seen) {
  seen->assign(s.sizes.size(), {});
  int kept = 0;
  for (int i = 0; i < Combinations(s); ++i) {
    if (!sweep.Next()) continue;
    ++kept;
    for (int d = static_cast<int>(s.sizes.size()) - 1, rest = i; d >= 0; rest /= s.sizes[d], --d)
      (*seen)[d].insert(rest % s.sizes[d]);
  }
  return kept;
}

TEST(Sweep, EveryValueOfEveryLoopRunsWithEveryOffset) {
  std::vector<std::set<int>> seen;
  for (const Shape& s : kShapes)
    for (int offset = 0; offset < s.stride; ++offset) {
      const int kept = RunSweep(s, Sweep(s.stride, offset), &seen);
      EXPECT_GE(kept, Combinations(s) / s.stride) << s.where;
      EXPECT_LE(kept, Combinations(s) / s.stride + 1) << s.where;
      for (size_t d = 0; d < s.sizes.size(); ++d)
        EXPECT_EQ(seen[d].size(), static_cast<size_t>(s.sizes[d]))
            << s.where << ": loop " << d << " offset " << offset;
    }
}

TEST(Sweep, AllOutsideTheSanitizersOneInStrideUnderThem) {
  std::vector<std::set<int>> seen;
  for (const Shape& s : kShapes) {
    const int kept = RunSweep(s, Sweep(s.stride), &seen);
    if (kSanitized) {
      EXPECT_GE(kept, Combinations(s) / s.stride) << s.where;
      EXPECT_LE(kept, Combinations(s) / s.stride + 1) << s.where;
    } else {
      EXPECT_EQ(kept, Combinations(s)) << s.where;
    }
  }
}

}  // namespace
}  // namespace rotor::testing
