#include "cli_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rotor::cli {

int Fail(const Status& status) {
  fmt::print(stderr, "rotor: error: {}\n", status.message());
  return 1;
}

void AddEngineOptions(CLI::App* app, EngineOptions* o) {
  o->model_path = kDefaultModel;
  app->add_option("-m,--model", o->model_path, "GGUF model file")->capture_default_str();
  app->add_option("-t,--threads", o->n_threads, "threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  app->add_option("-c,--ctx-size", o->n_ctx, "context size per sequence (0 = the model's)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option_function<std::string>(
         "--kv-memory",
         [o](const std::string& v) {
           Result<int64_t> bytes = ParseKvMemory(v);
           if (!bytes.ok()) throw CLI::ValidationError(bytes.message());
           o->kv_memory_bytes = *bytes;
         },
         "K/V memory of all sequences: MiB (4096), or a fraction (0.25) or percentage (25%) of "
         "the machine's memory (default: the sequences' full contexts, at most half the memory)")
      ->type_name("SIZE");
  app->add_flag_callback(
      "--no-prefix-cache", [o] { o->prefix_cache = false; },
      "do not reuse cached prompt prefixes (nor keep finished prompts cached)");
}

void AddSamplingOptions(CLI::App* app, SamplingParams* p) {
  app->add_option("--temp", p->temperature, "temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-k", p->top_k, "top-k (0 = off)")->capture_default_str();
  app->add_option("--top-p", p->top_p, "top-p (1 = off)")->capture_default_str();
  app->add_option("--min-p", p->min_p, "min-p (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", p->repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  app->add_option("--repeat-last-n", p->repeat_last_n,
                  "tokens the penalty looks back over (0 = off, -1 = all)")
      ->capture_default_str();
  app->add_option("-s,--seed", p->seed, "RNG seed (default: random)");
}

// Every KV option from the one table: its flag, its help with choices and
// default, and a value checked by KvConfig::Set (whose error names the flag).
// CLI11 runs the callbacks in the table's order, so the policy comes first.
void AddKvOptions(CLI::App* app, KvConfig* kv) {
  for (const KvOptionSpec& spec : KvOptions()) {
    std::string help(spec.help);
    if (!spec.is_int) help += ": " + KvChoicesText(spec.id);
    help += fmt::format(" (default: {})", spec.default_text);
    const KvOpt id = spec.id;
    std::string names(spec.flag);
    if (!spec.alias.empty()) names += "," + std::string(spec.alias);
    app->add_option_function<std::string>(
           names,
           [kv, id](const std::string& value) {
             if (Status s = kv->Set(id, value, KvSpelling::kFlag); !s.ok())
               throw CLI::ValidationError(s.message());
           },
           help)
        ->type_name(spec.is_int ? "INT" : "NAME");
  }
}

void AddKvListOptions(CLI::App* app, KvLists* lists) {
  for (const KvOptionSpec& spec : KvOptions()) {
    std::string help = fmt::format("{}, comma-separated", spec.help);
    if (!spec.is_int) help += ": " + KvChoicesText(spec.id);
    help += fmt::format(" (default: {})", spec.default_text);
    std::string names(spec.flag);
    if (!spec.alias.empty()) names += "," + std::string(spec.alias);
    app->add_option(names, (*lists)[spec.id], help)
        ->delimiter(',')
        ->type_name(spec.is_int ? "INT,..." : "NAME,...");
  }
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errorf("cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Errorf("cannot read '{}'", path);
  return ss.str();
}

std::string HumanBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", bytes / double(1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / double(1 << 20));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace rotor::cli
