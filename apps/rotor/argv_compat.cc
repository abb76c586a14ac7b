#include "argv_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <string_view>

namespace rotor::cli {
namespace {

// llama.cpp's single-dash spellings of more than one letter, and the long
// option each stands for. A spelling applies where the subcommand has that
// long option (so -ctk works once a subcommand has --cache-type-k).
struct Alias {
  std::string_view word;  // without the dash
  std::string_view option;
};
constexpr Alias kAliases[] = {
    {"ngl", "--n-gpu-layers"},  {"fa", "--flash-attn"},
    {"cnv", "--conversation"},  {"no-cnv", "--no-conversation"},
    {"sys", "--system-prompt"}, {"ub", "--ubatch-size"},
    {"np", "--parallel"},       {"ctk", "--cache-type-k"},
    {"ctv", "--cache-type-v"},  {"mli", "--multiline-input"},
    {"cb", "--cont-batching"},  {"oe", "--output-err"},
    {"nr", "--no-repack"},      {"mmp", "--mmap"},
};

// llama.cpp options rotor has no equivalent of, and why; named in the error
// instead of a guess at a neighbour.
struct Missing {
  std::string_view name;  // as llama.cpp spells it
  std::string_view why;
};
constexpr std::string_view kGpu = "rotor runs on the CPU";
constexpr std::string_view kSampler = "rotor's sampler has no such stage";
// A server the user believes protected must not start open.
constexpr std::string_view kApiKey =
    "rotor serve has no API-key check: put it behind a proxy that checks the key (and keep "
    "--host 127.0.0.1)";
constexpr std::string_view kChatPrompt =
    "rotor chat reads each message from its input (printf 'MESSAGE\\n' | rotor chat ...); the "
    "system prompt is -sys / --system";
constexpr Missing kMissing[] = {
    // Where the subcommand has --cache-type-k the alias above applies.
    {"-ctk", "this command stores no K/V (generate, chat, serve, bench and perplexity take it)"},
    {"-ctv", "this command stores no K/V (generate, chat, serve, bench and perplexity take it)"},
    {"--cache-type-k",
     "this command stores no K/V (generate, chat, serve, bench and perplexity take it)"},
    {"--cache-type-v",
     "this command stores no K/V (generate, chat, serve, bench and perplexity take it)"},
    {"-i", "interactive mode is `rotor chat`"},
    {"--interactive", "interactive mode is `rotor chat`"},
    {"-if", "interactive mode is `rotor chat`"},
    {"--interactive-first", "interactive mode is `rotor chat`"},
    {"-sm", kGpu},
    {"--split-mode", kGpu},
    {"-mg", kGpu},
    {"--main-gpu", kGpu},
    {"-ts", kGpu},
    {"--tensor-split", kGpu},
    {"-dev", kGpu},
    {"--device", kGpu},
    {"-nkvo", kGpu},
    {"--no-kv-offload", kGpu},
    {"--mirostat", kSampler},
    {"--mirostat-lr", kSampler},
    {"--mirostat-ent", kSampler},
    {"--typical", kSampler},
    {"--top-nsigma", kSampler},
    {"--xtc-probability", kSampler},
    {"--xtc-threshold", kSampler},
    {"--dry-multiplier", kSampler},
    {"--dry-base", kSampler},
    {"--dry-allowed-length", kSampler},
    {"--dry-penalty-last-n", kSampler},
    {"--dry-sequence-breaker", kSampler},
    {"--dynatemp-range", kSampler},
    {"--dynatemp-exp", kSampler},
    {"--lora", "rotor loads no adapters"},
    {"--mmproj", "rotor runs text models only"},
    {"-hf", "rotor reads local GGUF files only (-m FILE)"},
    {"-hfr", "rotor reads local GGUF files only (-m FILE)"},
    {"--hf-repo", "rotor reads local GGUF files only (-m FILE)"},
    {"-mu", "rotor reads local GGUF files only (-m FILE)"},
    {"--model-url", "rotor reads local GGUF files only (-m FILE)"},
    {"-md", "rotor has no speculative decoding"},
    {"--model-draft", "rotor has no speculative decoding"},
    {"--rope-scaling", "rotor takes RoPE scaling from the GGUF file"},
    {"--rope-freq-base", "rotor takes RoPE scaling from the GGUF file"},
    {"--rope-freq-scale", "rotor takes RoPE scaling from the GGUF file"},
    {"--api-key", kApiKey},
    {"--api-key-file", kApiKey},
    {"-nocb", "rotor serve always batches continuously"},
    {"--no-cont-batching", "rotor serve always batches continuously"},
    {"--numa", "rotor places no memory by NUMA node: run it under numactl"},
    {"--prio", "rotor keeps the priority it starts with: run it under nice or chrt"},
    {"--poll", "rotor's threads spin briefly for work, then sleep: there is no polling level"},
    {"-C", "rotor pins no threads: run it under taskset"},
    {"--cpu-mask", "rotor pins no threads: run it under taskset"},
    {"--cpu-strict", "rotor pins no threads: run it under taskset"},
};
// The same, for one command only.
struct MissingIn {
  std::string_view command;
  Missing missing;
};
constexpr MissingIn kMissingIn[] = {
    {"chat", {"-p", kChatPrompt}},
    {"chat", {"--prompt", kChatPrompt}},
};

bool IsNumber(std::string_view s) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  bool digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') {
      return false;
    }
  }
  return digit;
}

