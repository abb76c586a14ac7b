#include "bench_runner/bench_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>

#include "gguf/gguf.h"
#include "model/quantize_rules.h"
#include "ops/matmul.h"
#include "tensor/dtype.h"

namespace rotor::bench {
namespace {

// "260K", "134M", "1.2B".
std::string ParamsLabel(int64_t n) {
  if (n < 1'000'000) return fmt::format("{}K", (n + 500) / 1000);
  if (n < 1'000'000'000) return fmt::format("{}M", (n + 500'000) / 1'000'000);
  return fmt::format("{:.1f}B", n / 1e9);
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Reads a decimal number at s[*i]; false if there is none or it is too large.
bool ReadNumber(const std::string& s, size_t* i, int* out) {
  const size_t start = *i;
  int64_t v = 0;
  while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i]))) {
    v = v * 10 + (s[*i] - '0');
    if (v > (1 << 24)) return false;
    ++*i;
  }
  *out = static_cast<int>(v);
  return *i > start;
}

void SkipSpaces(const std::string& s, size_t* i) {
  while (*i < s.size() && s[*i] == ' ') ++*i;
}

Result<std::vector<BenchTest>> ExpandTests(const BenchArgs& a) {
  std::vector<BenchTest> tests;
  if (!a.tests.empty()) {
    for (const std::string& spec : a.tests) {
      ASSIGN_OR_RETURN(BenchTest t, ParseBenchTest(spec));
      tests.push_back(t);
    }
    return tests;
  }
  for (int d : a.n_depth) {
    for (int p : a.n_prompt)
      if (p > 0) tests.push_back(BenchTest{.n_prompt = p, .n_depth = d});
    for (int n : a.n_gen)
      if (n > 0) tests.push_back(BenchTest{.n_gen = n, .n_depth = d});
    for (const auto& [p, n] : a.n_pg)
      if (p > 0 || n > 0) tests.push_back(BenchTest{.n_prompt = p, .n_gen = n, .n_depth = d});
  }
  if (tests.empty()) return Status::Error("bench: no tests: every -p, -n and -pg is 0");
  return tests;
}

}  // namespace

std::string BenchTest::Name() const {
  std::string name = n_prompt > 0 && n_gen > 0 ? fmt::format("pp{}+tg{}", n_prompt, n_gen)
                     : n_prompt > 0            ? fmt::format("pp{}", n_prompt)
                                               : fmt::format("tg{}", n_gen);
  if (n_depth > 0) name += fmt::format(" @ d{}", n_depth);
  return name;
}

Result<BenchTest> ParseBenchTest(const std::string& spec) {
  auto bad = [&] {
    return Errorf("bench: --tests '{}' is not a test like pp512, tg128 or tg128@d4096", spec);
  };
  BenchTest t;
  size_t i = 2;
  int n = 0;
  if (spec.size() < 3 || (spec.compare(0, 2, "pp") != 0 && spec.compare(0, 2, "tg") != 0) ||
      !ReadNumber(spec, &i, &n) || n <= 0)
    return bad();
  (spec[0] == 'p' ? t.n_prompt : t.n_gen) = n;
  SkipSpaces(spec, &i);
  if (i < spec.size()) {
    if (spec[i] != '@') return bad();
    ++i;
    SkipSpaces(spec, &i);
    if (i < spec.size() && spec[i] == 'd') ++i;
    if (!ReadNumber(spec, &i, &t.n_depth) || i != spec.size()) return bad();
  }
  return t;
}

Result<BenchModel> LoadBenchModel(const std::string& path, bool repack, bool mmap) {
  BenchModel m;
  m.path = path;
  m.repack = repack;
  m.mmap = mmap;
  // Packed (row-interleaved) copies are made when the model's tests start, so
  // one model's copies never count in another's peak RSS.
  ASSIGN_OR_RETURN(m.model,
                   Model::Load(path, /*pack_matrices=*/false, GgufOpenOptions{.mmap = mmap}));
  const Model& model = *m.model;
  const ModelConfig& c = model.config();
  for (const GgufTensor& t : model.file().tensors())
    m.size_bytes += static_cast<int64_t>(t.n_bytes);
  m.n_params = model.n_params();
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = model.layer(il);
    for (const ops::Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      m.layer_matmul_params += w->k * w->n;
  }
  m.output_matmul_params = model.output().k * model.output().n;
  // q8_0 / q4_0 run int8 dot products on every SIMD ISA; the K-quants with
  // row-interleaved copies (q3_K .. q6_K) too.
  const std::optional<DType> main_type = ParseDType(model.type_name());
  m.int8_matmul = main_type && (*main_type == DType::kQ8_0 || *main_type == DType::kQ4_0 ||
                                (repack && ops::PackingHelps(*main_type)));
  // The file type as llama-bench labels it: general.file_type's name, or
  // the most common matrix type, "(guessed)", when the key is absent.
  const Result<int64_t> file_type = model.file().GetIntOr("general.file_type", -1);
  std::string type_label = Upper(model.type_name()) + " (guessed)";
  if (file_type.ok() && *file_type >= 0 && *file_type <= UINT32_MAX &&
      !FileTypeName(static_cast<uint32_t>(*file_type)).empty())
    type_label = std::string(FileTypeName(static_cast<uint32_t>(*file_type)));
  m.type = fmt::format("{} {} {}", c.arch.empty() ? "llama" : c.arch, ParamsLabel(m.n_params),
                       type_label);
  return m;
}

