// The weight layout of the 8-token q8_0 kernel: rotor's groups of 32 rows
// (since the fifty-third session) against the groups of 16 it used before
// (BENCHMARKS.md, "Fifty-second session", "Fifty-third session").
// One q8_0 matrix of the 1B FFN shape (k 2048, n 8192), 8 tokens, the
// kernel's own operations per block of 32 values (bias, 8 vpdpbusd per
// token, convert, scale product, FMA), so every layout gives the same bits
// (checked before timing):
//
//   current   rotor's layout before: one stream per group of 16 rows, each
//             activation broadcast from memory into one vpdpbusd (the
//             kernel's form at 8 tokens then).
//   paired    rotor's layout now (ops/kernels.h, PackedRows): the blocks of
//             two groups of 16 interleaved in one stream (line q of the
//             first, then line q of the second), 32 rows per pass and 4
//             tokens at a time: each broadcast, in a register, feeds two
//             vpdpbusd. The form vnni_mix_bench's shared8 row predicts
//             1.08-1.09x for.
//   paired_m  the paired layout with broadcasts from memory again, one per
//             vpdpbusd: which of the two changes any gain comes from.
//   rotor     ops::Matmul itself at m = 8 on its packed copy of a q8_0 matrix
//             of the same shape (other random values; its activations'
//             quantization included): how far the product, with its own
//             thread split, is from the bare `paired` pass.
//
// cold: the weights cycle through copies totalling >= 512 MiB (DRAM, as in
// decode); hot: one copy (L2/L3). The pool's threads split the pairs of
// groups (rotor: its own split).
// AVX-512 VNNI machines only.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "ops/kernels.h"
#include "ops/matmul.h"
#include "ops/quant.h"

#pragma GCC diagnostic ignored "-Wuninitialized"  // as vnni_mix_bench.cc
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace rotor {
namespace {

#define ROTOR_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

constexpr int64_t kK = 2048, kN = 8192, kNb = kK / 32, kGroups = kN / 16;
constexpr int kTok = 8;  // tokens of the activation tile
// The activation tile and the paired layout are rotor's (ops/kernels.h).
constexpr int kActBytes = ops::internal::kPackedActBytes;  // per token and block
constexpr int kScale = ops::internal::kActScale, kBias = ops::internal::kActBiasQ8;
// Bytes of one group's stream prefetched ahead (the 16-row kernel's
// kPackedPrefetch, ops/packed_avx512.h).
constexpr int kAhead = 16 << 10;
// current (this file's alone now): per pair of blocks, 64 bytes of scales
// (16 f16 per block), then each block's 8 lines of [16 rows x 4 bytes].
constexpr int64_t kGroupBytes = kNb / 2 * (64 + 1024);
constexpr int64_t QuantsAt(int64_t j) { return j / 2 * 1088 + 64 + j % 2 * 512; }
constexpr int64_t ScalesAt(int64_t j) { return j / 2 * 1088 + j % 2 * 32; }
// paired: per pair of blocks, 128 bytes of scales (block j: group 0's 16,
// group 1's 16; then block j + 1), then each block's 16 lines, the two
// groups' line q side by side.
constexpr int64_t kPairBytes = ops::internal::PackedGroupBytes(DType::kQ8_0, kK);
constexpr int64_t PairQuantsAt(int64_t j) {
  return ops::internal::PackedQuantsAt(DType::kQ8_0, j);
}
constexpr int64_t PairScalesAt(int64_t j) {
  return ops::internal::PackedScalesAt(DType::kQ8_0, j);
}

inline void Prefetch(const char* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }
ROTOR_VNNI inline void DotMem(__m512i& acc, __m512i w, const int32_t* a) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
}
ROTOR_VNNI inline __m512 Scales(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
inline float ActScale(const int32_t* aj, int t) {
  float s;
  std::memcpy(&s, aj + kScale * kTok + t, 4);
  return s;
}

// Groups [g0, g1) of the current layout; y is [8 tokens, kN].
ROTOR_VNNI void Current(const uint8_t* w, int64_t g0, int64_t g1, const uint8_t* acts, float* y) {
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w + g * kGroupBytes;
    __m512 acc[kTok];  // [token] x 16 rows
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < kNb; ++j) {
      const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kActBytes);
      const uint8_t* wj = group + QuantsAt(j);
      const char* pf = reinterpret_cast<const char*>(wj) + kAhead;
      if (j % 2 == 0) Prefetch(pf - 64);
      const __m512 dw = Scales(group + ScalesAt(j));
      __m512i sum[kTok];
#pragma GCC unroll 8
      for (int t = 0; t < kTok; ++t) sum[t] = _mm512_set1_epi32(aj[kBias * kTok + t]);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        Prefetch(pf + 64 * q);
        const __m512i wq = _mm512_load_si512(wj + 64 * q);
#pragma GCC unroll 8
        for (int t = 0; t < kTok; ++t) DotMem(sum[t], wq, aj + q * kTok + t);
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTok; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(ActScale(aj, t))), acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) _mm512_storeu_ps(y + t * kN + 16 * g, acc[t]);
  }
}