// An option whose next word is its value.
bool TakesValue(const CLI::Option* o) { return o->get_type_size_max() > 0; }
bool ValueOptional(const CLI::Option* o) { return o->get_expected_min() == 0; }

CLI::Option* Find(CLI::App* sub, const std::string& name) { return sub->get_option_no_throw(name); }

// Every spelling a user could mean on `sub`: its option names, and the
// llama.cpp aliases of those.
std::vector<std::string> Spellings(CLI::App* sub) {
  std::vector<std::string> out;
  for (const CLI::Option* o : sub->get_options()) {
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
  }
  for (const Alias& a : kAliases)
    if (Find(sub, std::string(a.option)) != nullptr) out.push_back("-" + std::string(a.word));
  return out;
}

std::string Suggest(CLI::App* sub, std::string_view word) {
  std::string bare(word.substr(word.find_first_not_of('-')));
  std::vector<std::pair<int, std::string>> scored;
  for (const std::string& s : Spellings(sub)) {
    const std::string sb = s.substr(s.find_first_not_of('-'));
    int d = EditDistance(bare, sb);
    // "--kv-siz" and "--size" name a part of an option: near too.
    if (bare.size() >= 3 && sb.find(bare) != std::string::npos) d = std::min(d, 1);
    // "--temperature" holds "--temp".
    if (sb.size() >= 4 && bare.find(sb) != std::string::npos) d = std::min(d, 1);
    const int limit = std::max<int>(1, static_cast<int>(std::min(bare.size(), sb.size())) / 3);
    if (d <= limit) scored.emplace_back(d, s);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (const auto& [d, s] : scored)
    if (std::find(names.begin(), names.end(), s) == names.end() && names.size() < 3)
      names.push_back(s);
  if (names.empty()) return "";
  std::string text = names[0];
  for (size_t i = 1; i < names.size(); ++i)
    text += (i + 1 == names.size() ? " or " : ", ") + names[i];
  return fmt::format(" (did you mean {}?)", text);
}

std::string Unknown(CLI::App* sub, std::string_view word) {
  std::vector<Missing> missing(std::begin(kMissing), std::end(kMissing));
  for (const MissingIn& m : kMissingIn)
    if (m.command == sub->get_name()) missing.push_back(m.missing);
  for (const Missing& m : missing)
    if (m.name == word)
      return fmt::format("rotor {}: {} is llama.cpp's; {} (rotor {} --help lists the options)",
                         sub->get_name(), word, m.why, sub->get_name());
  return fmt::format("rotor {}: unknown option '{}'{} (rotor {} --help lists the options)",
                     sub->get_name(), word, Suggest(sub, word), sub->get_name());
}

CLI::App* FindSubcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* s : app.get_subcommands({}))
    if (s->get_name() == name) return s;
  return nullptr;
}

struct Word {
  std::string text;
};

// Rewrites the words after the subcommand in place; the error, if any.
std::optional<std::string> RewriteOptions(CLI::App* sub, std::vector<Word>& words) {
  for (size_t i = 0; i < words.size(); ++i) {
    std::string& w = words[i].text;
    if (w == "--") break;
    if (w.size() < 2 || w[0] != '-' || IsNumber(w)) continue;  // a value or positional
    std::string name = w;
    bool attached = false;  // the value is part of the word
    if (w.starts_with("--")) {
      if (const size_t eq = w.find('='); eq != std::string::npos) {
        name = w.substr(0, eq);
        attached = true;
      }
    } else if (w.size() > 2) {
      const std::string word = w.substr(1);
      const auto alias = std::find_if(std::begin(kAliases), std::end(kAliases),
                                      [&](const Alias& a) { return a.word == word; });
      if (alias != std::end(kAliases) && Find(sub, std::string(alias->option)) != nullptr) {
        name = w = std::string(alias->option);
      } else if (Find(sub, "--" + word) != nullptr) {
        name = w = "--" + word;
      } else if (const CLI::Option* o = Find(sub, w.substr(0, 2));
                 o != nullptr && TakesValue(o) && IsNumber(w.substr(2))) {
        continue;  // -n128: CLI11 reads the attached value
      } else {
        return Unknown(sub, w);
      }
    }
    const CLI::Option* o = Find(sub, name);
    if (o == nullptr) return Unknown(sub, name);
    if (attached || !TakesValue(o) || i + 1 >= words.size()) continue;
    const std::string& next = words[i + 1].text;
    if (ValueOptional(o) && next.starts_with("-") && !IsNumber(next)) continue;
    ++i;  // the value, whatever it looks like
  }
  return std::nullopt;
}

}  // namespace

int EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance of a[0, i) and b[0, j); rows of m + 1.
  std::vector<int> d((n + 1) * (m + 1));
  auto at = [&](size_t i, size_t j) -> int& { return d[i * (m + 1) + j]; };
  for (size_t i = 0; i <= n; ++i) at(i, 0) = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) at(0, j) = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      int v = std::min(
          {at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        v = std::min(v, at(i - 2, j - 2) + 1);
      at(i, j) = v;
    }
  return at(n, m);
}

namespace {

// llama-bench's ranges in a list of counts: FIRST-LAST (every value),
// FIRST-LAST+STEP, FIRST-LAST*MULT ("16-64*2" is 16,32,64), beside plain
// values ("1,4-6" is 1,4,5,6). The list written out, or an error naming the
// item.
std::optional<std::string> ExpandRanges(std::string_view option, std::string_view list,
                                        std::string* out) {
  constexpr size_t kMaxValues = 1024;
  std::vector<int64_t> values;
  auto number = [](std::string_view s, size_t* at, int64_t* v) {
    const auto [end, ec] = std::from_chars(s.data() + *at, s.data() + s.size(), *v);
    if (ec != std::errc() || end == s.data() + *at) return false;
    *at = static_cast<size_t>(end - s.data());
    return true;
  };
  for (size_t b = 0; b <= list.size();) {
    const size_t e = std::min(list.find(',', b), list.size());
    const std::string_view item = list.substr(b, e - b);
    b = e + 1;
    const size_t dash = item.find('-', 1);
    if (dash == std::string_view::npos) {  // a plain value: CLI11 checks it
      out->append(out->empty() ? "" : ",").append(item);
      continue;
    }
    size_t at = 0;
    int64_t first = 0, last = 0, step = 1;
    char how = '+';
    bool ok = number(item, &at, &first) && at == dash && number(item, &(++at), &last);
    if (ok && at < item.size()) {
      how = item[at];
      ok = (how == '+' || how == '*') && number(item, &(++at), &step) && at == item.size();
    }
    ok = ok && first >= 0 && first <= last && (how == '+' ? step >= 1 : step >= 2 && first >= 1);
    if (!ok)
      return fmt::format("{}: '{}' is not a range FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*MULT "
                         "(llama-bench's; FIRST <= LAST)",
                         option, item);
    for (int64_t v = first; v <= last; v = how == '+' ? v + step : v * step) {
      if (values.size() >= kMaxValues)
        return fmt::format("{}: '{}' gives more than {} values", option, item, kMaxValues);
      values.push_back(v);
      out->append(out->empty() ? "" : ",").append(std::to_string(v));
    }
  }
  return std::nullopt;
}

// bench's lists of counts take llama-bench's ranges (ExpandRanges).
std::optional<std::string> ExpandBenchRanges(std::vector<Word>& words) {
  static constexpr std::string_view kLists[] = {
      "-p", "--n-prompt", "-n", "--n-gen", "-d", "--n-depth", "-t", "--threads",
      "--ubatch-size", "--prefill-step", "-b", "--batch-size", "--batch"};
  for (size_t i = 0; i < words.size(); ++i) {
    std::string& w = words[i].text;
    if (w == "--") break;
    for (std::string_view name : kLists) {
      std::string* value = nullptr;
      size_t from = 0;
      if (w == name && i + 1 < words.size()) {
        value = &words[++i].text;
      } else if (name.starts_with("--") && w.starts_with(std::string(name) + "=")) {
        value = &w;
        from = name.size() + 1;
      }
      if (value == nullptr) continue;
      std::string expanded;
      if (auto e = ExpandRanges(name, std::string_view(*value).substr(from), &expanded)) return e;
      *value = value->substr(0, from) + expanded;
      break;
    }
  }
  return std::nullopt;
}

}  // namespace

