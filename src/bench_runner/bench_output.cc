#include "bench_runner/bench_output.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <set>

#include "base/cpu.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "kv/kv_quant.h"

namespace rotor::bench {
namespace {

using Json = nlohmann::ordered_json;

// llama-bench's size and parameter formats.
std::string SizeLabel(int64_t bytes) {
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.2f} MiB", bytes / double(1 << 20));
  return fmt::format("{:.2f} GiB", bytes / double(1 << 30));
}

std::string ParamsCell(int64_t n) {
  if (n < 1'000'000) return fmt::format("{:.2f} K", n / 1e3);
  if (n < 1'000'000'000) return fmt::format("{:.2f} M", n / 1e6);
  return fmt::format("{:.2f} B", n / 1e9);
}

Json OrNull(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

void Flush(std::FILE* out) { std::fflush(out); }

class MarkdownWriter : public BenchWriter {
 public:
  MarkdownWriter(const BenchColumns& columns, std::FILE* out) : cols_(columns), out_(out) {}

  void Begin(const std::vector<Roofline>& rooflines) override {
    for (const Roofline& r : rooflines) fmt::print(out_, "{}\n", RooflineSummary(r));
    if (!rooflines.empty()) fmt::print(out_, "\n");
    std::vector<std::string> head = {"model", "size", "params", "threads", "kv"};
    std::vector<bool> right = {false, true, true, true, false};
    auto add = [&](bool on, const char* name, bool r) {
      if (on) head.push_back(name), right.push_back(r);
    };
    add(cols_.kv_size, "kv_size", true);
    add(cols_.rope_k, "rope_k", false);
    add(cols_.positions, "positions", false);
    add(cols_.kv_type, "type_kv", false);
    add(cols_.prefill_step, "step", true);
    add(cols_.n_ctx, "n_ctx", true);
    add(cols_.n_seq, "n_seq", true);
    add(cols_.repack, "repack", true);
    add(cols_.mmap, "mmap", true);
    add(true, "test", true);
    add(true, "t/s", true);
    add(true, "GB/s", true);
    add(true, "GFLOP/s", true);
    add(cols_.roofline, "roofline", true);
    add(true, "peak RSS", true);
    fmt::print(out_, "| {} |\n", fmt::join(head, " | "));
    std::vector<std::string> rule;
    for (size_t i = 0; i < head.size(); ++i) {
      const std::string dashes(std::max<size_t>(head[i].size(), 3) - 1, '-');
      rule.push_back(right[i] ? fmt::format("{}:", dashes) : fmt::format(":{}", dashes));
    }
    fmt::print(out_, "| {} |\n", fmt::join(rule, " | "));
    Flush(out_);
  }

  void Row(const BenchRow& row) override {
    const BenchCase& c = *row.c;
    const KvConfig& kv = row.result->kv;
    std::vector<std::string> cells = {
        row.model->type, SizeLabel(row.model->size_bytes), ParamsCell(row.model->n_params),
        fmt::format("{}", c.threads), kv.policy};
    if (cols_.kv_size) cells.push_back(fmt::format("{}", kv.size));
    if (cols_.rope_k) cells.push_back(std::string(RopeKName(kv.rope_k)));
    if (cols_.positions)
      cells.push_back(KvPolicyUses(kv.policy, KvOpt::kPositions)
                          ? std::string(KvPositionsName(kv.positions))
                          : "-");
    if (cols_.kv_type)
      cells.push_back(KvTypesName(kv.types) + (kv.rotate ? "+rot" : "") + (kv.k_offset ? "+koff" : ""));
    if (cols_.prefill_step)
      cells.push_back(c.prefill_step > 0 ? fmt::format("{}", c.prefill_step) : "whole");
    if (cols_.n_ctx) cells.push_back(fmt::format("{}", c.n_ctx));
    if (cols_.n_seq) cells.push_back(fmt::format("{}", c.n_seq));
    if (cols_.repack) cells.push_back(row.model->repack ? "1" : "0");
    if (cols_.mmap) cells.push_back(row.model->mmap ? "1" : "0");
    cells.push_back(c.test.Name());
    cells.push_back(fmt::format("{:.2f} ± {:.2f}", row.stats.avg_ts, row.stats.stddev_ts));
    cells.push_back(fmt::format("{:.1f}", row.gbps));
    cells.push_back(fmt::format("{:.1f}", row.gflops));
    if (cols_.roofline)
      cells.push_back(row.roofline_pct
                          ? fmt::format("{:.1f}% {}", *row.roofline_pct, row.roofline_bound)
                          : "-");
    cells.push_back(fmt::format("{:.0f} MiB", row.result->peak_rss_bytes / double(1 << 20)));
    fmt::print(out_, "| {} |\n", fmt::join(cells, " | "));
    Flush(out_);
  }

  void End() override {}

 private:
  BenchColumns cols_;
  std::FILE* out_;
};

void PrintRooflinesToStderr(const std::vector<Roofline>& rooflines) {
  for (const Roofline& r : rooflines) fmt::print(stderr, "rotor: bench: {}\n", RooflineSummary(r));
}

class JsonWriter : public BenchWriter {
 public:
  JsonWriter(bool lines, std::FILE* out) : lines_(lines), out_(out) {}
  void Begin(const std::vector<Roofline>& rooflines) override {
    PrintRooflinesToStderr(rooflines);
    if (!lines_) fmt::print(out_, "[");
    Flush(out_);
  }
  void Row(const BenchRow& row) override {
    const Json j = BenchRowJson(row);
    if (lines_) {
      fmt::print(out_, "{}\n", j.dump());
    } else {
      // Indented like llama-bench's JSON: one object per test.
      fmt::print(out_, "{}\n{}", n_rows_ > 0 ? "," : "", j.dump(2));
    }
    ++n_rows_;
    Flush(out_);
  }
  void End() override {
    if (!lines_) fmt::print(out_, "\n]\n");
    Flush(out_);
  }

 private:
  bool lines_;
  std::FILE* out_;
  int n_rows_ = 0;
};

// A string, or a sample list as "a;b;c", between quotes (each inside doubled).
std::string Quoted(const Json& v, char quote) {
  std::string s;
  if (v.is_string()) {
    s = v.get<std::string>();
  } else {
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) s.push_back(';');
      s.append(v[i].dump());
    }
  }
  std::string quoted(1, quote);
  for (char ch : s) {
    quoted.push_back(ch);
    if (ch == quote) quoted.push_back(quote);
  }
  quoted.push_back(quote);
  return quoted;
}

std::string CsvCell(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string() || v.is_array()) return Quoted(v, '"');
  return v.dump();
}

