#include "tokenizer/pre_tokenizer.h"

#include <utility>

namespace rotor {

namespace {

// GPT-2's expression: English contractions (lower case only), then letters,
// digits, or other symbols, each with at most one leading space; whitespace
// up to (not including) the last space before a word. llama.cpp leaves out the
// final "|\s+" of the original: the whitespace it would match is a piece of
// unmatched text instead, which splits the same way.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3 (tiktoken cl100k style): contractions in either case, a letter run
// with one optional leading non-letter/non-digit (not a newline), numbers in
// groups of up to three digits, symbol runs with a leading space and trailing
// newlines, newline runs with the whitespace before them, whitespace. The
// original's "(?i:'s|...)" is spelled with explicit classes so that Unicode
// case folding cannot widen it (PCRE2 would let "'ſ" match "'s").
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: Llama 3's expression with every digit its own word.
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::vector<PreTokenizerSpec>& Specs() {
  static const auto* specs = new std::vector<PreTokenizerSpec>{
      {.family = "default",
       .names = {"default"},
       // llama.cpp's fallback: punctuation runs, GPT-2, digit runs, then
       // three-digit groups.
       .regexes = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {.family = "gpt2",
       .names = {"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
                 "jina-v2-de", "gigachat", "exaone4", "trillion", "granite-docling", "mellum",
                 "a.x-4.0"},
       .regexes = {kGpt2}},
      {.family = "llama3",
       .names = {"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                 "lfm2"},
       .regexes = {kLlama3},
       .ignore_merges = true,
       .add_bos = true},
      {.family = "dbrx", .names = {"dbrx", "smaug-bpe"}, .regexes = {kLlama3}},
      {.family = "qwen2",
       .names = {"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan",
                 "solar-open"},
       .regexes = {kQwen2}},
      {.family = "smollm",
       .names = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       // Every digit alone first, then GPT-2 inside what is left.
       .regexes = {R"(\p{N})", kGpt2}},
      {.family = "falcon",
       .names = {"falcon"},
       .regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
  };
  return *specs;
}

}  // namespace

const PreTokenizerSpec* FindPreTokenizer(std::string_view name) {
  for (const PreTokenizerSpec& spec : Specs()) {
    for (std::string_view n : spec.names) {
      if (n == name) return &spec;
    }
  }
  return nullptr;
}

std::string SupportedPreTokenizers() {
  std::string all;
  for (const PreTokenizerSpec& spec : Specs()) {
    for (std::string_view n : spec.names) {
      if (!all.empty()) all += ", ";
      all += n;
    }
  }
  return all;
}

Result<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  const PreTokenizerSpec* spec = FindPreTokenizer(name);
  if (spec == nullptr) {
    return Errorf("tokenizer: tokenizer.ggml.pre '{}' is not supported (supported: {})", name,
                  SupportedPreTokenizers());
  }
  std::vector<UnicodeRegex> regexes;
  for (std::string_view pattern : spec->regexes) {
    ASSIGN_OR_RETURN(UnicodeRegex re, UnicodeRegex::Compile(pattern));
    regexes.push_back(std::move(re));
  }
  return PreTokenizer(spec, std::move(regexes));
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<UnicodeRegex::Range> ranges = {{0, text.size()}};
  std::vector<UnicodeRegex::Range> next;
  if (text.empty()) ranges.clear();
  for (const UnicodeRegex& re : regexes_) {
    next.clear();
    next.reserve(ranges.size() * 2);
    for (const UnicodeRegex::Range& r : ranges) {
      re.Split(text.substr(r.begin, r.end - r.begin), r.begin, &next);
    }
    ranges.swap(next);
  }
  std::vector<std::string_view> words;
  words.reserve(ranges.size());
  for (const UnicodeRegex::Range& r : ranges)
    words.push_back(text.substr(r.begin, r.end - r.begin));
  return words;
}

}  // namespace rotor
