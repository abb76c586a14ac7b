// rotor bench end to end: the shape of every output format, the roofline
// numbers and the errors. No timing assertions: only that times are positive.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// A small, fast sweep on the bundled model: pp16 and tg8.
std::vector<std::string> SmallBench(const std::string& format) {
  return {"bench", "-m", BundledModel(), "-p", "16", "-n", "8", "-r", "2", "-t", "2", "-o", format};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool Positive(const Json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

// Every field with its type; roofline fields are numbers only with --roofline.
void ExpectRow(const Json& row, int repetitions, bool roofline) {
  ASSERT_TRUE(row.is_object()) << row.dump();
  for (const char* key : {"cpu_info", "cpu_isa", "model_filename", "model_type", "kv", "rope_k",
                          "test", "test_time", "peak_rss_scope"}) {
    ASSERT_TRUE(row.contains(key)) << key;
    EXPECT_TRUE(row[key].is_string()) << key << " = " << row[key].dump();
  }
  for (const char* key :
       {"model_size", "model_n_params", "n_threads", "n_ctx", "n_seq", "kv_size", "prefill_step",
        "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "peak_rss_bytes"}) {
    ASSERT_TRUE(row.contains(key)) << key;
    EXPECT_TRUE(row[key].is_number_integer()) << key << " = " << row[key].dump();
  }
  for (const char* key : {"avg_ts", "stddev_ts", "gbps", "gflops"}) {
    ASSERT_TRUE(row.contains(key)) << key;
    EXPECT_TRUE(row[key].is_number()) << key << " = " << row[key].dump();
  }
  for (const char* key : {"roofline_pct", "roofline_read_gbps", "roofline_read_best_gbps",
                          "roofline_fma_gflops", "roofline_matmul_gflops"}) {
    ASSERT_TRUE(row.contains(key)) << key;
    if (roofline) {
      EXPECT_TRUE(Positive(row[key])) << key << " = " << row[key].dump();
    } else {
      EXPECT_TRUE(row[key].is_null()) << key << " = " << row[key].dump();
    }
  }
  // Measured on AVX-512 (VNNI) and AVX2 (vpmaddubsw), not on the scalar ISA.
  ASSERT_TRUE(row.contains("roofline_int8_gops"));
  EXPECT_TRUE(row["roofline_int8_gops"].is_null() ||
              (roofline && Positive(row["roofline_int8_gops"])))
      << row["roofline_int8_gops"];
  ASSERT_TRUE(row.contains("roofline_bound"));
  if (roofline) {
    const std::string bound = row["roofline_bound"].get<std::string>();
    EXPECT_EQ(bound, row["n_gen"].get<int>() > 0 ? "memory" : "f32") << "an f32 model";
  } else {
    EXPECT_TRUE(row["roofline_bound"].is_null());
  }
  ASSERT_TRUE(row["samples_ns"].is_array());
  ASSERT_TRUE(row["samples_ts"].is_array());
  EXPECT_EQ(row["samples_ns"].size(), static_cast<size_t>(repetitions));
  EXPECT_EQ(row["samples_ts"].size(), static_cast<size_t>(repetitions));
  for (const Json& v : row["samples_ns"])
    EXPECT_TRUE(v.is_number_integer() && v.get<int64_t>() > 0);
  for (const Json& v : row["samples_ts"]) EXPECT_TRUE(Positive(v));
  EXPECT_TRUE(Positive(row["avg_ts"]));
  EXPECT_GT(row["avg_ns"].get<int64_t>(), 0);
  EXPECT_TRUE(Positive(row["gbps"]));
  EXPECT_TRUE(Positive(row["gflops"]));
  EXPECT_GT(row["peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(row["n_seq"], 1);
  EXPECT_TRUE(std::regex_match(row["test_time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << row["test_time"];
  EXPECT_THAT(row["model_type"].get<std::string>(), HasSubstr("llama"));
}

TEST(BenchCliTest, JsonHasEveryField) {
  CliResult r = RunRotor(SmallBench("json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 2u);
  for (const Json& row : rows) ExpectRow(row, 2, /*roofline=*/false);
  EXPECT_EQ(rows[0]["test"], "pp16");
  EXPECT_EQ(rows[0]["n_prompt"], 16);
  EXPECT_EQ(rows[0]["n_gen"], 0);
  EXPECT_EQ(rows[1]["test"], "tg8");
  EXPECT_EQ(rows[1]["n_gen"], 8);
  EXPECT_EQ(rows[1]["n_threads"], 2);
  EXPECT_EQ(rows[1]["kv"], "full");
  EXPECT_EQ(rows[1]["model_filename"], BundledModel());
}

// --shared-prefix: three sequences at depth 64 hold one copy of its four
// 16-token blocks (the second and third take them from the prefix cache);
// without it each holds its own.
TEST(BenchCliTest, SharedPrefixHoldsOneCopyOfTheDepth) {
  for (bool shared : {true, false}) {
    std::vector<std::string> args = {"bench", "-m", BundledModel(), "-p", "0",  "-n", "4",
                                     "-d",    "64", "--batch",      "3",  "-r", "1",  "-t",
                                     "2",     "-o", "jsonl"};
    if (shared) args.push_back("--shared-prefix");
    CliResult r = RunRotor(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json row = Json::parse(Lines(r.out).at(0));
    EXPECT_EQ(row["shared_prefix"], shared);
    EXPECT_EQ(row["kv_blocks"], shared ? 4 : 12);
    EXPECT_EQ(row["prefix_hit_tokens"], shared ? 128 : 0);
    EXPECT_GT(row["kv_bytes"].get<int64_t>(), 0);
  }
}

TEST(BenchCliTest, JsonLinesOneObjectPerTest) {
  CliResult r = RunRotor(SmallBench("jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const std::string& line : lines) ExpectRow(Json::parse(line), 2, false);
}

// Splits one CSV record; quoted cells may hold commas and doubled quotes.
std::vector<std::string> CsvCells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

TEST(BenchCliTest, CsvHeaderAndRows) {
  CliResult r = RunRotor(SmallBench("csv"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  const std::vector<std::string> header = CsvCells(lines[0]);
  for (const char* field : {"model_filename", "model_type", "model_size",   "model_n_params",
                            "n_threads",      "n_prompt",   "n_gen",        "n_depth",
                            "test_time",      "avg_ns",     "stddev_ns",    "avg_ts",
                            "stddev_ts",      "samples_ns", "samples_ts",   "kv",
                            "kv_size",        "rope_k",     "prefill_step", "n_seq", "kv_positions",
                            "gbps",           "gflops",     "roofline_pct", "peak_rss_bytes",
                            "cpu_isa"})
    EXPECT_THAT(header, ::testing::Contains(field));
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = CsvCells(lines[i]);
    ASSERT_EQ(cells.size(), header.size()) << lines[i];
    for (size_t c = 0; c < header.size(); ++c) {
      if (header[c] == "avg_ts") {
        EXPECT_GT(std::stod(cells[c]), 0);
      } else if (header[c] == "samples_ns") {
        EXPECT_EQ(std::count(cells[c].begin(), cells[c].end(), ';'), 1) << cells[c];  // 2 samples
      } else if (header[c] == "roofline_pct") {
        EXPECT_EQ(cells[c], "");
      }
    }
  }
}

TEST(BenchCliTest, MarkdownTable) {
  CliResult r = RunRotor(SmallBench("md"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // header, rule, pp16, tg8
  for (const std::string& line : lines) {
    EXPECT_EQ(line.front(), '|') << line;
    EXPECT_EQ(line.back(), '|') << line;
  }
  EXPECT_THAT(lines[0], HasSubstr("| model | size | params | threads | kv |"));
  EXPECT_THAT(lines[0], HasSubstr("| test | t/s |"));
  EXPECT_THAT(lines[2], HasSubstr("| pp16 |"));
  EXPECT_THAT(lines[3], HasSubstr("| tg8 |"));
  EXPECT_THAT(lines[3], HasSubstr(" ± "));
  // Progress goes to stderr, never into the table.
  EXPECT_THAT(r.err, HasSubstr("tg8"));
}

// llama-bench's -o sql: the table, then an INSERT per test.
TEST(BenchCliTest, SqlTableAndInserts) {
  CliResult r = RunRotor(SmallBench("sql"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "CREATE TABLE IF NOT EXISTS test (");
  std::vector<std::string> inserts;
  for (const std::string& line : lines)
    if (line.rfind("INSERT INTO test (", 0) == 0) inserts.push_back(line);
  ASSERT_EQ(inserts.size(), 2u) << r.out;
  EXPECT_THAT(inserts[0], HasSubstr("'pp16'"));
  EXPECT_THAT(inserts[1], HasSubstr("'tg8'"));
  EXPECT_EQ(inserts[0].substr(inserts[0].size() - 2), ");");
}

// llama-bench's -oe (the rows again on stderr), --progress (each phase a line
// of stderr off a terminal), -nr (the weights as stored: JSON repack false),
// --no-warmup, --delay and -mmp 0 (the file read into memory: JSON use_mmap).
TEST(BenchCliTest, LlamaBenchRunHabits) {
  CliResult r = RunRotor({"bench", "-m", BundledModel(), "-p", "16", "-n", "0", "-r", "2", "-t",
                          "2", "-oe", "jsonl", "--progress", "-nr"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The markdown table: header, rule, pp16; -nr shows as llama-bench's
  // "repack" column, 0 (no -mmp 0: no "mmap" column).
  const std::vector<std::string> table = Lines(r.out);
  ASSERT_EQ(table.size(), 3u) << r.out;
  EXPECT_THAT(table[0], HasSubstr("| repack | test |"));
  EXPECT_THAT(table[0], ::testing::Not(HasSubstr("mmap")));
  EXPECT_THAT(table[2], HasSubstr("| 0 | pp16 |"));
  for (const char* phase : {"pp16 (t=2, kv=full): warm-up", "pp16 (t=2, kv=full): run 1/2",
                            "pp16 (t=2, kv=full): run 2/2"})
    EXPECT_THAT(r.err, HasSubstr(phase));
  std::vector<Json> rows;
  for (const std::string& line : Lines(r.err))
    if (line.front() == '{') rows.push_back(Json::parse(line));
  ASSERT_EQ(rows.size(), 1u) << r.err;
  EXPECT_EQ(rows[0]["test"], "pp16");
  EXPECT_EQ(rows[0]["repack"], false);

  CliResult quick = RunRotor({"bench",   "-m", BundledModel(), "-p",          "8,16",
                              "-n",      "0",  "-r",           "1",           "-t",
                              "1",       "-o", "jsonl",        "--no-warmup", "--progress",
                              "--delay", "1",  "-nr",          "0",           "-mmp",
                              "0"});
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_THAT(quick.err, HasSubstr("pp8 (t=1, kv=full): run 1/1"));
  EXPECT_THAT(quick.err, ::testing::Not(HasSubstr("warm-up")));
  const std::vector<std::string> lines = Lines(quick.out);
  ASSERT_EQ(lines.size(), 2u) << quick.out;
  for (const std::string& line : lines) {
    EXPECT_EQ(Json::parse(line)["repack"], true);
    EXPECT_EQ(Json::parse(line)["use_mmap"], false);
  }
  EXPECT_EQ(Json::parse(Lines(r.err).back())["use_mmap"], true);

  CliResult md = RunRotor({"bench", "-m", BundledModel(), "-p", "8", "-n", "0", "-r", "1", "-t",
                           "1", "--no-warmup", "-mmp", "0"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  const std::vector<std::string> md_lines = Lines(md.out);
  ASSERT_EQ(md_lines.size(), 3u) << md.out;
  EXPECT_THAT(md_lines[0], HasSubstr("| mmap | test |"));
  EXPECT_THAT(md_lines[0], ::testing::Not(HasSubstr("repack")));
  EXPECT_THAT(md_lines[2], HasSubstr("| 0 | pp8 |"));
}

// llama-bench's --list-devices: the CPU, its kernels' ISA, threads and
// memory; no model is read (a missing one is no error).
TEST(BenchCliTest, ListDevicesNamesTheCpu) {
  CliResult r = RunRotor({"bench", "--list-devices", "-m", "/nonexistent.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "Available devices:");
  EXPECT_THAT(lines[1], ::testing::StartsWith("  CPU: "));
  EXPECT_THAT(lines[1],
              ::testing::MatchesRegex(
                  ".*\\((scalar|avx2|avx512), [0-9]+ threads, [0-9]+ MiB, [0-9]+ MiB free\\)"));
}

TEST(BenchCliTest, SynthModelDepthAndExplicitTests) {
  TempDir dir;
  const std::string model = dir.File("s15m-2l-q8_0.gguf");
  CliResult synth = RunRotor({"synth", "-o", model, "--shape", "stories15m", "--layers", "2",
                              "--type", "q8_0", "--vocab-file", LlamaVocab(), "-t", "2"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  CliResult r = RunRotor({"bench", "-m", model, "--tests", "pp16,tg8,tg8@d32", "-r", "2", "-t", "2",
                          "--prefill-step", "7", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);
  for (const Json& row : rows) ExpectRow(row, 2, false);
  EXPECT_EQ(rows[0]["model_type"].get<std::string>().substr(0, 6), "llama ");
  EXPECT_THAT(rows[0]["model_type"].get<std::string>(), HasSubstr("Q8_0"));
  EXPECT_EQ(rows[2]["test"], "tg8 @ d32");
  EXPECT_EQ(rows[2]["n_depth"], 32);
  EXPECT_EQ(rows[2]["n_ctx"], 40);  // default context: depth + test tokens
  EXPECT_EQ(rows[2]["prefill_step"], 7);
}

TEST(BenchCliTest, ModelsRepeatedAndCommaSeparated) {
  const std::string m = BundledModel();
  CliResult r = RunRotor({"bench", "-m", m + "," + m, "-m", m, "-p", "8", "-n", "0", "-r", "1",
                          "-t", "1,2", "-o", "jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 6u) << r.out;  // 3 models x 2 thread counts x pp8
}

TEST(BenchCliTest, RooflineNumbersArePositiveAndFinite) {
  CliResult r = RunRotor({"bench", "-m", BundledModel(), "-p", "16", "-n", "8", "-r", "1", "-t",
                          "2", "--roofline", "--roofline-mib", "64", "--roofline-passes", "2",
                          "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  for (const Json& row : rows) ExpectRow(row, 1, /*roofline=*/true);
  EXPECT_THAT(r.err, HasSubstr("memory read"));
  // A generation row's percentage is taken against the ceiling the row
  // reports (the mean of the read passes between its repetitions; which
  // measurement it is cannot be told apart from outside, only that the
  // numbers agree and the mean is not above the best pass).
  for (const Json& row : rows) {
    if (row["n_gen"].get<int>() == 0) continue;
    EXPECT_EQ(row["roofline_bound"], "memory");
    EXPECT_GT(row["roofline_read_gbps"].get<double>(), 0.0);
    EXPECT_GE(row["roofline_read_best_gbps"].get<double>(),
              row["roofline_read_gbps"].get<double>() * (1 - 1e-12));
    EXPECT_NEAR(row["roofline_pct"].get<double>(),
                100.0 * row["gbps"].get<double>() / row["roofline_read_gbps"].get<double>(),
                1e-6 * row["roofline_pct"].get<double>());
  }

  // Batched decode of a q8_0 model: 64 tokens per weight read make the int8
  // peak the roof that binds (where the ISA has int8 dot products), taken
  // against the peak the row reports (the mean of the int8 passes between
  // its repetitions).
  TempDir dir;
  const std::string q8 = dir.File("s15m-2l-q8_0.gguf");
  CliResult synth = RunRotor({"synth", "-o", q8, "--shape", "stories15m", "--layers", "2",
                              "--type", "q8_0", "--vocab-file", LlamaVocab(), "-t", "2"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::vector<std::string> batched_args = {
      "bench", "-m", q8, "-p", "0", "-n", "2", "--batch", "64", "-r", "2", "-t", "2",
      "--roofline", "--roofline-mib", "64", "--roofline-passes", "2", "-o", "json"};
  CliResult batched = RunRotor(batched_args);
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  const Json brow = Json::parse(batched.out).at(0);
  EXPECT_EQ(brow["n_seq"], 64);
  EXPECT_TRUE(Positive(brow["gflops"])) << brow;
  EXPECT_TRUE(Positive(brow["roofline_pct"])) << brow;
  if (!brow["roofline_int8_gops"].is_null()) {
    EXPECT_TRUE(Positive(brow["roofline_int8_gops"])) << brow;
    EXPECT_EQ(brow["roofline_bound"], "int8") << brow;
    EXPECT_NEAR(brow["roofline_pct"].get<double>(),
                100.0 * brow["gflops"].get<double>() / brow["roofline_int8_gops"].get<double>(),
                1e-6 * brow["roofline_pct"].get<double>());
  }

  CliResult md = RunRotor({"bench", "-m", BundledModel(), "-p", "0", "-n", "8", "-r", "1", "-t",
                           "1", "--roofline", "--roofline-mib", "64", "--roofline-passes", "2"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_EQ(md.out.rfind("roofline, 1 thread: memory read ", 0), 0u) << md.out;
  EXPECT_THAT(md.out, HasSubstr("| roofline |"));
}

TEST(BenchCliTest, UnavailablePolicyIsReportedAndTheSweepGoesOn) {
  CliResult r = RunRotor({"bench", "-m", BundledModel(), "--kv", "full,sink", "--kv-size", "32",
                          "-p", "16", "-n", "0", "-r", "1", "-t", "1", "-o", "json"});
  const Json rows = Json::parse(r.out);  // valid JSON either way
  ASSERT_GE(rows.size(), 1u);
  EXPECT_EQ(rows[0]["kv"], "full");
  if (r.exit_code != 0) {
    EXPECT_THAT(r.err, HasSubstr("sink"));
    EXPECT_THAT(r.err, HasSubstr("skipped"));
    EXPECT_EQ(rows.size(), 1u);
  } else {
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[1]["kv"], "sink");
    EXPECT_EQ(rows[1]["kv_size"], 32);
  }
}

// --kv-type sweeps the cache's element type: llama-bench's type_k / type_v
// fields, a type_kv column in the table, and the KV bytes of a deep decode
// counted at the type's size (the f16 row's GB/s is below the f32 row's at
// the same speed; here: bytes per token, from gbps / t/s).
TEST(BenchCliTest, KvTypeSweep) {
  CliResult r = RunRotor({"bench", "-m", BundledModel(), "--kv-type", "f32,f16", "-p", "0", "-n",
                          "4", "-d", "200", "-r", "1", "-t", "1", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["type_k"], "f32");
  EXPECT_EQ(rows[0]["type_v"], "f32");
  EXPECT_EQ(rows[1]["type_k"], "f16");
  EXPECT_EQ(rows[1]["type_v"], "f16");
  auto bytes_per_token = [](const Json& row) {
    return row["gbps"].get<double>() * 1e9 / row["avg_ts"].get<double>();
  };
  EXPECT_LT(bytes_per_token(rows[1]), bytes_per_token(rows[0]));
  // The K and V bytes of a token: stories260K, 5 layers x 4 kv heads x 8.
  EXPECT_EQ(rows[0]["kv_bytes_per_token"], 5 * 4 * 2 * 8 * 4);
  EXPECT_EQ(rows[1]["kv_bytes_per_token"], 5 * 4 * 2 * 8 * 2);
  // The type column shows when a type is not the default (f16).
  CliResult md = RunRotor({"bench", "-m", BundledModel(), "--kv-type", "q8_0", "-p", "0", "-n", "4",
                           "-r", "1", "-t", "1", "-o", "jsonl"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  const Json q8 = Json::parse(md.out);
  EXPECT_EQ(q8["type_k"], "q8_0");
  EXPECT_EQ(q8["kv_bytes_per_token"], 5 * 4 * 2 * 10);  // one block of 8: f16 d + 8 int8
  md = RunRotor({"bench", "-m", BundledModel(), "-ctk", "q8_0", "-ctv", "q4_0", "-p", "0", "-n", "4",
                 "-r", "1", "-t", "1"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("type_kv"));
  // Rotated and with key offsets by default.
  EXPECT_THAT(md.out, HasSubstr("| q8_0/q4_0+rot+koff |"));
  EXPECT_EQ(q8["kv_k_offset"], true);
  md = RunRotor({"bench", "-m", BundledModel(), "-ctk", "f16", "-ctv", "q4_0", "-p", "0", "-n", "4",
                 "-r", "1", "-t", "1"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("| f16/q4_0+rot |"));  // offsets are the keys' alone
}

// --interleave: every test warms up, then round k fills each test's depth,
// in the list's order on odd rounds and reversed on even ones, and takes the
// tests' steps in turn; the rows keep the list's order, each with all its
// samples, and say they were paired.
TEST(BenchCliTest, InterleaveRunsRepetitionsInRounds) {
  CliResult r = RunRotor({"bench", "-m", BundledModel(), "--kv-type", "f16,q8_0,q4_0", "--tests",
                          "tg4@d40", "-r", "3", "-t", "1", "--interleave", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);
  const char* types[] = {"f16", "q8_0", "q4_0"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i]["type_k"], types[i]);
    EXPECT_EQ(rows[i]["samples_ns"].size(), 3u);
    EXPECT_EQ(rows[i]["interleave"], true);
    EXPECT_EQ(rows[i]["peak_rss_scope"], "process");
  }
  std::vector<std::string> order;  // "case/round" from the progress lines
  const std::regex line(R"(bench \[(\d)/3\].*, round (\d)/3)");
  for (const std::string& l : Lines(r.err)) {
    std::smatch mt;
    if (std::regex_search(l, mt, line)) order.push_back(mt[1].str() + "/" + mt[2].str());
  }
  EXPECT_THAT(order,
              ::testing::ElementsAre("1/1", "2/1", "3/1", "3/2", "2/2", "1/2", "1/3", "2/3", "3/3"))
      << r.err;
  // Without the flag: one test after the other, each with its own peak.
  CliResult plain = RunRotor(
      {"bench", "-m", BundledModel(), "--tests", "tg4@d40", "-r", "2", "-t", "1", "-o", "jsonl"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(Json::parse(plain.out)["interleave"], false);
  EXPECT_THAT(plain.err, ::testing::Not(HasSubstr("round")));
}

struct BenchError {
  std::string name;
  std::vector<std::string> args;
  std::string message;  // a part of stderr
};

class BenchErrorTest : public ::testing::TestWithParam<BenchError> {};

TEST_P(BenchErrorTest, ClearMessageAndNonZeroExit) {
  std::vector<std::string> args = {"bench", "-t", "1"};
  for (const std::string& a : GetParam().args) args.push_back(a);
  if (std::find(args.begin(), args.end(), "-m") == args.end())
    args.insert(args.end(), {"-m", BundledModel()});
  CliResult r = RunRotor(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, BenchErrorTest,
    ::testing::Values(BenchError{"MissingModel",
                                 {"-m", "/nonexistent-dir/model.gguf"},
                                 "/nonexistent-dir/model.gguf"},
                      BenchError{"UnknownFlag", {"--no-such-flag"}, "--no-such-flag"},
                      BenchError{"NegativeGen", {"-n", "-5"}, "-5"},
                      BenchError{"ZeroRepetitions", {"-r", "0"}, "--repetitions"},
                      BenchError{"UnknownFormat", {"-o", "xml"}, "xml"},
                      BenchError{"DepthLargerThanContext",
                                 {"-c", "64", "-d", "128", "-p", "16", "-n", "0"},
                                 "more than -c 64"},
                      BenchError{"NoTests", {"-p", "0", "-n", "0"}, "no tests"},
                      BenchError{"BadTestSpec", {"--tests", "tg8@x"}, "tg8@x"},
                      BenchError{"BadKvType", {"--kv-type", "q8"}, "q8"},
                      BenchError{"UnknownErrFormat", {"-oe", "xml"}, "xml"},
                      BenchError{"NoRepackNotABool", {"-nr", "2"}, "-nr '2' is not 0 or 1"},
                      BenchError{"NoRepackSweep", {"-nr", "0,1"}, "two runs"},
                      BenchError{"NegativeDelay", {"--delay", "-1"}, "--delay"},
                      BenchError{"MmapNotABool", {"-mmp", "2"}, "-mmp '2' is not 0 or 1"}),
    [](const ::testing::TestParamInfo<BenchError>& info) { return info.param.name; });

}  // namespace
}  // namespace rotor::testing
