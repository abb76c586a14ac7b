// rotor bench: the results as a markdown table (llama-bench's columns plus
// rotor's), a JSON array, JSON lines, CSV or SQL statements (llama-bench's
// -o sql). Field names follow llama-bench where the meaning is the same. Rows
// are written as the cases finish.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_runner/bench_config.h"
#include "bench_runner/bench_run.h"
#include "bench_runner/roofline.h"

namespace rotor::bench {

// One finished case with everything a row shows.
struct BenchRow {
  const BenchModel* model = nullptr;
  const BenchCase* c = nullptr;
  const BenchResult* result = nullptr;
  const Roofline* roofline = nullptr;  // null without --roofline
  BenchStats stats;
  double gbps = 0;    // work.bytes / avg time
  double gflops = 0;  // work.flops / avg time
  // tg: gbps / read bandwidth; pp: gflops / the arithmetic peak of the model's
  // matmuls (int8 dot peak for q8_0/q4_0 where measured, else f32 FMA); percent.
  std::optional<double> roofline_pct;
  const char* roofline_bound = nullptr;  // "memory", "f32" or "int8": what pct is against
};

// Fills the derived numbers of a row (stats, rates, roofline percentage).
BenchRow MakeBenchRow(const BenchModel& model, const BenchCase& c, const BenchResult& result,
                      const Roofline* roofline);

// Field names of a JSON object / CSV column, in output order.
const std::vector<std::string>& BenchFieldNames();
nlohmann::ordered_json BenchRowJson(const BenchRow& row);

// Which optional markdown columns a sweep shows (those it varies or sets).
struct BenchColumns {
  bool kv_size = false;
  bool rope_k = false;
  bool positions = false;  // an evicting policy that uses them: compact by default
  bool kv_type = false;
  bool prefill_step = false;
  bool n_ctx = false;
  bool n_seq = false;
  // -nr / -mmp 0 (one setting per run): each row's repack and use_mmap, 0 or
  // 1, as llama-bench shows the parameters a run sets.
  bool repack = false;
  bool mmap = false;
  bool roofline = false;
};

class BenchWriter {
 public:
  virtual ~BenchWriter() = default;
  // Markdown prints the roofline lines above its table; the data formats carry
  // them in every row, so they go to stderr.
  virtual void Begin(const std::vector<Roofline>& rooflines) = 0;
  virtual void Row(const BenchRow& row) = 0;
  virtual void End() = 0;
};

std::unique_ptr<BenchWriter> MakeBenchWriter(BenchFormat format, const BenchColumns& columns,
                                             std::FILE* out);

// "AMD EPYC 9B14" from /proc/cpuinfo; "unknown" elsewhere.
std::string CpuModelName();

// llama-bench's --list-devices for rotor's one device, the CPU: "Available
// devices:" and a line "  CPU: <model name> (<kernels' ISA>, <n> threads,
// <total> MiB, <available> MiB free)" (PhysicalMemoryBytes,
// AvailableMemoryBytes; the memory left out where either is unknown).
std::string DeviceList();

}  // namespace rotor::bench
