// Byte-level BPE pre-tokenizers, chosen by tokenizer.ggml.pre: the regular
// expressions that cut text into words before BPE merges run inside each word
// (a merge never crosses a word boundary). Names and expressions follow
// llama.cpp's llama-vocab.cpp, which follows each model's tokenizer.json.
//
//   ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create("llama-bpe"));
//   for (std::string_view word : pre.Split("I'm 12345 years")) ...
//   // "I", "'m", " ", "123", "45", " years"
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/unicode_regex.h"

namespace rotor {

// One family of pre-tokenizers: its regexes (applied in turn, each splitting
// the pieces of the one before) and what else the name implies.
struct PreTokenizerSpec {
  std::string_view family;              // "llama3", "qwen2", "gpt2", ...
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values
  std::vector<std::string_view> regexes;
  // A word that is a vocabulary token as a whole is emitted without merges
  // (Llama 3: the merges do not reach some of its tokens).
  bool ignore_merges = false;
  // tokenizer.ggml.add_bos_token's default when the key is absent.
  bool add_bos = false;
};

// The spec whose names include `name`, or nullptr.
const PreTokenizerSpec* FindPreTokenizer(std::string_view name);
// Every recognised name, comma-separated (for error messages).
std::string SupportedPreTokenizers();

// The default when tokenizer.ggml.pre is absent (as llama.cpp: with a warning).
inline constexpr std::string_view kDefaultPreTokenizer = "default";

class PreTokenizer {
 public:
  // An unknown name is an error naming it and listing the known ones.
  static Result<PreTokenizer> Create(std::string_view name);

  // The words of `text` in order; they cover it exactly (every byte, valid
  // UTF-8 or not, is in one word). Views into `text`.
  std::vector<std::string_view> Split(std::string_view text) const;

  const PreTokenizerSpec& spec() const { return *spec_; }

 private:
  PreTokenizer(const PreTokenizerSpec* spec, std::vector<UnicodeRegex> regexes)
      : spec_(spec), regexes_(std::move(regexes)) {}

  const PreTokenizerSpec* spec_;
  std::vector<UnicodeRegex> regexes_;
};

}  // namespace rotor
