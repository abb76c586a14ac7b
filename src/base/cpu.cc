#include "base/cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace rotor {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = true;  // every AVX2 CPU has F16C; checked together with avx2 below
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.intel = __builtin_cpu_is("intel");
#endif
  return f;
}

Isa FromEnv(Isa best) {
  const char* env = std::getenv("ROTOR_ISA");
  if (env == nullptr) return best;
  Isa want = best;
  if (std::strcmp(env, "scalar") == 0) want = Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
  return std::min(want, best);
}

std::atomic<int>& ActiveSlot() {
  static std::atomic<int> slot{static_cast<int>(FromEnv(BestIsa()))};
  return slot;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures f = Detect();
  return f;
}

Isa IsaFor(const CpuFeatures& f) {
  if (f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
      f.avx512vnni)
    return Isa::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa BestIsa() {
  static const Isa best = IsaFor(GetCpuFeatures());
  return best;
}

Isa ActiveIsa() { return static_cast<Isa>(ActiveSlot().load(std::memory_order_relaxed)); }

void SetIsa(Isa isa) { ActiveSlot().store(static_cast<int>(std::min(isa, BestIsa()))); }

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace rotor