class CsvWriter : public BenchWriter {
 public:
  explicit CsvWriter(std::FILE* out) : out_(out) {}
  void Begin(const std::vector<Roofline>& rooflines) override {
    PrintRooflinesToStderr(rooflines);
    fmt::print(out_, "{}\n", fmt::join(BenchFieldNames(), ","));
    Flush(out_);
  }
  void Row(const BenchRow& row) override {
    const Json j = BenchRowJson(row);
    std::vector<std::string> cells;
    for (const std::string& name : BenchFieldNames()) cells.push_back(CsvCell(j.at(name)));
    fmt::print(out_, "{}\n", fmt::join(cells, ","));
    Flush(out_);
  }
  void End() override {}

 private:
  std::FILE* out_;
};

// llama-bench's -o sql: a CREATE TABLE for every field, then an INSERT per
// row, for `sqlite3 results.db < out.sql`. Strings are quoted (' doubled),
// numbers bare, booleans 1 / 0, missing values NULL; the sample lists are
// strings as in CSV ("a;b;c").
const char* SqlType(const std::string& field) {
  static const std::set<std::string> kText = {
      "cpu_info",  "cpu_isa",      "model_filename", "model_type",     "kv",
      "rope_k",    "kv_positions", "type_k",         "type_v",         "test",
      "test_time", "samples_ns",   "samples_ts",     "roofline_bound", "peak_rss_scope"};
  static const std::set<std::string> kReal = {"avg_ts",
                                              "stddev_ts",
                                              "gbps",
                                              "gflops",
                                              "roofline_pct",
                                              "roofline_read_gbps",
                                              "roofline_read_best_gbps",
                                              "roofline_fma_gflops",
                                              "roofline_int8_gops",
                                              "roofline_matmul_gflops"};
  if (kText.count(field)) return "TEXT";
  if (kReal.count(field)) return "REAL";
  return "INTEGER";
}

std::string SqlValue(const Json& v) {
  if (v.is_null()) return "NULL";
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_string() || v.is_array()) return Quoted(v, '\'');
  return v.dump();
}