// Pairs [p0, p1) of the paired layout, 4 tokens at a time; kShared: each
// broadcast in a register feeds both groups' vpdpbusd.
template <bool kShared>
ROTOR_VNNI void Paired(const uint8_t* w, int64_t p0, int64_t p1, const uint8_t* acts, float* y) {
  constexpr int kHalf = 4;
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* pair = w + p * kPairBytes;
    __m512 acc0[kTok], acc1[kTok];  // [token] x 16 rows of each group
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < kNb; ++j) {
      const int32_t* aj = reinterpret_cast<const int32_t*>(acts + j * kTok * kActBytes);
      const uint8_t* wj = pair + PairQuantsAt(j);
      const char* pf = reinterpret_cast<const char*>(wj) + 2 * kAhead;
      if (j % 2 == 0) Prefetch(pf - 128), Prefetch(pf - 64);
      const __m512 dw0 = Scales(pair + PairScalesAt(j)), dw1 = Scales(pair + PairScalesAt(j) + 32);
#pragma GCC unroll 2
      for (int h = 0; h < kTok / kHalf; ++h) {
        __m512i s0[kHalf], s1[kHalf];
#pragma GCC unroll 4
        for (int t = 0; t < kHalf; ++t)
          s0[t] = s1[t] = _mm512_set1_epi32(aj[kBias * kTok + h * kHalf + t]);
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
          if (h == 0) Prefetch(pf + 128 * q), Prefetch(pf + 128 * q + 64);
          const __m512i w0 = _mm512_load_si512(wj + 128 * q),
                        w1 = _mm512_load_si512(wj + 128 * q + 64);
#pragma GCC unroll 4
          for (int t = 0; t < kHalf; ++t) {
            const int32_t* a = aj + q * kTok + h * kHalf + t;
            if constexpr (kShared) {
              const __m512i b = _mm512_set1_epi32(*a);
              s0[t] = _mm512_dpbusd_epi32(s0[t], w0, b);
              s1[t] = _mm512_dpbusd_epi32(s1[t], w1, b);
            } else {
              DotMem(s0[t], w0, a);
              DotMem(s1[t], w1, a);
            }
          }
        }
#pragma GCC unroll 4
        for (int t = 0; t < kHalf; ++t) {
          const int u = h * kHalf + t;
          const __m512 as = _mm512_set1_ps(ActScale(aj, u));
          acc0[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[t]), _mm512_mul_ps(dw0, as), acc0[u]);
          acc1[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[t]), _mm512_mul_ps(dw1, as), acc1[u]);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTok; ++t) {
      _mm512_storeu_ps(y + t * kN + 32 * p, acc0[t]);
      _mm512_storeu_ps(y + t * kN + 32 * p + 16, acc1[t]);
    }
  }
}

// Random weights in both layouts (the same values), copies for cold reads,
// and one tile of 8 tokens' activations.
struct Setup {
  std::vector<AlignedBuffer<uint8_t>> current, paired;  // each [kGroups x kGroupBytes]
  AlignedBuffer<uint8_t> acts;                          // [kNb, 8 tokens, 16 fields]
  ROTOR_VNNI explicit Setup(bool cold) {
    std::mt19937 rng(1);
    const size_t bytes = kGroups * kGroupBytes;
    const size_t copies = cold ? (512u << 20) / bytes + 1 : 1;
    current.resize(copies);
    paired.resize(copies);
    for (size_t c = 0; c < copies; ++c) {
      current[c].Resize(bytes), paired[c].Resize(bytes);
      AdviseHugePages(current[c].data(), bytes);  // as the model's packed copy
      AdviseHugePages(paired[c].data(), bytes);
    }
    uint8_t* a = current[0].data();
    for (size_t i = 0; i < bytes; ++i) a[i] = static_cast<uint8_t>(rng());
    for (int64_t g = 0; g < kGroups; ++g)
      for (int64_t j = 0; j < kNb; ++j)
        for (int r = 0; r < 16; ++r) {
          const uint16_t h = _cvtss_sh(1e-3f * static_cast<float>(1 + rng() % 100), 0);
          std::memcpy(a + g * kGroupBytes + ScalesAt(j) + 2 * r, &h, 2);
        }
    for (int64_t p = 0; p < kGroups / 2; ++p)
      for (int64_t j = 0; j < kNb; ++j)
        for (int half = 0; half < 2; ++half) {
          const uint8_t* src = a + (2 * p + half) * kGroupBytes;
          uint8_t* dst = paired[0].data() + p * kPairBytes;
          std::memcpy(dst + PairScalesAt(j) + 32 * half, src + ScalesAt(j), 32);
          for (int q = 0; q < 8; ++q)
            std::memcpy(dst + PairQuantsAt(j) + 128 * q + 64 * half, src + QuantsAt(j) + 64 * q,
                        64);
        }
    for (size_t c = 1; c < copies; ++c) {
      std::memcpy(current[c].data(), current[0].data(), bytes);
      std::memcpy(paired[c].data(), paired[0].data(), bytes);
    }
    acts.Resize(kNb * kTok * kActBytes);
    for (int64_t j = 0; j < kNb; ++j)
      for (int t = 0; t < kTok; ++t) {
        int32_t* f = reinterpret_cast<int32_t*>(acts.data() + j * kTok * kActBytes);
        int sum = 0;
        for (int q = 0; q < 8; ++q) {
          int8_t b[4];
          for (int8_t& v : b) sum += v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
          std::memcpy(&f[q * kTok + t], b, 4);
        }
        const float scale = 1e-2f * static_cast<float>(1 + rng() % 10);
        std::memcpy(&f[kScale * kTok + t], &scale, 4);
        f[kBias * kTok + t] = -128 * sum;
      }
  }
};

