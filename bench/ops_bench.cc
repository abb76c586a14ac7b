// Kernel micro-benchmarks. Matmul on the stories110M (k=768, n=2048) and
// Llama-3.2-1B (k=2048, n=8192) FFN shapes, per weight type, 1 and 2 threads:
// m = 1 reports GB/s of weight bytes (decode is memory-bound; the benchmark
// cycles through copies of the matrix totalling >= 256 MiB so each call reads
// from DRAM, as in a real forward pass), m = 8, 16, 512 report GFLOP/s (2 m n k).
// ROTOR_ISA=avx2|scalar lowers the kernel path. ROTOR_BENCH_HOT=1 keeps one
// copy for m = 1 too: the matrix stays in L2/L3, so GB/s is the kernel's
// compute ceiling instead of DRAM's. Types (the `type` argument):
// 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q4_1, 6 q5_0, 7 q5_1, 8 iq4_nl,
// 9 q2_K, 10 q3_K, 11 q4_K, 12 q5_K, 13 q6_K. BM_MatmulPacked: q8_0, q4_0,
// q2_K .. q6_K with the row-interleaved copy a model gets on
// AVX-512 and AVX2.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "ops/elementwise.h"
#include "ops/kernels.h"
#include "ops/matmul.h"
#include "ops/quant.h"

namespace rotor::ops {
namespace {

constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,   DType::kQ4_0,
                            DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                            DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
constexpr int64_t kShapes[][2] = {{768, 2048}, {2048, 8192}};  // {k, n}

struct Matrices {
  std::vector<AlignedBuffer<uint8_t>> copies;  // each [n, RowBytes(type, k)]
  size_t bytes = 0;
};

// Quantizes one random matrix and replicates it (m == 1 wants DRAM traffic).
Matrices MakeMatrices(DType t, int64_t k, int64_t n, bool many) {
  Matrices out;
  out.bytes = static_cast<size_t>(RowBytes(t, k) * n);
  const size_t n_copies = many ? std::max<size_t>(1, (256u << 20) / out.bytes + 1) : 1;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> row(k);  // [k]
  out.copies.resize(n_copies);
  out.copies[0].Resize(out.bytes);
  for (int64_t r = 0; r < n; ++r) {
    for (auto& v : row) v = u(rng);
    QuantizeRow(t, row.data(), out.copies[0].data() + r * RowBytes(t, k), k);
  }
  for (size_t c = 1; c < n_copies; ++c) {
    out.copies[c].Resize(out.bytes);
    std::memcpy(out.copies[c].data(), out.copies[0].data(), out.bytes);
  }
  return out;
}

// packed: every copy also carries its row-interleaved copy (PackWeight), as
// a model loaded on AVX-512 or AVX2 does for q8_0, q4_0, q4_K, q5_K and q6_K.
void RunMatmul(benchmark::State& state, bool packed) {
  const DType t = kTypes[state.range(0)];
  const int64_t k = kShapes[state.range(1)][0], n = kShapes[state.range(1)][1];
  const int64_t m = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  ThreadPool pool(threads);
  // m == 1 reads the weights from DRAM (copies over 256 MiB), m > 1 from
  // cache; ROTOR_BENCH_HOT=1 / ROTOR_BENCH_COLD=1 choose either for every m.
  const bool cold = !std::getenv("ROTOR_BENCH_HOT") && (m == 1 || std::getenv("ROTOR_BENCH_COLD"));
  Matrices w = MakeMatrices(t, k, n, cold);
  std::vector<float> x(m * k), y(m * n);  // [m, k], [m, n]
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : x) v = u(rng);
  MatmulScratch scratch(m, k, threads);
  std::vector<Weight> views;
  std::vector<AlignedBuffer<uint8_t>> packs(packed ? w.copies.size() : 0);
  for (size_t i = 0; i < w.copies.size(); ++i) {
    views.push_back(MakeWeight(t, k, n, w.copies[i].data()));
    if (!packed) continue;
    packs[i].Resize(static_cast<size_t>(PackedWeightBytes(views[i])));
    PackWeight(views[i], packs[i].data(), 0, n);
    views[i].packed = packs[i].data();
  }
  size_t c = 0;
  for (auto _ : state) {
    Matmul(pool, views[c], x.data(), m, y.data(), n, scratch);
    c = c + 1 == w.copies.size() ? 0 : c + 1;
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(DTypeName(t)) + " " + std::string(IsaName(ActiveIsa())) +
                 (packed ? " packed" : ""));
  const double iters = static_cast<double>(state.iterations());
  if (cold)
    state.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(w.bytes) * 1e-9,
                                                benchmark::Counter::kIsRate);
  if (m > 1) {
    state.counters["GFLOP/s"] =
        benchmark::Counter(iters * 2.0 * m * n * k * 1e-9, benchmark::Counter::kIsRate);
  }
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "shape", "m", "threads"});
  for (int64_t shape = 0; shape < 2; ++shape)
    for (int64_t m : {1, 8, 16, 512})
      for (int64_t type = 0; type < kNumTypes; ++type)
        for (int64_t threads : {1, 2}) b->Args({type, shape, m, threads});
}
void BM_Matmul(benchmark::State& state) { RunMatmul(state, false); }
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);

