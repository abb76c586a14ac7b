#include "bench_runner/roofline.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/memory.h"
#include "base/timer.h"
#include "ops/matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rotor::bench {
// Named, not anonymous: RoofProbe::Buffer (external linkage) holds one.
namespace roofline_internal {

// A private anonymous mapping (huge pages where the kernel grants them, so the
// read test measures DRAM, not TLB misses). Unmapped on destruction.
class MappedBuffer {
 public:
  ~MappedBuffer() {
    if (p_ != nullptr) munmap(p_, n_);
  }
  Status Map(size_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return Errorf("roofline: cannot map a {} MiB buffer: {}", n >> 20, std::strerror(errno));
    madvise(p, n, MADV_HUGEPAGE);  // advisory: failure only costs TLB misses
    p_ = static_cast<uint8_t*>(p);
    n_ = n;
    return Status::Ok();
  }
  uint8_t* data() { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace roofline_internal

namespace {

using roofline_internal::MappedBuffer;

// Folds every byte of [p, p + n) into a value the compiler cannot drop; n is a
// multiple of 256 and p 64-byte aligned.
uint64_t ReadScalar(const uint8_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i < n / 8; i += 4) {
    a0 ^= q[i];
    a1 ^= q[i + 1];
    a2 ^= q[i + 2];
    a3 ^= q[i + 3];
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

#if defined(__x86_64__)
// The software prefetch of rotor's packed weight kernels (ops/packed_avx512.h:
// each line 16 KiB ahead into L1 and 32 KiB ahead into L2). On some x86 cores
// (an Intel Xeon, family 6 model 207) a stream read this way runs about a
// fifth faster than with the hardware prefetchers alone (BENCHMARKS.md,
// "Weights fetched into L2 ahead of L1"), so the probe reads both
// ways (ReadPass) and the ceiling is the faster: what the machine delivers
// to a reader that asks for it. Prefetches past the buffer do not fault.
constexpr size_t kReadPrefetchL1 = 16 << 10, kReadPrefetchL2 = 32 << 10;

template <bool kPrefetch>
__attribute__((target("avx2"))) uint64_t ReadAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    const __m256i* q = reinterpret_cast<const __m256i*>(p + i);
    if constexpr (kPrefetch) {
      for (size_t o = 0; o < 256; o += 64) {
        asm volatile("prefetcht0 %0" : : "m"(p[i + o + kReadPrefetchL1]));
        asm volatile("prefetcht1 %0" : : "m"(p[i + o + kReadPrefetchL2]));
      }
    }
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(q + 0));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(q + 1));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(q + 2));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(q + 3));
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(q + 4));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(q + 5));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(q + 6));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(q + 7));
  }
  __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}
#endif

// Multiply-add chains x = x * b + c: kChains independent accumulators hide the
// FMA latency (4 cycles, 2 pipes on current x86 cores need at least 8).
constexpr int kChains = 12;

float FmaScalar(int64_t iters) {
  float acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = 0.5f + j * 0.01f;
  const float b = 0.999999f, c = 1e-7f;
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * b + c;
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float FmaAvx2(int64_t iters) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(0.5f + j * 0.01f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], b, c);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}

__attribute__((target("avx512f"))) float FmaAvx512(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.5f + j * 0.01f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], b, c);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

// Integer dot products as the quantized matmuls do them (u8 x s8 -> s32, 4 per
// lane): 64 multiplies and 64 adds per instruction.
__attribute__((target("avx512f,avx512vnni"))) uint32_t DotAvx512Vnni(int64_t iters) {
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  __m512i s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_epi32(s, acc[j]);
  alignas(64) uint32_t lanes[16];  // the sums wrap around: unsigned
  _mm512_store_si512(lanes, s);
  return lanes[0] + lanes[15];
}

// AVX2 has no u8 x s8 -> s32 instruction: rotor's AVX2 q8_0 kernels take
// vpmaddubsw (32 u8 x s8 products summed in pairs to int16), then vpmaddwd
// with ones (to int32) and an int32 add: counted as 64 ops (32 multiplies
// and 32 adds), as one 256-bit vpdpbusd would be.
__attribute__((target("avx2"))) uint32_t DotAvx2(int64_t iters) {
  __m256i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_epi32(j);
  const __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j)
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(acc[j], b), ones));
  }
  __m256i s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_epi32(s, acc[j]);
  alignas(32) uint32_t lanes[8];  // the sums wrap around: unsigned
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[7];
}
#endif

// Keeps results alive so the measured loops are not optimised away.
std::atomic<uint64_t> g_sink{0};

