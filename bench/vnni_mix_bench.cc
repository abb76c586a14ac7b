// The ceiling of the packed q8_0 kernel's instruction mix at 8 tokens
// (ops/gemv_packed_avx512.cc), measured instead of estimated: one thread,
// every operand in L1, the same instructions per block of 32 values and 16
// rows as the kernel, with parts taken away. Each row reports GOP/s of the
// vpdpbusd it runs (64 multiplies and 64 adds each); compare the rows of
// one run with each other (BENCHMARKS.md, "The q8_0 block's instruction
// mix"). AVX-512 VNNI machines only.
//
//   peak12      12 independent vpdpbusd chains, registers only (rotor bench
//               --roofline's int8 loop)
//   dots8       8 chains, one per token, registers only
//   scaled8     + per block and token: the bias, vcvtdq2ps, the scale product
//               and the FMA into f32 (activations still in registers)
//   kernel8     + each token's 4 activation bytes broadcast from memory into
//               every vpdpbusd: the kernel's form
//   shared8     as kernel8 with 32 rows (two groups) per pass and 4 tokens,
//               two passes: each broadcast feeds two vpdpbusd. Its 16 f32
//               accumulators and 8 sums do not all fit the 32 registers:
//               GCC 12 keeps 11 accumulators on the stack (an FMA from
//               memory and a store per block each), as a kernel of this
//               form would, so the figure includes that cost.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "base/cpu.h"

// GCC 12 warns that _mm512_cvtph_ps and _mm512_cvtepi32_ps read an
// uninitialized vector (their _mm512_undefined_ps) when inlined into a
// function with a target attribute; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace rotor {
namespace {

#define ROTOR_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

constexpr int kBlocks = 32;           // blocks in the L1-resident working set
constexpr int kGroupBytes = 512;      // [8 quads] x 16 rows x 4 bytes
constexpr int kActInts = 8 * 8 + 16;  // [8 quads x 8 tokens], 8 biases, 8 scales

struct Data {
  alignas(64) uint8_t w[kBlocks][2][kGroupBytes];  // [block][group][quad x row x byte]
  alignas(64) uint16_t dw[kBlocks][2][16];         // f16 scales of each group's rows
  alignas(64) int32_t a[kBlocks][kActInts];        // activations as the kernel's tile
  Data() {
    std::mt19937 rng(1);
    for (auto& b : w)
      for (auto& g : b)
        for (auto& v : g) v = static_cast<uint8_t>(rng());
    for (auto& b : dw)
      for (auto& g : b)
        for (auto& v : g) v = 0x3c00;  // 1.0
    for (auto& b : a)
      for (auto& v : b) v = static_cast<int32_t>(rng() & 0x3f3f3f3f);
    for (auto& b : a) {
      const float scale = 1e-6f;  // the activations' block scales: small sums stay finite
      for (int t = 0; t < 8; ++t) std::memcpy(&b[72 + t], &scale, 4);
    }
  }
};

// The 16 lanes of a vector read as floats and added: keeps a result alive (the
// reduce intrinsics warn under a target attribute).
template <class V>
ROTOR_VNNI float Lanes(V v) {
  alignas(64) float f[16];
  std::memcpy(f, &v, 64);
  float s = 0;
  for (float x : f) s += x;
  return s;
}

// vpdpbusd in place (the intrinsic let GCC add a register copy to each).
ROTOR_VNNI inline void Dot(__m512i& acc, __m512i w, __m512i a) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
}
ROTOR_VNNI inline void DotMem(__m512i& acc, __m512i w, const int32_t* a) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
}

[[gnu::noinline]] ROTOR_VNNI int64_t Peak12(const Data& d, int64_t reps) {
  __m512i acc[12];
  const __m512i a = _mm512_set1_epi8(3), w = _mm512_load_si512(d.w[0][0]);
#pragma GCC unroll 12
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
  for (int64_t r = 0; r < reps * kBlocks * 64 / 12; ++r) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) Dot(acc[j], w, a);
  }
#pragma GCC unroll 12
  for (int j = 1; j < 12; ++j) acc[0] = _mm512_add_epi32(acc[0], acc[j]);
  return static_cast<int64_t>(Lanes(acc[0]));
}

