// The probes run and report finite, positive numbers; their values are the
// machine's and are not asserted (the host is shared).
#include "bench_runner/roofline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace rotor::bench {
namespace {

using ::testing::HasSubstr;

TEST(RooflineTest, SmallProbeGivesFinitePositiveCeilings) {
  ThreadPool pool(1);
  Result<Roofline> r = MeasureRoofline(pool, RooflineOptions{.buffer_bytes = 8 << 20, .passes = 2});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->threads, 1);
  for (double v : {r->read_gbps, r->read_best_gbps, r->fma_gflops, r->matmul_gflops}) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_GT(v, 0);
  }
  EXPECT_GE(r->read_best_gbps, r->read_gbps * 0.999);
  EXPECT_GT(r->matmul_m * r->matmul_k * r->matmul_n, 0);
  EXPECT_THAT(RooflineSummary(*r), HasSubstr("GB/s"));
}

TEST(RooflineTest, RoofProbePasses) {
  ThreadPool pool(1);
  Result<double> gbps = MeasureReadBandwidth(pool, 4 << 20, 2);
  ASSERT_TRUE(gbps.ok()) << gbps.message();
  EXPECT_GT(*gbps, 0);
  Result<std::unique_ptr<RoofProbe>> probe = RoofProbe::Create(pool, 4 << 20);
  ASSERT_TRUE(probe.ok()) << probe.message();
  // The int8 passes measure where the full roofline does (AVX2, AVX-512) and
  // give 0 where it gives 0 (the scalar ISA).
  Result<Roofline> full =
      MeasureRoofline(pool, RooflineOptions{.buffer_bytes = 4 << 20, .passes = 1});
  ASSERT_TRUE(full.ok()) << full.message();
  for (int i = 0; i < 2; ++i) {
    const double read = (*probe)->ReadPass(), int8 = (*probe)->Int8Pass();
    EXPECT_TRUE(std::isfinite(read) && std::isfinite(int8));
    EXPECT_GT(read, 0);
    EXPECT_EQ(int8 > 0, full->int8_gops > 0) << int8 << " against " << full->int8_gops;
  }
}

}  // namespace
}  // namespace rotor::bench
