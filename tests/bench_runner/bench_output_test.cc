#include "bench_runner/bench_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace rotor::bench {
namespace {
namespace bench_output_test {

using ::testing::HasSubstr;

std::string Model() { return std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf"; }

// A finished tg case with made-up samples, written in a format to a string.
class BenchOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<BenchModel> m = LoadBenchModel(Model());
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    case_.threads = 2;
    case_.n_ctx = 64;
    case_.test = BenchTest{.n_prompt = 0, .n_gen = 10, .n_depth = 0};
    result_.samples_ns = {1'000'000, 1'000'000};  // 10 tokens in 1 ms: 10000 t/s
    result_.kv = case_.kv;
    result_.kv.size = 64;
    result_.work = BenchWork{.flops = 2e6, .bytes = 4e6};
    result_.peak_rss_bytes = 1 << 20;
  }

  std::string Write(BenchFormat format) {
    char* buf = nullptr;
    size_t size = 0;
    std::FILE* f = open_memstream(&buf, &size);
    const BenchRow row = MakeBenchRow(model_, case_, result_, nullptr);
    std::unique_ptr<BenchWriter> w = MakeBenchWriter(format, BenchColumns{}, f);
    w->Begin({});
    w->Row(row);
    w->Row(row);
    w->End();
    std::fclose(f);
    std::string out(buf, size);
    std::free(buf);
    return out;
  }

  BenchModel model_;
  BenchCase case_;
  BenchResult result_;
};

TEST_F(BenchOutputTest, RowRatesComeFromTheWorkAndTheMeanTime) {
  const BenchRow row = MakeBenchRow(model_, case_, result_, nullptr);
  EXPECT_DOUBLE_EQ(row.stats.avg_ts, 10000);
  EXPECT_DOUBLE_EQ(row.gbps, 4e6 / 1e-3 / 1e9);
  EXPECT_DOUBLE_EQ(row.gflops, 2e6 / 1e-3 / 1e9);
  EXPECT_FALSE(row.roofline_pct.has_value());  // no roofline measured
}

// A generation row against whichever roof binds it (the larger ratio); a
// prompt row against the arithmetic peak. The row: 4 GB/s, 2 GFLOP/s.
TEST_F(BenchOutputTest, RooflineTakesTheRoofThatBinds) {
  Roofline roof;
  roof.read_gbps = 8, roof.fma_gflops = 100;  // memory 50%, f32 2%
  BenchRow row = MakeBenchRow(model_, case_, result_, &roof);
  EXPECT_STREQ(row.roofline_bound, "memory");
  EXPECT_DOUBLE_EQ(*row.roofline_pct, 50);
  roof.read_gbps = 100, roof.fma_gflops = 2.5;  // memory 4%, f32 80% (a batched step)
  row = MakeBenchRow(model_, case_, result_, &roof);
  EXPECT_STREQ(row.roofline_bound, "f32");
  EXPECT_DOUBLE_EQ(*row.roofline_pct, 80);
  model_.int8_matmul = true, roof.int8_gops = 4;  // int8 models: the int8 peak, 50%
  row = MakeBenchRow(model_, case_, result_, &roof);
  EXPECT_STREQ(row.roofline_bound, "int8");
  EXPECT_DOUBLE_EQ(*row.roofline_pct, 50);
  case_.test = BenchTest{.n_prompt = 10, .n_gen = 0, .n_depth = 0};  // a prompt row
  roof.read_gbps = 1;  // memory would be 400%: a prompt row is never compared with it
  row = MakeBenchRow(model_, case_, result_, &roof);
  EXPECT_STREQ(row.roofline_bound, "int8");
  EXPECT_DOUBLE_EQ(*row.roofline_pct, 50);
}

TEST_F(BenchOutputTest, JsonIsAnArrayOfObjectsWithEveryField) {
  const nlohmann::json j = nlohmann::json::parse(Write(BenchFormat::kJson));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  for (const std::string& field : BenchFieldNames()) EXPECT_TRUE(j[0].contains(field)) << field;
  // And CSV / SQL have a column for every key (a --kv-rotate sweep's rows
  // once differed in JSON only).
  const std::vector<std::string>& names = BenchFieldNames();
  for (const auto& [key, value] : j[0].items())
    EXPECT_NE(std::find(names.begin(), names.end(), key), names.end()) << key;
  EXPECT_EQ(j[0].size(), names.size());
  EXPECT_EQ(j[0]["n_gen"], 10);
  EXPECT_EQ(j[0]["n_threads"], 2);
}

TEST_F(BenchOutputTest, JsonLinesAndCsvHaveOneLinePerRow) {
  std::istringstream jsonl(Write(BenchFormat::kJsonl));
  int lines = 0;
  for (std::string line; std::getline(jsonl, line); ++lines)
    EXPECT_TRUE(nlohmann::json::parse(line).is_object()) << line;
  EXPECT_EQ(lines, 2);

  model_.path = "/models/a\"b.gguf";  // CSV doubles the quote
  std::istringstream csv(Write(BenchFormat::kCsv));
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u);  // header and two rows
  EXPECT_EQ(rows[0].rfind(BenchFieldNames()[0], 0), 0u) << rows[0];
  EXPECT_EQ(rows[1], rows[2]);
  EXPECT_THAT(rows[1], HasSubstr(",\"/models/a\"\"b.gguf\","));
}

