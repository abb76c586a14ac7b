// rotor bench: running one case, and the work it represents.
//
// Every token goes through the runner (engine/runner.h), every sequence's
// chunk in one pass (n_seq sequences run the same tokens side by side).
// pp: n_prompt random token ids as a prompt in chunks of prefill_step, logits
//     for the last token only; the timed region is that run.
// tg: n_gen runner steps of one random token each (ids drawn before the timer
//     starts, so no sampling is timed; the logits of every step are computed,
//     as in generation).
// pg (llama-bench's -pg): the pp test, then tg's steps after its prompt; the
//     time is their sum, t/s counts both (n_prompt + n_gen).
// Before every repetition the caches are cleared and n_depth random tokens
// are prefilled as a prompt in chunks of prefill_step (not timed). One
// untimed warm-up run of the test at depth 0 precedes the repetitions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "bench_runner/bench_config.h"

namespace rotor::bench {

// What one run of a test does, counted from the model's shape.
//   matmul FLOPs: 2 * layer_matmul_params per token + 2 * output_matmul_params
//     per logits row (pp: 1 row; tg: 1 per step);
//   attention FLOPs: 4 * n_layer * n_head * head_dim per (query, visible key)
//     pair (QK^T and PV), a query at text index t seeing min(t + 1, kv_size) keys;
//   bytes read: weight_bytes per forward pass (pp: per chunk, a lower bound;
//     tg: per step) + the K and V of every cached token read by attention
//     (2 * n_layer * n_head_kv * head_dim * 4 bytes per token, f32 storage).
struct BenchWork {
  double flops = 0;
  double bytes = 0;
};

BenchWork EstimateWork(const BenchModel& model, const BenchCase& c, int kv_cells);

struct BenchResult {
  std::string test_time;            // ISO-8601 UTC, when the case started
  std::vector<int64_t> samples_ns;  // one per repetition
  int64_t peak_rss_bytes = 0;
  bool peak_rss_scoped = false;  // false: the process's peak (the reset was not permitted)
  KvConfig kv;                   // as resolved by the cache (size filled in)
  BenchWork work;
  // The K/V block pool after the last repetition's depth fill: blocks the
  // sequences hold (a shared one counted once) and their bytes, and the
  // fill's tokens found in the prefix cache (--shared-prefix).
  int64_t kv_blocks = 0, kv_bytes = 0, prefix_hit_tokens = 0;
  int64_t kv_bytes_per_token = 0;  // K and V of one token, every layer, in the cache's types
};

// Statistics of a result: llama-bench's definitions (sample standard deviation;
// t/s per sample = tokens / seconds, then averaged).
struct BenchStats {
  double avg_ns = 0, stddev_ns = 0;
  double avg_ts = 0, stddev_ts = 0;
  std::vector<double> samples_ts;
};
BenchStats ComputeStats(const BenchResult& r, int64_t n_tokens);

// The mean of v (0 when empty).
double Mean(const std::vector<double>& v);

// Progress of a running case: phase is "warm-up", "fill" or "run", rep counts from 1.
using BenchProgress = std::function<void(const char* phase, int rep)>;

// One case's state across its repetitions: its caches, block pool, runner
// and token ids. Start() builds them and runs the untimed warm-up. A
// repetition is Fill() (clear the caches, fill the depth: untimed), then
// Step() until it returns true: each call times one unit of the test (a
// pp prompt whole; one tg pass of one token per sequence), and their sum is
// the repetition's sample. RunBenchCase runs the repetitions back to back;
// `rotor bench --interleave` keeps a model's cases alive, fills each, then
// takes their tg steps in turn, so that the cases compared see the host in
// the same state, milliseconds apart (the K/V types' ratio at depth is then
// measured step by step, not minutes apart).
class BenchCaseRun {
 public:
  // `pool` runs the case (its size must be c.threads) and outlives the run.
  // scoped_rss: reset the peak RSS counter here, so that Finish() reports
  // this case's peak (false when other cases share the process's peak).
  static Result<std::unique_ptr<BenchCaseRun>> Start(const BenchModel& model, const BenchCase& c,
                                                     uint64_t seed, ThreadPool& pool,
                                                     bool scoped_rss,
                                                     const BenchProgress& progress);
  ~BenchCaseRun();
  BenchCaseRun(const BenchCaseRun&) = delete;
  BenchCaseRun& operator=(const BenchCaseRun&) = delete;

  // Clears the caches and fills the depth (progress "fill", rep from 1).
  Status Fill(int rep, const BenchProgress& progress);
  // The next timed unit of the test; true when the test is done and its
  // time was appended to the result's samples.
  Result<bool> Step();
  // Fill, then every step (progress "run" between them).
  Status Repetition(int rep, const BenchProgress& progress);
  // The result so far, with the peak RSS read now.
  BenchResult Finish();

 private:
  struct State;
  explicit BenchCaseRun(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Runs one case. Errors (e.g. a KV policy this build does not have) leave
// nothing behind; the caller decides whether the sweep goes on.
Result<BenchResult> RunBenchCase(const BenchModel& model, const BenchCase& c, int repetitions,
                                 uint64_t seed, const BenchProgress& progress);

}  // namespace rotor::bench
