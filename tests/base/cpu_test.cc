#include "base/cpu.h"
#include "base/memory.h"

#include <gtest/gtest.h>

namespace rotor {
namespace {

TEST(Cpu, SetIsaIsClampedToBest) {
  Isa saved = ActiveIsa();
  SetIsa(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  SetIsa(Isa::kAvx512);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(BestIsa()));
  SetIsa(saved);
}

TEST(Memory, RssIsReported) {
  EXPECT_GT(CurrentRssBytes(), 0);
  EXPECT_GE(PeakRssBytes(), CurrentRssBytes());
  AlignedBuffer<float> buf(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % kAlignment, 0u);
  EXPECT_EQ(buf.size(), 1000u);
}

}  // namespace
}  // namespace rotor
