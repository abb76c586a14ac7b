#include "cli_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/file_read.h"
#include "grammar/grammar.h"
#include "sampling/sampler.h"

namespace rotor::cli {

std::string FindBundledFile(const std::string& relative) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(relative, ec)) return relative;
  std::vector<fs::path> places;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    places.push_back(exe.parent_path().parent_path() / relative);
    places.push_back(exe.parent_path().parent_path() / "share" / "rotor" / relative);
  }
#ifdef ROTOR_SOURCE_DIR
  places.push_back(fs::path(ROTOR_SOURCE_DIR) / relative);
#endif
  for (const fs::path& p : places)
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  return relative;
}

std::string DefaultModelPath() { return FindBundledFile(kDefaultModel); }

int Fail(const Status& status) {
  fmt::print(stderr, "rotor: error: {}\n", status.message());
  return 1;
}

void AddEngineOptions(CLI::App* app, EngineOptions* o) {
  o->model_path = DefaultModelPath();
  app->add_option("-m,--model", o->model_path, "GGUF model file (default: the bundled model)");
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
  app->add_flag_callback(
      "--no-mmap", [o] { o->open.mmap = false; },
      "read the model into memory instead of mapping the file (as llama.cpp's --no-mmap)");
  app->add_flag_callback(
      "--mlock", [o] { o->open.mlock = true; },
      "lock the model in memory so it is never paged out (a failure is a warning)");
  AddLlamaCppNotes(app);
}

void AddLlamaCppNotes(CLI::App* app) {
  app->add_option_function<std::string>(
         "--n-gpu-layers",
         [](const std::string& v) {
           fmt::print(stderr, "rotor: -ngl {}: rotor runs on the CPU; there are no GPU layers\n", v);
         },
         "llama.cpp's GPU offload (-ngl): accepted and ignored, rotor runs on the CPU")
      ->type_name("N");
  app->add_option_function<std::string>(
         "--flash-attn",
         [](const std::string& v) {
           bool off = false;
           std::stringstream items(v.empty() ? "on" : v);
           for (std::string item; std::getline(items, item, ',');) {
             if (item == "off" || item == "0" || item == "false") {
               off = true;
             } else if (item != "on" && item != "auto" && item != "1" && item != "true" &&
                        !item.empty()) {
               throw CLI::ValidationError(
                   fmt::format("-fa '{}' is not one of on, off, auto", item));
             }
           }
           if (off)
             fmt::print(stderr,
                        "rotor: -fa off: rotor's attention is always the fused online-softmax "
                        "(flash) kind; ignored\n");
         },
         "on|off|auto (llama.cpp's -fa): rotor always uses flash (online-softmax) attention")
      ->expected(0, 1)
      ->default_str("on")
      ->type_name("on|off|auto");
}

void AddPrefillStepOptions(CLI::App* app, int* prefill_step, std::string_view help) {
  // "... (0 = the whole prompt)" -> "... (0 = the whole prompt; llama.cpp's -ub)"
  std::string text(help);
  text = text.ends_with(")") ? text.substr(0, text.size() - 1) + "; llama.cpp's -ub)"
                             : text + " (llama.cpp's -ub)";
  app->add_option("--prefill-step,--ubatch-size", *prefill_step, text)
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  // llama.cpp's logical batch: a forward pass takes at most that many tokens
  // too (its n_ubatch = min(n_batch, n_ubatch)).
  auto batch = std::make_shared<int>(0);
  app->add_option("-b,--batch-size", *batch,
                  "llama.cpp's logical batch: caps --prefill-step (prompt tokens per pass)")
      ->check(CLI::Range(1, 1 << 24));
  app->parse_complete_callback([batch, prefill_step] {
    if (*batch > 0)
      *prefill_step = *prefill_step == 0 ? *batch : std::min(*prefill_step, *batch);
  });
}

void AddEscapeOptions(CLI::App* app, bool* escape) {
  // Run as each is read, so that the last one on the line wins.
  app->add_flag_callback(
         "-e,--escape", [escape] { *escape = true; },
         "turn \\n \\r \\t \\' \\\" \\\\ \\xHH in the prompt, -f text, system prompt and "
         "stop strings into those characters (the default, as llama.cpp's)")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--no-escape", [escape] { *escape = false; },
         "take the prompt, -f text, system prompt and stop strings as written")
      ->trigger_on_parse();
}