CompatArgs RewriteArgs(CLI::App& app, std::vector<std::string> args) {
  CompatArgs out;
  // Before the subcommand: --version, -v, and what CLI11 knows (--help).
  size_t first = 0;
  for (; first < args.size(); ++first) {
    const std::string& a = args[first];
    if (!a.starts_with("-")) break;
    if (a == "--version") {
      out.version = true;
    } else if (a == "-v" || a == "--verbose") {
      out.verbose = true;
    } else if (app.get_option_no_throw(a) == nullptr) {
      out.error = fmt::format(
          "rotor: '{}' before the command: options go after it, as in `rotor generate {} ...` "
          "(rotor --help lists the commands)",
          a, a);
      return out;
    } else {
      out.args.push_back(a);
    }
  }
  if (out.version || first == args.size()) {
    out.args.insert(out.args.end(), args.begin() + static_cast<long>(first), args.end());
    return out;
  }
  CLI::App* sub = FindSubcommand(app, args[first]);
  if (sub == nullptr) {
    std::vector<std::string> names;
    for (CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
    std::string near;
    for (const std::string& n : names)
      if (EditDistance(args[first], n) <= 2) near = fmt::format(" (did you mean {}?)", n);
    out.error = fmt::format("rotor: unknown command '{}'{}; the commands: {}", args[first], near,
                            fmt::join(names, ", "));
    return out;
  }
  std::vector<Word> words;
  // -v / --verbose / --version anywhere before "--" (llama.cpp takes them anywhere).
  for (size_t i = first + 1; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") {
      for (; i < args.size(); ++i) words.push_back({args[i]});
      break;
    }
    if (t == "--version") {
      out.version = true;
    } else if ((t == "-v" || t == "--verbose") && Find(sub, t) == nullptr) {
      out.verbose = true;
    } else {
      words.push_back({t});
    }
  }
  if (out.version) return out;
  // generate -cnv / -sys: llama-cli's conversation mode, which is rotor chat;
  // -p is then the system prompt (as llama-cli's conversation mode reads it).
  auto said = [&](std::initializer_list<std::string_view> names) {
    for (const Word& w : words) {
      if (w.text == "--") break;
      for (std::string_view n : names)
        if (w.text == n || w.text.starts_with(std::string(n) + "=")) return true;
    }
    return false;
  };
  if (sub->get_name() == "generate" &&
      said({"-cnv", "--conversation", "-sys", "--system-prompt"})) {
    const bool has_sys = said({"-sys", "--system-prompt"});
    for (Word& w : words) {
      if (w.text == "-p" || w.text == "--prompt" || w.text.starts_with("--prompt=")) {
        if (has_sys) {
          out.error =
              "rotor generate: -cnv with both -sys and -p: rotor chat reads the messages from "
              "its input (printf 'MESSAGE\\n' | rotor chat -sys ...)";
          return out;
        }
        w.text = w.text.starts_with("--prompt=") ? "--system=" + w.text.substr(9) : "--system";
      }
    }
    out.notes.push_back(
        "rotor: -cnv: conversation mode is `rotor chat` (running it; -p is the system prompt)");
    sub = FindSubcommand(app, "chat");
  }
  if (auto e = RewriteOptions(sub, words)) {
    out.error = *e;
    return out;
  }
  if (sub->get_name() == "bench")
    if (auto e = ExpandBenchRanges(words)) {
      out.error = "rotor bench " + *e;
      return out;
    }
  out.args.push_back(sub->get_name());
  for (const Word& w : words) out.args.push_back(w.text);
  return out;
}

std::string VersionText() {
#ifndef ROTOR_VERSION
#define ROTOR_VERSION "unknown"
#endif
#ifndef ROTOR_GIT_COMMIT
#define ROTOR_GIT_COMMIT "unknown"
#endif
#ifndef ROTOR_BUILD_TYPE
#define ROTOR_BUILD_TYPE ""
#endif
#if defined(__clang__)
  const std::string compiler =
      fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  const std::string compiler =
      fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  const std::string compiler = "an unknown compiler";
#endif
#if defined(__x86_64__)
  const char* arch = "x86_64";
#elif defined(__aarch64__)
  const char* arch = "aarch64";
#else
  const char* arch = "an unknown architecture";
#endif
  return fmt::format("rotor {} (git {})\nbuilt with {} for {} ({})\n", ROTOR_VERSION,
                     ROTOR_GIT_COMMIT, compiler, arch, ROTOR_BUILD_TYPE);
}

}  // namespace rotor::cli