// First touch by the threads that read, with non-zero bytes (no shared zero page).
void Touch(ThreadPool& pool, MappedBuffer& buf) {
  const int n_tasks = pool.size() * 16;
  const size_t chunk = buf.size() / n_tasks / 256 * 256;
  pool.Run(n_tasks, [&](int task, int) { std::memset(buf.data() + task * chunk, 1, chunk); });
}

// One pass over the buffer on every thread of the pool with `read`: GB/s.
double ReadPassWith(ThreadPool& pool, MappedBuffer& buf, uint64_t (*read)(const uint8_t*, size_t)) {
  const int n_tasks = pool.size() * 16;
  const size_t chunk = buf.size() / n_tasks / 256 * 256;
  std::vector<uint64_t> out(n_tasks);
  Timer timer;
  pool.Run(n_tasks, [&](int task, int) { out[task] = read(buf.data() + task * chunk, chunk); });
  const double s = timer.ElapsedSeconds();
  for (uint64_t v : out) g_sink.fetch_xor(v, std::memory_order_relaxed);
  return static_cast<double>(chunk) * n_tasks / s / 1e9;
}

// One pass over the buffer on every thread of the pool: GB/s. With AVX2, one
// pass without software prefetch and one with it (kReadPrefetchL1), the faster.
double ReadPass(ThreadPool& pool, MappedBuffer& buf) {
#if defined(__x86_64__)
  if (ActiveIsa() >= Isa::kAvx2)
    return std::max(ReadPassWith(pool, buf, ReadAvx2<false>),
                    ReadPassWith(pool, buf, ReadAvx2<true>));
#endif
  return ReadPassWith(pool, buf, ReadScalar);
}

double MeasureRead(ThreadPool& pool, MappedBuffer& buf, int passes) {
  Touch(pool, buf);
  double best = 0;
  for (int p = 0; p < passes; ++p) best = std::max(best, ReadPass(pool, buf));
  return best;
}

double MeasureFma(ThreadPool& pool, int passes, std::string* isa) {
  int lanes = 1;
  float (*fn)(int64_t) = FmaScalar;
  *isa = "scalar";
#if defined(__x86_64__)
  if (ActiveIsa() == Isa::kAvx512) {
    fn = FmaAvx512, lanes = 16, *isa = "avx512";
  } else if (ActiveIsa() >= Isa::kAvx2) {
    fn = FmaAvx2, lanes = 8, *isa = "avx2";
  }
#endif
  // About 0.1 s per pass at 100 GFLOP/s per thread for the vector paths.
  const int64_t iters = lanes >= 8 ? 20'000'000 / (lanes / 8) : 20'000'000;
  const double flops_per_thread = 2.0 * kChains * lanes * static_cast<double>(iters);
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    std::vector<float> out(pool.size());
    Timer timer;
    pool.Run(pool.size(), [&](int task, int) { out[task] = fn(iters); });
    const double s = timer.ElapsedSeconds();
    for (float v : out) g_sink.fetch_add(std::bit_cast<uint32_t>(v), std::memory_order_relaxed);
    best = std::max(best, flops_per_thread * pool.size() / s / 1e9);
  }
  return best;
}

// One pass of the int8 dot products of rotor's quantized kernels on every
// thread of the pool, the active ISA's: 512-bit VNNI on AVX-512, vpmaddubsw +
// vpmaddwd on AVX2 (`isa`, when not null, says which); GOP/s, 0 on the scalar
// ISA. `scale` divides the loop's length: 1 takes about 0.1 s on either.
double Int8Pass(ThreadPool& pool, int64_t scale, std::string* isa) {
#if defined(__x86_64__)
  const bool avx512 = ActiveIsa() == Isa::kAvx512;
  if (!avx512 && ActiveIsa() < Isa::kAvx2) return 0;
  if (isa != nullptr) *isa = avx512 ? "avx512 vnni" : "avx2 maddubs";
  const int64_t iters = (avx512 ? 10'000'000 : 20'000'000) / scale;
  const double ops_per_thread = (avx512 ? 128.0 : 64.0) * kChains * static_cast<double>(iters);
  std::vector<uint32_t> out(pool.size());
  Timer timer;
  pool.Run(pool.size(),
           [&](int task, int) { out[task] = avx512 ? DotAvx512Vnni(iters) : DotAvx2(iters); });
  const double s = timer.ElapsedSeconds();
  for (uint32_t v : out) g_sink.fetch_add(v, std::memory_order_relaxed);
  return ops_per_thread * pool.size() / s / 1e9;
#else
  (void)pool, (void)scale, (void)isa;
  return 0;
#endif
}