std::string ProcessEscapes(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\'':
      case '"':
      case '\\':
        out += c;
        break;
      default:
        if (c == 'x' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
          out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
          i += 2;
        } else {  // unknown (or \x without two hex digits): kept as written
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::string WithoutTrailingNewline(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

void TakeLastValueEverywhere(CLI::App* app) {
  for (CLI::Option* o : app->get_options())
    if (o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw &&
        o->get_items_expected_max() <= 1)
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app->get_subcommands({})) TakeLastValueEverywhere(sub);
}

Result<std::pair<int32_t, float>> ParseLogitBiasFlag(std::string_view v) {
  const size_t sign = v.find_first_of("+-", 1);
  int64_t id = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + std::min(sign, v.size()), id);
  if (sign == std::string_view::npos || ec != std::errc() || end != v.data() + sign || id < 0 ||
      id > INT32_MAX)
    return Errorf("'{}' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 2-100)", v);
  const std::string bias_text(v.substr(sign + (v[sign] == '+' ? 1 : 0)));
  char* bias_end = nullptr;
  const float bias = std::strtof(bias_text.c_str(), &bias_end);
  if (bias_text.empty() || bias_text == "-" || *bias_end != '\0')
    return Errorf("'{}': the bias '{}' is not a number", v, v.substr(sign));
  if (!(bias >= -kLogitBiasLimit && bias <= kLogitBiasLimit))
    return Errorf("'{}': the bias {} is out of range [-100, 100]", v, bias);
  return std::pair<int32_t, float>{static_cast<int32_t>(id), bias};
}

void AddSamplingOptions(CLI::App* app, SamplingParams* p) {
  app->add_option("--temp", p->temperature, "temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-k", p->top_k, "top-k (0 = off)")->capture_default_str();
  app->add_option("--top-p", p->top_p, "top-p (1 = off)")->capture_default_str();
  app->add_option("--min-p", p->min_p, "min-p (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", p->repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  app->add_option("--repeat-last-n", p->repeat_last_n,
                  "tokens the penalties look back over (0 = off, -1 = all)")
      ->capture_default_str();
  app->add_option("--presence-penalty", p->presence_penalty,
                  "subtracted from the logit of a token in the last --repeat-last-n (0 = off)")
      ->capture_default_str();
  app->add_option("--frequency-penalty", p->frequency_penalty,
                  "subtracted once per occurrence in the last --repeat-last-n (0 = off)")
      ->capture_default_str();
  // As llama.cpp's -s: -1 (or 4294967295) draws a random seed.
  app->add_option_function<std::string>(
         "-s,--seed",
         [p](const std::string& v) {
           uint64_t seed = 0;
           const char* end = v.data() + v.size();
           const auto [at, ec] = std::from_chars(v.data(), end, seed);
           if (v == "-1")
             seed = kRandomSeed;
           else if (v.empty() || ec != std::errc() || at != end)
             throw CLI::ValidationError("-s,--seed",
                                        fmt::format("'{}' is not {}", v, kSeedRule));
           p->seed = seed;
         },
         "RNG seed, an integer in [0, 2^64 - 1] (default, or -1: random)")
      ->type_name("UINT");
  app->add_option_function<std::vector<std::string>>(
         "-l,--logit-bias",
         [p](const std::vector<std::string>& values) {
           for (const std::string& v : values) {
             Result<std::pair<int32_t, float>> bias = ParseLogitBiasFlag(v);
             if (!bias.ok()) throw CLI::ValidationError("--logit-bias", bias.message());
             p->logit_bias.push_back(*bias);
           }
         },
         "add BIAS to token TOKEN_ID's logit, as TOKEN_ID+BIAS or TOKEN_ID-BIAS (-100 bans the "
         "token, +100 forces it); repeatable")
      ->type_name("TOKEN_ID(+|-)BIAS")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  AddGrammarOptions(app, p);
}

namespace {

// Parses GBNF into p->grammar; `source` names the option (and file) in errors.
void SetGrammar(SamplingParams* p, std::string_view gbnf, const std::string& source) {
  Result<std::shared_ptr<const grammar::Grammar>> g = grammar::ParseGrammar(gbnf);
  if (!g.ok()) throw CLI::ValidationError(source + ": " + g.status().message());
  p->grammar = std::move(*g);
}

void SetSchema(SamplingParams* p, std::string_view schema, const std::string& source) {
  Result<std::string> gbnf = grammar::JsonSchemaToGrammar(schema);
  if (!gbnf.ok()) throw CLI::ValidationError(source + ": " + gbnf.status().message());
  SetGrammar(p, *gbnf, source);
}

std::string ReadOrThrow(const std::string& option, const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) throw CLI::ValidationError(option + ": " + text.status().message());
  return std::move(*text);
}

}  // namespace

void AddGrammarOptions(CLI::App* app, SamplingParams* p) {
  auto* g = app->add_option_function<std::string>(
      "--grammar", [p](const std::string& v) { SetGrammar(p, v, "--grammar"); },
      "constrain the output to this GBNF grammar (llama.cpp's format; docs/GRAMMAR.md)");
  g->type_name("GBNF");
  auto* gf = app->add_option_function<std::string>(
      "--grammar-file",
      [p](const std::string& path) {
        SetGrammar(p, ReadOrThrow("--grammar-file", path), "--grammar-file " + path);
      },
      "--grammar, read from a file");
  gf->type_name("FILE");
  auto* js = app->add_option_function<std::string>(
      "-j,--json-schema", [p](const std::string& v) { SetSchema(p, v, "--json-schema"); },
      "constrain the output to JSON valid against this JSON Schema (docs/GRAMMAR.md lists the "
      "supported keywords)");
  js->type_name("JSON");
  auto* jf = app->add_option_function<std::string>(
      "--json-schema-file",
      [p](const std::string& path) {
        SetSchema(p, ReadOrThrow("--json-schema-file", path), "--json-schema-file " + path);
      },
      "--json-schema, read from a file");
  jf->type_name("FILE");
  const std::vector<CLI::Option*> all = {g, gf, js, jf};
  for (CLI::Option* a : all)
    for (CLI::Option* b : all)
      if (a != b) a->excludes(b);
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
    // llama.cpp's --keep (tokens kept when its context shifts) is the sinks.
    std::string names(spec.flag);
    if (!spec.alias.empty()) names += "," + std::string(spec.alias);
    if (spec.id == KvOpt::kKeep) names += ",--keep";
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

Result<std::string> ReadFile(const std::string& path) { return ReadInputFile(path); }

}  // namespace rotor::cli