// Splits "a, 'b, c', NULL" at the commas outside quotes ('' inside a quote
// is one quote).
std::vector<std::string> SqlValues(const std::string& list) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const char ch = list[i];
    if (ch == '\'') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      out.emplace_back();
      if (i + 1 < list.size() && list[i + 1] == ' ') ++i;
      continue;
    }
    out.back().push_back(ch);
  }
  return out;
}

// llama-bench's -o sql: a table of every field with its type, then one INSERT
// per row with a value per field; a quote in a string is doubled.
TEST_F(BenchOutputTest, SqlCreatesTheTableThenInsertsEachRow) {
  model_.path = "/models/it's.gguf";
  const std::string sql = Write(BenchFormat::kSql);
  std::istringstream in(sql);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const std::vector<std::string>& fields = BenchFieldNames();
  ASSERT_EQ(lines.size(), fields.size() + 5);  // CREATE, the fields, ");", a blank, 2 INSERTs
  EXPECT_EQ(lines[0], "CREATE TABLE IF NOT EXISTS test (");
  for (size_t i = 0; i < fields.size(); ++i)
    EXPECT_EQ(lines[1 + i].rfind("  " + fields[i] + " ", 0), 0u) << lines[1 + i];
  EXPECT_THAT(sql, HasSubstr("  model_filename TEXT,\n"));
  EXPECT_THAT(sql, HasSubstr("  n_gen INTEGER,\n"));
  EXPECT_THAT(sql, HasSubstr("  avg_ts REAL,\n"));
  EXPECT_THAT(sql, HasSubstr("  repack INTEGER,\n"));
  EXPECT_THAT(sql, HasSubstr("  use_mmap INTEGER,\n"));
  EXPECT_EQ(lines[fields.size()], "  kv_bytes_per_token INTEGER");  // the last: no comma
  EXPECT_EQ(lines[fields.size() + 1], ");");
  EXPECT_EQ(lines[fields.size() + 2], "");
  const std::string& insert = lines[fields.size() + 3];
  EXPECT_EQ(insert, lines[fields.size() + 4]);
  const std::string head = "INSERT INTO test (" + fields[0] + ", ";
  ASSERT_EQ(insert.rfind(head, 0), 0u) << insert;
  const size_t open = insert.find(") VALUES (");
  ASSERT_NE(open, std::string::npos);
  ASSERT_EQ(insert.substr(insert.size() - 2), ");");
  const std::vector<std::string> values =
      SqlValues(insert.substr(open + 10, insert.size() - open - 12));
  ASSERT_EQ(values.size(), fields.size()) << insert;
  auto value = [&](const std::string& field) {
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i] == field) return values[i];
    return std::string("(no such field)");
  };
  EXPECT_EQ(value("model_filename"), "'/models/it''s.gguf'");
  EXPECT_EQ(value("n_gen"), "10");
  EXPECT_EQ(value("avg_ts"), "10000.0");
  EXPECT_EQ(value("samples_ns"), "'1000000;1000000'");
  EXPECT_EQ(value("roofline_pct"), "NULL");  // no roofline measured
  EXPECT_EQ(value("repack"), "1");
  EXPECT_EQ(value("interleave"), "0");
  EXPECT_EQ(value("use_mmap"), "1");
}

// Each column's SQL type is its JSON value's: strings and the sample lists
// TEXT, fractions REAL, counts and flags INTEGER (a row with a roofline, so
// that no value is null).
TEST_F(BenchOutputTest, SqlColumnTypesAreTheJsonValuesTypes) {
  Roofline roof;
  roof.read_gbps = 8, roof.read_best_gbps = 9, roof.fma_gflops = 100;
  roof.int8_gops = 400, roof.matmul_gflops = 90;
  model_.int8_matmul = true;
  const nlohmann::ordered_json j = BenchRowJson(MakeBenchRow(model_, case_, result_, &roof));
  std::istringstream in(Write(BenchFormat::kSql));
  std::map<std::string, std::string> types;  // column -> SQL type
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  ", 0) != 0) continue;
    const size_t space = line.find(' ', 2);
    std::string type = line.substr(space + 1);
    if (type.back() == ',') type.pop_back();
    types[line.substr(2, space - 2)] = type;
  }
  ASSERT_EQ(types.size(), BenchFieldNames().size());
  for (const std::string& field : BenchFieldNames()) {
    const nlohmann::ordered_json& v = j.at(field);
    ASSERT_FALSE(v.is_null()) << field;
    const char* want = v.is_string() || v.is_array() ? "TEXT"
                       : v.is_number_float()         ? "REAL"
                                                     : "INTEGER";
    EXPECT_EQ(types[field], want) << field << " = " << v.dump();
  }
}

TEST_F(BenchOutputTest, MarkdownTableNamesTheTest) {
  const std::string md = Write(BenchFormat::kMarkdown);
  EXPECT_THAT(md, HasSubstr("| model |"));
  EXPECT_THAT(md, HasSubstr("tg10"));
  EXPECT_THAT(md, HasSubstr("10000"));
}

}  // namespace bench_output_test
}  // namespace
}  // namespace rotor::bench