// q8_0 / q4_0 / q2_K .. q6_K with their row-interleaved copies (the
// AVX-512 and AVX2 path): compare with BM_Matmul of the same type, shape, m
// and threads in the same run.
void BM_MatmulPacked(benchmark::State& state) {
  if (ActiveIsa() == Isa::kScalar) {
    state.SkipWithError("packed kernels: AVX-512 and AVX2");
    return;
  }
  RunMatmul(state, true);
}
void MatmulPackedArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "shape", "m", "threads"});
  for (int64_t shape = 0; shape < 2; ++shape)
    for (int64_t m : {1, 3, 5, 8, 12, 16, 512})  // 3, 5, 12: tiles of fewer than 8 tokens
      for (int64_t type : {3, 4, 9, 10, 11, 12, 13})
        for (int64_t threads : {1, 2}) b->Args({type, shape, m, threads});
}
BENCHMARK(BM_MatmulPacked)->Apply(MatmulPackedArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n, 0.5f), w(n, 1.f), out(n);  // [n]
  for (auto _ : state) {
    RmsNorm(x.data(), w.data(), out.data(), n, 1e-5f);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_RmsNorm)->Arg(2048);

void BM_SwiGlu(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g(n, 0.5f), u(n, 1.f), out(n);  // [n]
  for (auto _ : state) {
    SwiGlu(g.data(), u.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SwiGlu)->Arg(8192);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n);  // [n]
  for (auto _ : state) {
    std::fill(x.begin(), x.end(), 0.25f);
    Softmax(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Softmax)->Arg(32000);

// The AVX-512 activation tiles the packed products read (quantize to q8_0
// and lay out, internal::avx512::PackActivationTiles): m tokens of k = 2048,
// one thread, in L1/L2. Items: blocks of 32 values.
void BM_PackActivationTiles(benchmark::State& state) {
  if (ActiveIsa() != Isa::kAvx512) {
    state.SkipWithError("AVX-512 only");
    return;
  }
  const int64_t m = state.range(0), k = 2048, nb = k / 32;
  std::vector<float> x(m * k);  // [m, k]
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (auto& v : x) v = u(rng);
  AlignedBuffer<uint8_t> acts(static_cast<size_t>(m * nb * internal::kPackedActBytes));
  for (auto _ : state) {
    internal::avx512::PackActivationTiles(x.data(), m, k, 0, nb, acts.data());
    benchmark::DoNotOptimize(acts.data());
  }
  state.SetItemsProcessed(state.iterations() * m * nb);
}
BENCHMARK(BM_PackActivationTiles)->ArgName("m")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(64);

}  // namespace
}  // namespace rotor::ops

BENCHMARK_MAIN();