// rotor's own product: copies of one q8_0 matrix with their packed copies.
struct Rotor {
  std::vector<AlignedBuffer<uint8_t>> rows, packed;
  std::vector<ops::Weight> views;
  AlignedBuffer<float> x;  // [8 tokens, kK]
  ops::MatmulScratch scratch;
  Rotor(bool cold, int threads) : scratch(kTok, kK, threads) {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t row_bytes = RowBytes(DType::kQ8_0, kK);
    const size_t bytes = static_cast<size_t>(row_bytes * kN);
    const size_t copies = cold ? (512u << 20) / bytes + 1 : 1;
    std::vector<float> row(kK);  // [kK]
    rows.resize(copies), packed.resize(copies);
    for (size_t c = 0; c < copies; ++c) {
      rows[c].Resize(bytes);
      if (c == 0) {
        for (int64_t r = 0; r < kN; ++r) {
          for (float& v : row) v = u(rng);
          ops::QuantizeRow(DType::kQ8_0, row.data(), rows[0].data() + r * row_bytes, kK);
        }
      } else {
        std::memcpy(rows[c].data(), rows[0].data(), bytes);
      }
      views.push_back(ops::MakeWeight(DType::kQ8_0, kK, kN, rows[c].data()));
      const size_t pb = static_cast<size_t>(ops::PackedWeightBytes(views[c]));
      packed[c].Resize(pb);
      AdviseHugePages(packed[c].data(), pb);  // as the model's packed copy
      ops::PackWeight(views[c], packed[c].data(), 0, kN);
      views[c].packed = packed[c].data();
    }
    x.Resize(kTok * kK);
    for (size_t i = 0; i < x.size(); ++i) x[i] = u(rng);
  }
};

// 0 current, 1 paired, 2 paired_m over copy c, the pairs of groups split
// among the pool's threads.
ROTOR_VNNI void Run(ThreadPool& pool, const Setup& s, int layout, size_t c, float* y) {
  pool.ParallelFor(kGroups / 2, 1, [&](int64_t p0, int64_t p1, int) {
    if (layout == 0) Current(s.current[c].data(), 2 * p0, 2 * p1, s.acts.data(), y);
    if (layout == 1) Paired<true>(s.paired[c].data(), p0, p1, s.acts.data(), y);
    if (layout == 2) Paired<false>(s.paired[c].data(), p0, p1, s.acts.data(), y);
  });
}

void BM_Layout(benchmark::State& state) {
  if (!GetCpuFeatures().avx512vnni) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  const int layout = static_cast<int>(state.range(0));
  const bool cold = state.range(1) != 0;
  ThreadPool pool(static_cast<int>(state.range(2)));
  std::vector<float> y(kTok * kN), ref(kTok * kN);  // [8 tokens, kN]
  if (layout == 3) {
    Rotor r(cold, static_cast<int>(state.range(2)));
    size_t c = 0;
    for (auto _ : state) {
      ops::Matmul(pool, r.views[c], r.x.data(), kTok, y.data(), kN, r.scratch);
      c = c + 1 == r.views.size() ? 0 : c + 1;
      benchmark::DoNotOptimize(y.data());
    }
    state.SetLabel(cold ? "rotor cold" : "rotor hot");
    state.counters["GOP/s"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * kTok * kN * kK * 1e-9,
                           benchmark::Counter::kIsRate);
    return;
  }
  const Setup s(cold);
  Run(pool, s, 0, 0, ref.data());
  Run(pool, s, layout, 0, y.data());
  if (std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) != 0) {
    state.SkipWithError("the layouts' outputs differ");
    return;
  }
  size_t c = 0;
  for (auto _ : state) {
    Run(pool, s, layout, c, y.data());
    c = c + 1 == s.current.size() ? 0 : c + 1;
    benchmark::DoNotOptimize(y.data());
  }
  static const char* const kNames[] = {"current", "paired", "paired_m"};
  state.SetLabel(std::string(kNames[layout]) + (cold ? " cold" : " hot"));
  state.counters["GOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * kTok * kN * kK * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Layout)
    ->ArgNames({"layout", "cold", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 0}, {2, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rotor

BENCHMARK_MAIN();
