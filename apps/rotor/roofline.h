// The machine's two ceilings for `rotor bench --roofline`: memory read
// bandwidth (decode reads every weight once per token) and the f32
// multiply-add rate (prefill is matrix-matrix work), measured once per
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"

namespace rotor::cli {

struct RooflineOptions {
  size_t buffer_bytes = size_t{1} << 30;  // streamed buffer: far larger than the caches
  int passes = 10;                        // best of this many read passes / FMA / matmul runs
};

struct Roofline {
  int threads = 0;
  // Every thread streams its share of one buffer with 256-bit loads; best pass.
  double read_gbps = 0;  // 1e9 bytes per second
  // A register-blocked FMA loop on every thread (no memory traffic): the f32 peak.
  double fma_gflops = 0;
  std::string fma_isa;  // "avx512", "avx2" or "scalar": the widest vectors the loop used
  // The same with 512-bit VNNI int8 dot products (u8 x s8, 2 ops per product),
  // the arithmetic of rotor's q8_0/q4_0 matmuls; 0 where the active ISA lacks it.
  double int8_gops = 0;
  // ops::Matmul on an f32 problem of matmul_m x matmul_k x matmul_n (rotor's own kernel).
  double matmul_gflops = 0;
  int64_t matmul_m = 0, matmul_k = 0, matmul_n = 0;
  size_t buffer_bytes = 0;
};

// Measures all three numbers on `pool` (its size is the thread count).
Result<Roofline> MeasureRoofline(ThreadPool& pool, const RooflineOptions& options);

// The read bandwidth alone (GB/s, best of `passes`), on a buffer mapped for
// the call and unmapped after it: `rotor bench --roofline` measures it right
// before and after every generation test, because this machine's bandwidth
// moves by up to 2x within minutes, so a ceiling taken at the start of a long
// run does not describe a test run later.
Result<double> MeasureReadBandwidth(ThreadPool& pool, size_t buffer_bytes, int passes);

// "memory read 55.2 GB/s (1024 MiB buffer), f32 FMA peak 221.0 GFLOP/s (avx512), ..."
std::string RooflineSummary(const Roofline& r);

}  // namespace rotor::cli
