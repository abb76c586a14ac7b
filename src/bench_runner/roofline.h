// The machine's two ceilings for `rotor bench --roofline`: memory read
// bandwidth (decode reads every weight once per token) and the f32
// multiply-add rate (prefill is matrix-matrix work), measured once per
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"

namespace rotor::bench {

struct RooflineOptions {
  size_t buffer_bytes = size_t{1} << 30;  // streamed buffer: far larger than the caches
  int passes = 10;                        // best of this many read passes / FMA / matmul runs
};

struct Roofline {
  int threads = 0;
  // Every thread streams its share of one buffer with 256-bit loads, with and
  // without software prefetch (the faster of the two per pass); best pass.
  // Generation rows of `rotor bench`: the mean of the passes interleaved with
  // the test's repetitions (RoofProbe), and read_best_gbps their best.
  double read_gbps = 0;  // 1e9 bytes per second
  double read_best_gbps = 0;
  // A register-blocked FMA loop on every thread (no memory traffic): the f32 peak.
  double fma_gflops = 0;
  std::string fma_isa;  // "avx512", "avx2" or "scalar": the widest vectors the loop used
  // The same with int8 dot products (u8 x s8, 2 ops per product), the
  // arithmetic of rotor's q8_0/q4_0 matmuls: 512-bit VNNI on AVX-512,
  // vpmaddubsw + vpmaddwd on AVX2; 0 on the scalar ISA. Best of the passes;
  // generation rows of `rotor bench`: the mean of the short passes beside the
  // test's repetitions (RoofProbe).
  double int8_gops = 0;
  std::string int8_isa;  // "avx512 vnni" or "avx2 maddubs"; empty when not measured
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

// Short measurements of both ceilings to interleave with a test. Create maps
// and touches the buffer once; then ReadPass() streams it once on the pool's
// threads and returns GB/s, and Int8Pass() runs MeasureRoofline's int8 dot
// loop for about 10 ms on them and returns GOP/s (0 where int8_gops is 0).
// `rotor bench --roofline` runs three of each before each repetition of a
// generation test and after the last, and takes their means as the test's
// ceilings: the test's speed is a mean over the same seconds, and this host
// moves both (its bandwidth 39-80 GB/s within a session; its int8 peak on
// 2 threads 1,313 and 1,834 GOP/s 20 minutes apart, 917-935 in earlier
// sessions).
class RoofProbe {
 public:
  static Result<std::unique_ptr<RoofProbe>> Create(ThreadPool& pool, size_t buffer_bytes);
  ~RoofProbe();
  double ReadPass();
  double Int8Pass();

 private:
  explicit RoofProbe(ThreadPool& pool);
  ThreadPool& pool_;
  struct Buffer;
  std::unique_ptr<Buffer> buf_;
};

// "memory read 55.2 GB/s (1024 MiB buffer), f32 FMA peak 221.0 GFLOP/s (avx512), ..."
std::string RooflineSummary(const Roofline& r);

}  // namespace rotor::bench
