// rotor bench: the flags, and their expansion into test cases. Every list flag
// is a sweep dimension; the cases are the cartesian product, in the order
// model > threads > kv > kv-size > rope-k > kv-type > prefill-step > ctx > batch > depth > test
// (pp tests before tg tests), as llama-bench orders its instances.
// Each KV option applies to the policies that use it: `full` always holds the
// whole context, so it is run once whatever the --kv-size list says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"
#include "kv/kv_lists.h"
#include "model/model.h"

namespace rotor::bench {

enum class BenchFormat { kMarkdown, kJson, kJsonl, kCsv, kSql };

// The flags as given (lists keep the user's order; duplicates are kept).
struct BenchArgs {
  std::vector<std::string> models;
  std::vector<int> n_prompt = {512};
  std::vector<int> n_gen = {128};
  std::vector<int> n_depth = {0};
  // llama-bench's -pg PP,TG: a prompt of PP tokens, then TG generated ones.
  std::vector<std::pair<int, int>> n_pg;
  std::vector<std::string> tests;  // explicit "pp512", "tg128@d4096": replaces -p/-n/-d
  int repetitions = 5;
  std::vector<int> threads;  // empty: HardwareThreads()
  KvLists kv;  // every KV option as a list (kv/kv_lists.h)
  std::vector<int> prefill_step = {512};
  std::vector<int> n_ctx = {0};  // 0: what the test needs (see ResolveContext)
  std::vector<int> batch = {1};  // sequences decoded together (n_seq)
  // The sequences' depth is one shared prefix (llama-batched-bench's -pps):
  // the first computes it, the others take its blocks from the prefix cache.
  bool shared_prefix = false;
  // Each model's cases run their repetitions in rounds: round k fills every
  // case's depth, in the list's order on odd rounds and the reverse on even
  // ones, then takes the cases' timed steps in turn (BenchCaseRun; peak RSS
  // is then the process's).
  bool interleave = false;
  std::string output = "md";
  std::string output_err;  // llama-bench's -oe: the rows again on stderr in this format ("": none)
  bool progress = false;   // llama-bench's --progress: each test's phases on stderr, a line each
  int delay = 0;           // llama-bench's --delay: seconds of sleep before each test
  bool no_repack = false;  // llama-bench's -nr: the weights as stored (no row-interleaved copies)
  bool warmup = true;      // llama-bench's --no-warmup sets false
  bool mmap = true;        // llama-bench's -mmp 0: the models read into memory instead
  bool list_devices = false;  // llama-bench's --list-devices: print the CPU, then exit
  bool roofline = false;
  int roofline_mib = 1024;
  int roofline_passes = 10;  // RooflineOptions::passes
  uint64_t seed = 1234;
};

// One measurement: n_prompt tokens prefilled (pp), n_gen tokens decoded one
// at a time (tg), or both, the prompt first (pg, llama-bench's -pg); each
// after n_depth tokens were put in the cache untimed.
struct BenchTest {
  int n_prompt = 0;
  int n_gen = 0;
  int n_depth = 0;
  // "pp512", "tg128", "pp512+tg128", "tg128 @ d4096".
  std::string Name() const;
  // Tokens the cache must hold at the end: depth + the test's tokens.
  int64_t Tokens() const { return int64_t{n_depth} + n_prompt + n_gen; }
};

// Parses "pp512", "tg128", "tg128@d4096" (also "tg128 @ d4096").
Result<BenchTest> ParseBenchTest(const std::string& spec);

// A loaded model with what the reports need.
struct BenchModel {
  std::string path;
  std::unique_ptr<Model> model;
  std::string type;        // "llama 110M Q8_0": architecture, parameter count, main weight type
  int64_t size_bytes = 0;  // bytes of all tensors
  int64_t n_params = 0;
  int64_t layer_matmul_params = 0;   // elements of every block's projection matrices
  int64_t output_matmul_params = 0;  // elements of the output (logits) matrix
  bool int8_matmul = false;          // main weight type q8_0/q4_0 (or packed K-quant): int8 dot products
  bool repack = true;                // its tests run on row-interleaved copies (PackMatrices)
  bool mmap = true;                  // the file is mapped (false: read into memory)
};

// repack false (llama-bench's -nr): the tests run on the weights as stored;
// mmap false (-mmp 0): the file is read into memory.
Result<BenchModel> LoadBenchModel(const std::string& path, bool repack = true, bool mmap = true);

struct BenchCase {
  int model = 0;  // index into the loaded models
  int threads = 1;
  KvConfig kv;             // policy, size (0 = the context) and rope_k as asked
  int n_ctx = 0;           // resolved
  int prefill_step = 512;  // 0 = the whole prompt (and the whole depth fill) in one pass
  // Sequences run together, each with its own cache at the test's depth: pp
  // prefills all their prompts chunk by chunk in shared passes, tg decodes one
  // token of every sequence per pass (Forward::Decode). t/s is the aggregate.
  int n_seq = 1;
  bool shared_prefix = false;  // BenchArgs::shared_prefix
  bool interleave = false;     // BenchArgs::interleave: its samples are paired by round
  bool warmup = true;          // BenchArgs::warmup: one untimed run of the test first
  BenchTest test;
};

// The context of one case: -c when given (an error if the test needs more),
// otherwise exactly what the test needs (depth + its tokens), at least --kv-size.
Result<int> ResolveContext(int asked, const BenchTest& test, int kv_size);

// Validates the flags and expands them into cases; checks every case's KV
// configuration against its model before anything runs.
Result<std::vector<BenchCase>> ExpandBenchCases(const BenchArgs& args,
                                                const std::vector<BenchModel>& models);

Result<BenchFormat> ParseBenchFormat(const std::string& s);

}  // namespace rotor::bench
