#include "base/cpu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/memory.h"

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

// The avx512 kernels need F/BW/VL/DQ and VNNI, nothing more: a CPU without
// BF16 (Cascade Lake, Ice Lake, a VM that hides it) runs them.
TEST(Cpu, IsaForNeedsExactlyWhatTheKernelsUse) {
  CpuFeatures f;
  EXPECT_EQ(IsaFor(f), Isa::kScalar);
  f.avx2 = f.fma = true;
  EXPECT_EQ(IsaFor(f), Isa::kScalar);  // no F16C
  f.f16c = true;
  EXPECT_EQ(IsaFor(f), Isa::kAvx2);
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  EXPECT_EQ(IsaFor(f), Isa::kAvx2);  // Skylake-X: no VNNI
  f.avx512vnni = true;
  EXPECT_EQ(IsaFor(f), Isa::kAvx512);
  f.avx512dq = false;
  EXPECT_EQ(IsaFor(f), Isa::kAvx2);
  f.avx512dq = true;
  f.fma = false;
  EXPECT_EQ(IsaFor(f), Isa::kScalar);
}

// CMake reads /proc/cpuinfo to tell whether this CPU runs the AVX-512
// kernels; a sanitizer tree compiles them at -O0 when it does not
// (CMakeLists.txt). Its list of flags must be IsaFor()'s: the BF16 that
// IsaFor() stopped needing stayed in it for a day, and the sanitizer suites
// ran every model through -O0 kernels (the ASan suite 1.6x slower).
TEST(Cpu, BuildSawTheIsaThisCpuRuns) {
#ifndef ROTOR_CPU_RUNS_AVX512
  GTEST_SKIP() << "no /proc/cpuinfo when this tree was configured";
#else
  EXPECT_EQ(BestIsa() == Isa::kAvx512, ROTOR_CPU_RUNS_AVX512 == 1)
      << "CMakeLists.txt's reading of the CPU flags differs from IsaFor()'s";
#endif
}

// The vendor (the packed kernels' prefetch choice, ops/packed_avx512.h)
// as /proc/cpuinfo names it.
TEST(Cpu, IntelIsTheVendorCpuinfoNames) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && line.rfind("vendor_id", 0) != 0) {
  }
  if (line.empty()) GTEST_SKIP() << "no vendor_id in /proc/cpuinfo";
  EXPECT_EQ(GetCpuFeatures().intel, line.find("GenuineIntel") != std::string::npos) << line;
}

TEST(Memory, RssIsReported) {
  // The current reading first: the peak is a high-water mark, so it is at
  // least any earlier reading (the other order fails when RSS grows between).
  const int64_t current = CurrentRssBytes();
  EXPECT_GT(current, 0);
  EXPECT_GE(PeakRssBytes(), current);
  AlignedBuffer<float> buf(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % kAlignment, 0u);
  EXPECT_EQ(buf.size(), 1000u);
}

// The machine's memory (rotor bench --list-devices): some of it available,
// never more than there is.
TEST(Memory, PhysicalAndAvailableMemory) {
  const int64_t total = PhysicalMemoryBytes(), available = AvailableMemoryBytes();
  EXPECT_GT(total, 0);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, total);
}

// Advisory only: any range (unaligned, shorter than a page, empty) is
// accepted, and the memory reads back what was written after the advice.
TEST(Memory, AdviseHugePagesKeepsTheBuffer) {
  AlignedBuffer<uint8_t> buf(size_t{5} << 20);  // [5 MiB]: holds a whole 2 MiB extent
  AdviseHugePages(buf.data() + 3, buf.bytes() - 3);
  AdviseHugePages(buf.data() + 100, 10);
  AdviseHugePages(buf.data(), 0);
  for (size_t i = 0; i < buf.bytes(); ++i) buf[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < buf.bytes(); i += 4093) ASSERT_EQ(buf[i], static_cast<uint8_t>(i * 7));
}

}  // namespace
}  // namespace rotor
