// Run-time CPU feature detection and the ISA the kernels dispatch to.
#pragma once

#include <string_view>

namespace rotor {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false;
  bool intel = false;  // the vendor: GenuineIntel (prefetch distances differ from AMD's)
};

const CpuFeatures& GetCpuFeatures();
// The best ISA a CPU with features f runs: avx512 needs F/BW/VL/DQ/VNNI (what
// the avx512 kernels are compiled for: Cascade Lake, Ice Lake, Sapphire
// Rapids, Zen 4 and later), avx2 needs AVX2/FMA/F16C.
Isa IsaFor(const CpuFeatures& f);
// IsaFor(GetCpuFeatures()).
Isa BestIsa();
// The ISA in force: BestIsa() unless lowered by SetIsa() or the environment
// variable ROTOR_ISA=scalar|avx2|avx512 (never raised above what the CPU runs).
Isa ActiveIsa();
// Forces a path (tests run every path the machine can run). Clamped to BestIsa().
void SetIsa(Isa isa);
std::string_view IsaName(Isa isa);

}  // namespace rotor