Result<int> ResolveContext(int asked, const BenchTest& test, int kv_size) {
  const int64_t need = test.Tokens();
  if (asked > 0) {
    if (need > asked)
      return Errorf(
          "bench: {} needs a context of {} tokens (depth {} + {} test tokens), more than -c {} "
          "(raise -c or lower -d)",
          test.Name(), need, test.n_depth, need - test.n_depth, asked);
    return asked;
  }
  return static_cast<int>(std::max<int64_t>({need, kv_size, 1}));
}

Result<BenchFormat> ParseBenchFormat(const std::string& s) {
  static const std::map<std::string, BenchFormat> kFormats = {{"md", BenchFormat::kMarkdown},
                                                              {"json", BenchFormat::kJson},
                                                              {"jsonl", BenchFormat::kJsonl},
                                                              {"csv", BenchFormat::kCsv},
                                                              {"sql", BenchFormat::kSql}};
  auto it = kFormats.find(s);
  if (it == kFormats.end())
    return Errorf("bench: -o '{}' is not one of md, json, jsonl, csv, sql", s);
  return it->second;
}

Result<std::vector<BenchCase>> ExpandBenchCases(const BenchArgs& a,
                                                const std::vector<BenchModel>& models) {
  if (models.empty()) return Status::Error("bench: no model (-m)");
  if (a.repetitions < 1)
    return Errorf("bench: -r {}: repetitions must be at least 1", a.repetitions);
  if (a.threads.empty()) return Status::Error("bench: no thread count (-t)");
  for (int t : a.threads)
    if (t < 1) return Errorf("bench: -t {} must be at least 1", t);
  for (const auto& [flag, list] :
       {std::pair{"-p", &a.n_prompt}, std::pair{"-n", &a.n_gen}, std::pair{"-d", &a.n_depth},
        std::pair{"--prefill-step", &a.prefill_step},
        std::pair{"-c", &a.n_ctx}, std::pair{"--batch", &a.batch}})
    for (int v : *list)
      if (v < 0) return Errorf("bench: {} {} must not be negative", flag, v);
  Result<std::vector<KvConfig>> kvs = ExpandKvLists(a.kv);
  if (!kvs.ok()) return kvs.status().WithContext("bench");
  for (int b : a.batch)
    if (b < 1) return Errorf("bench: --batch {} must be at least 1", b);
  ASSIGN_OR_RETURN(std::vector<BenchTest> tests, ExpandTests(a));

  std::vector<BenchCase> cases;
  for (int mi = 0; mi < static_cast<int>(models.size()); ++mi) {
    for (int threads : a.threads)
      for (const KvConfig& kv : *kvs)
        for (int step : a.prefill_step)
          for (int ctx : a.n_ctx)
            for (int n_seq : a.batch)
              for (const BenchTest& test : tests) {
                BenchCase c;
                c.n_seq = n_seq;
                c.shared_prefix = a.shared_prefix;
                c.interleave = a.interleave;
                c.warmup = a.warmup;
                c.model = mi;
                c.threads = threads;
                c.kv = kv;
                c.prefill_step = step;
                c.test = test;
                ASSIGN_OR_RETURN(c.n_ctx, ResolveContext(ctx, test, kv.size));
                Result<KvConfig> resolved = ResolveKvConfig(c.kv, models[mi].model->kv_shape(c.n_ctx));
                if (!resolved.ok())
                  return resolved.status().WithContext(fmt::format(
                      "bench: {} {} (-c {})", models[mi].path, test.Name(), c.n_ctx));
                cases.push_back(c);
              }
  }
  return cases;
}

}  // namespace rotor::bench