class SqlWriter : public BenchWriter {
 public:
  explicit SqlWriter(std::FILE* out) : out_(out) {}
  void Begin(const std::vector<Roofline>& rooflines) override {
    PrintRooflinesToStderr(rooflines);
    const std::vector<std::string>& names = BenchFieldNames();
    fmt::print(out_, "CREATE TABLE IF NOT EXISTS test (\n");
    for (size_t i = 0; i < names.size(); ++i)
      fmt::print(out_, "  {} {}{}\n", names[i], SqlType(names[i]), i + 1 < names.size() ? "," : "");
    fmt::print(out_, ");\n\n");
    Flush(out_);
  }
  void Row(const BenchRow& row) override {
    const Json j = BenchRowJson(row);
    std::vector<std::string> values;
    for (const std::string& name : BenchFieldNames()) values.push_back(SqlValue(j.at(name)));
    fmt::print(out_, "INSERT INTO test ({}) VALUES ({});\n", fmt::join(BenchFieldNames(), ", "),
               fmt::join(values, ", "));
    Flush(out_);
  }
  void End() override {}

 private:
  std::FILE* out_;
};

}  // namespace

BenchRow MakeBenchRow(const BenchModel& model, const BenchCase& c, const BenchResult& result,
                      const Roofline* roofline) {
  BenchRow row;
  row.model = &model;
  row.c = &c;
  row.result = &result;
  row.roofline = roofline;
  row.stats = ComputeStats(result, (int64_t{c.test.n_prompt} + c.test.n_gen) * c.n_seq);
  const double seconds = row.stats.avg_ns * 1e-9;
  if (seconds > 0) {
    row.gbps = result.work.bytes / seconds / 1e9;
    row.gflops = result.work.flops / seconds / 1e9;
  }
  if (roofline != nullptr) {
    // Prompt processing against the arithmetic peak of the model's matmuls;
    // generation against whichever roof binds: memory read, or the
    // arithmetic peak when a step's work outweighs its bytes (batches).
    const bool int8 = model.int8_matmul && roofline->int8_gops > 0;
    const double compute_peak = int8 ? roofline->int8_gops : roofline->fma_gflops;
    const char* compute = int8 ? "int8" : "f32";
    const double compute_pct = compute_peak > 0 ? 100.0 * row.gflops / compute_peak : 0;
    if (c.test.n_prompt > 0 && c.test.n_gen == 0) {
      row.roofline_bound = compute;
      if (compute_peak > 0) row.roofline_pct = compute_pct;
    } else if (roofline->read_gbps > 0) {
      const double memory_pct = 100.0 * row.gbps / roofline->read_gbps;
      const bool memory = memory_pct >= compute_pct;
      row.roofline_bound = memory ? "memory" : compute;
      row.roofline_pct = memory ? memory_pct : compute_pct;
    }
  }
  return row;
}

const std::vector<std::string>& BenchFieldNames() {
  // llama-bench's names where the meaning is the same, then rotor's own
  // (every key of BenchRowJson; new ones at the end, so that CSV columns keep
  // their places).
  // clang-format off
  static const std::vector<std::string> kNames = {
      "cpu_info", "cpu_isa",
      "model_filename", "model_type", "model_size", "model_n_params",
      "n_threads", "n_ctx", "n_seq", "kv", "kv_size", "rope_k", "kv_positions", "type_k", "type_v", "prefill_step",
      "n_prompt", "n_gen", "n_depth", "test", "test_time",
      "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts",
      "gbps", "gflops", "roofline_pct", "roofline_bound",
      "roofline_read_gbps", "roofline_read_best_gbps", "roofline_fma_gflops", "roofline_int8_gops", "roofline_matmul_gflops",
      "peak_rss_bytes", "peak_rss_scope", "shared_prefix", "kv_blocks", "kv_bytes",
      "prefix_hit_tokens", "interleave", "repack", "use_mmap",
      "kv_rotate", "kv_k_offset", "kv_bytes_per_token"};
  // clang-format on
  return kNames;
}