// The int8 peak: the best of `passes` full-length passes.
double MeasureInt8(ThreadPool& pool, int passes, std::string* isa) {
  double best = 0;
  for (int p = 0; p < passes; ++p) best = std::max(best, Int8Pass(pool, 1, isa));
  return best;
}

double MeasureMatmul(ThreadPool& pool, int passes, Roofline* r) {
  const int64_t m = 512, k = 2048, n = 2048;
  r->matmul_m = m, r->matmul_k = k, r->matmul_n = n;
  AlignedBuffer<float> w(n * k), x(m * k), y(m * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = dist(rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] = dist(rng);
  const ops::Weight weight = ops::MakeWeight(DType::kF32, k, n, w.data());
  ops::MatmulScratch scratch(m, k, pool.size());
  ops::Matmul(pool, weight, x.data(), m, y.data(), n, scratch);  // warm-up
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    Timer timer;
    ops::Matmul(pool, weight, x.data(), m, y.data(), n, scratch);
    best = std::max(best, 2.0 * m * k * n / timer.ElapsedSeconds() / 1e9);
  }
  g_sink.fetch_add(std::bit_cast<uint32_t>(y[0]), std::memory_order_relaxed);
  return best;
}

}  // namespace

Result<double> MeasureReadBandwidth(ThreadPool& pool, size_t buffer_bytes, int passes) {
  if (passes < 1) return Errorf("roofline: passes {} must be positive", passes);
  const size_t min_bytes = static_cast<size_t>(pool.size()) * 16 * 4096;
  if (buffer_bytes < min_bytes)
    return Errorf("roofline: buffer of {} bytes is too small (at least {})", buffer_bytes,
                  min_bytes);
  MappedBuffer buf;
  RETURN_IF_ERROR(buf.Map(buffer_bytes));
  return MeasureRead(pool, buf, passes);
}

struct RoofProbe::Buffer {
  roofline_internal::MappedBuffer mapped;
};

Result<std::unique_ptr<RoofProbe>> RoofProbe::Create(ThreadPool& pool, size_t buffer_bytes) {
  const size_t min_bytes = static_cast<size_t>(pool.size()) * 16 * 4096;
  if (buffer_bytes < min_bytes)
    return Errorf("roofline: buffer of {} bytes is too small (at least {})", buffer_bytes,
                  min_bytes);
  std::unique_ptr<RoofProbe> probe(new RoofProbe(pool));
  probe->buf_ = std::make_unique<Buffer>();
  RETURN_IF_ERROR(probe->buf_->mapped.Map(buffer_bytes));
  Touch(pool, probe->buf_->mapped);
  return probe;
}

RoofProbe::RoofProbe(ThreadPool& pool) : pool_(pool) {}
RoofProbe::~RoofProbe() = default;

double RoofProbe::ReadPass() { return rotor::bench::ReadPass(pool_, buf_->mapped); }

// A tenth of MeasureInt8's pass: about 10 ms.
double RoofProbe::Int8Pass() { return rotor::bench::Int8Pass(pool_, 10, nullptr); }

Result<Roofline> MeasureRoofline(ThreadPool& pool, const RooflineOptions& options) {
  Roofline r;
  r.threads = pool.size();
  r.buffer_bytes = options.buffer_bytes;
  ASSIGN_OR_RETURN(r.read_gbps, MeasureReadBandwidth(pool, options.buffer_bytes, options.passes));
  r.read_best_gbps = r.read_gbps;
  r.fma_gflops = MeasureFma(pool, options.passes, &r.fma_isa);
  r.int8_gops = MeasureInt8(pool, options.passes, &r.int8_isa);
  r.matmul_gflops = MeasureMatmul(pool, options.passes, &r);
  return r;
}

std::string RooflineSummary(const Roofline& r) {
  return fmt::format(
      "roofline, {} thread{}: memory read {:.1f} GB/s ({} MiB buffer, best pass), "
      "f32 FMA peak {:.1f} GFLOP/s ({}), int8 dot peak {}, ops::Matmul f32 {}x{}x{} {:.1f} "
      "GFLOP/s",
      r.threads, r.threads == 1 ? "" : "s", r.read_gbps, r.buffer_bytes >> 20, r.fma_gflops,
      r.fma_isa,
      r.int8_gops > 0 ? fmt::format("{:.1f} GOP/s ({})", r.int8_gops, r.int8_isa) : "n/a",
      r.matmul_m, r.matmul_k, r.matmul_n, r.matmul_gflops);
}

}  // namespace rotor::bench
