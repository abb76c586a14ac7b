#include "tensor/dtype.h"
#include "tensor/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace rotor {
namespace {

TEST(DType, GgmlLayouts) {
  EXPECT_EQ(Traits(DType::kQ8_0).type_size, 34);
  EXPECT_EQ(Traits(DType::kQ4_0).type_size, 18);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14);
  EXPECT_FALSE(LookupDType(4).has_value());  // removed Q4_2
  EXPECT_FALSE(LookupDType(999).has_value());
  EXPECT_EQ(ParseDType("Q8_0"), DType::kQ8_0);
  EXPECT_EQ(ParseDType("bf16"), DType::kBF16);
  EXPECT_FALSE(ParseDType("q9").has_value());
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << h;
  }
}

TEST(Fp16, RoundsToNearest) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
  for (int i = 0; i < 100000; ++i) {
    float x = dist(rng) * (i % 3 == 0 ? 1e-6f : 1.f);
    uint16_t h = F32ToF16(x);
    float y = F16ToF32(h);
    if (std::isinf(y)) { ASSERT_GE(std::fabs(x), 65504.f); continue; }
    // No other half is closer.
    float up = F16ToF32(static_cast<uint16_t>(h + 1)), down = F16ToF32(static_cast<uint16_t>(h - 1));
    ASSERT_LE(std::fabs(y - x), std::fabs(up - x) + 1e-30f) << x;
    if ((h & 0x7fff) != 0) {
      ASSERT_LE(std::fabs(y - x), std::fabs(down - x) + 1e-30f) << x;
    }
  }
}

TEST(Bf16, RoundTrip) {
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  EXPECT_EQ(BF16ToF32(F32ToBF16(-2.5f)), -2.5f);
  EXPECT_NEAR(BF16ToF32(F32ToBF16(3.14159f)), 3.14159f, 0.02f);
}

}  // namespace
}  // namespace rotor