Json BenchRowJson(const BenchRow& row) {
  static const std::string kCpu = CpuModelName();
  const BenchCase& c = *row.c;
  const BenchResult& r = *row.result;
  const Roofline* roof = row.roofline;
  Json j;
  j["cpu_info"] = kCpu;
  j["cpu_isa"] = std::string(IsaName(ActiveIsa()));
  j["model_filename"] = row.model->path;
  j["model_type"] = row.model->type;
  j["model_size"] = row.model->size_bytes;
  j["model_n_params"] = row.model->n_params;
  j["n_threads"] = c.threads;
  j["n_ctx"] = c.n_ctx;
  j["n_seq"] = c.n_seq;
  j["kv"] = r.kv.policy;
  j["kv_size"] = r.kv.size;
  j["rope_k"] = std::string(RopeKName(r.kv.rope_k));
  j["kv_positions"] = std::string(KvPositionsName(r.kv.positions));
  j["type_k"] = std::string(KvTypeName(r.kv.types.k));  // llama-bench's fields
  j["type_v"] = std::string(KvTypeName(r.kv.types.v));
  j["kv_rotate"] = r.kv.rotate;
  j["kv_k_offset"] = r.kv.k_offset;
  // K and V bytes one token takes in every layer.
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["prefill_step"] = c.prefill_step;
  j["n_prompt"] = c.test.n_prompt;
  j["n_gen"] = c.test.n_gen;
  j["n_depth"] = c.test.n_depth;
  j["test"] = c.test.Name();
  j["test_time"] = r.test_time;
  j["avg_ns"] = static_cast<uint64_t>(std::llround(row.stats.avg_ns));
  j["stddev_ns"] = static_cast<uint64_t>(std::llround(row.stats.stddev_ns));
  j["avg_ts"] = row.stats.avg_ts;
  j["stddev_ts"] = row.stats.stddev_ts;
  j["samples_ns"] = r.samples_ns;
  j["samples_ts"] = row.stats.samples_ts;
  j["gbps"] = row.gbps;
  j["gflops"] = row.gflops;
  j["roofline_pct"] = OrNull(row.roofline_pct);
  j["roofline_bound"] = row.roofline_bound ? Json(row.roofline_bound) : Json(nullptr);
  j["roofline_read_gbps"] = roof ? Json(roof->read_gbps) : Json(nullptr);
  j["roofline_read_best_gbps"] = roof ? Json(roof->read_best_gbps) : Json(nullptr);
  j["roofline_fma_gflops"] = roof ? Json(roof->fma_gflops) : Json(nullptr);
  j["roofline_int8_gops"] = roof && roof->int8_gops > 0 ? Json(roof->int8_gops) : Json(nullptr);
  j["roofline_matmul_gflops"] = roof ? Json(roof->matmul_gflops) : Json(nullptr);
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["peak_rss_scope"] = r.peak_rss_scoped ? "test" : "process";
  j["shared_prefix"] = c.shared_prefix;
  j["kv_blocks"] = r.kv_blocks;
  j["kv_bytes"] = r.kv_bytes;
  j["prefix_hit_tokens"] = r.prefix_hit_tokens;
  // Sample k of every test of the model ran in round k (--interleave).
  j["interleave"] = c.interleave;
  // The matrices ran on row-interleaved copies (false: as stored, -nr).
  j["repack"] = row.model->repack;
  j["use_mmap"] = row.model->mmap;  // llama-bench's name
  return j;
}

std::unique_ptr<BenchWriter> MakeBenchWriter(BenchFormat format, const BenchColumns& columns,
                                             std::FILE* out) {
  switch (format) {
    case BenchFormat::kMarkdown:
      return std::make_unique<MarkdownWriter>(columns, out);
    case BenchFormat::kJson:
      return std::make_unique<JsonWriter>(false, out);
    case BenchFormat::kJsonl:
      return std::make_unique<JsonWriter>(true, out);
    case BenchFormat::kCsv:
      return std::make_unique<CsvWriter>(out);
    case BenchFormat::kSql:
      return std::make_unique<SqlWriter>(out);
  }
  return nullptr;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "unknown" : line.substr(b);
  }
  return "unknown";
}

std::string DeviceList() {
  std::string line = fmt::format("  CPU: {} ({}, {} threads", CpuModelName(), IsaName(ActiveIsa()),
                                 HardwareThreads());
  const int64_t total = PhysicalMemoryBytes(), free = AvailableMemoryBytes();
  if (total > 0 && free > 0) line += fmt::format(", {} MiB, {} MiB free", total >> 20, free >> 20);
  return "Available devices:\n" + line + ")\n";
}

}  // namespace rotor::bench