// kMode 0: dots8, 1: scaled8, 2: kernel8.
template <int kMode>
[[gnu::noinline]] ROTOR_VNNI float OneGroup(const Data& d, int64_t reps) {
  __m512 acc[8];    // [token] x 16 rows
  __m512i act[8];   // [token]: registers standing in for the broadcasts
  __m512i keep[8];  // dots8: the chains across blocks
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    acc[t] = _mm512_setzero_ps();
    act[t] = _mm512_set1_epi32(d.a[0][t]);
    keep[t] = _mm512_set1_epi32(t);
  }
  for (int64_t r = 0; r < reps; ++r) {
    for (int j = 0; j < kBlocks; ++j) {
      const int32_t* aj = d.a[j];
      __m512i sum[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) sum[t] = kMode == 0 ? keep[t] : _mm512_set1_epi32(aj[64 + t]);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m512i w = _mm512_load_si512(d.w[j][0] + 64 * q);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          if constexpr (kMode == 2) {
            DotMem(sum[t], w, aj + 8 * q + t);
          } else {
            Dot(sum[t], w, act[t]);
          }
        }
      }
      if constexpr (kMode == 0) {
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) keep[t] = sum[t];
        continue;
      }
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d.dw[j][0])));
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        float s;
        std::memcpy(&s, aj + 72 + t, 4);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dw, _mm512_set1_ps(s)),
                                 acc[t]);
      }
    }
  }
  float out = 0;
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) out += Lanes(acc[t]) + Lanes(keep[t]);
  return out;
}

// Tokens [t0, t0 + 4) of block j against both groups: each broadcast from
// memory feeds two vpdpbusd.
[[gnu::always_inline]] ROTOR_VNNI inline void SharedPass(const Data& d, int j, int t0,
                                                         __m512* acc) {
  const int32_t* aj = d.a[j];
  __m512i sum[2][4];
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g)
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) sum[g][t] = _mm512_set1_epi32(aj[64 + t0 + t]);
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    const __m512i w0 = _mm512_load_si512(d.w[j][0] + 64 * q);
    const __m512i w1 = _mm512_load_si512(d.w[j][1] + 64 * q);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i a = _mm512_set1_epi32(aj[8 * q + t0 + t]);
      Dot(sum[0][t], w0, a);
      Dot(sum[1][t], w1, a);
    }
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d.dw[j][g])));
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      float s;
      std::memcpy(&s, aj + 72 + t0 + t, 4);
      acc[8 * g + t0 + t] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(sum[g][t]), _mm512_mul_ps(dw, _mm512_set1_ps(s)), acc[8 * g + t0 + t]);
    }
  }
}

[[gnu::noinline]] ROTOR_VNNI float Shared8(const Data& d, int64_t reps) {
  __m512 acc[16];  // [group x token] x 16 rows
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t r = 0; r < reps / 2; ++r) {
    for (int j = 0; j < kBlocks; ++j) {
      SharedPass(d, j, 0, acc);
      SharedPass(d, j, 4, acc);
    }
  }
  float out = 0;
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) out += Lanes(acc[i]);
  return out;
}

// Every mode runs reps x kBlocks x 64 vpdpbusd.
void BM_VnniMix(benchmark::State& state) {
  if (!GetCpuFeatures().avx512vnni) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  static const Data data;
  const int64_t reps = 2000;
  const int mode = static_cast<int>(state.range(0));
  for (auto _ : state) {
    switch (mode) {
      case 0:
        benchmark::DoNotOptimize(Peak12(data, reps));
        break;
      case 1:
        benchmark::DoNotOptimize(OneGroup<0>(data, reps));
        break;
      case 2:
        benchmark::DoNotOptimize(OneGroup<1>(data, reps));
        break;
      case 3:
        benchmark::DoNotOptimize(OneGroup<2>(data, reps));
        break;
      default:
        benchmark::DoNotOptimize(Shared8(data, reps));
    }
  }
  static const char* kNames[] = {"peak12", "dots8", "scaled8", "kernel8", "shared8"};
  state.SetLabel(kNames[mode]);
  state.counters["GOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * reps * kBlocks * 64 * 128 * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VnniMix)->ArgName("mode")->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rotor

BENCHMARK_MAIN();
