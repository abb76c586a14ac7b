// A Unicode-aware regular expression (PCRE2, UTF + UCP, JIT-compiled when the
// library supports it) that splits text the way llama.cpp's pre-tokenizers
// do: every match is a piece, and so is every run of text between matches.
//
// Properties such as \p{L}, \p{N} and \s follow the Unicode tables of the
// installed PCRE2. Invalid UTF-8 is allowed (PCRE2_MATCH_INVALID_UTF): an
// invalid byte never matches a pattern item, so it ends up in a piece of
// unmatched text and no byte of the input is lost.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rotor {

class UnicodeRegex {
 public:
  // Errors name the pattern and PCRE2's message with the offset in it.
  static Result<UnicodeRegex> Compile(std::string_view pattern);

  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;
  ~UnicodeRegex();

  // Appends the [begin, end) byte ranges of the pieces of text[0, size), in
  // order, covering it without gaps; ranges are relative to `base` added.
  // The subject is `text` alone: lookarounds do not see past its ends. Empty
  // matches are skipped. Safe to call from several threads at once.
  struct Range {
    size_t begin;
    size_t end;
  };
  void Split(std::string_view text, size_t base, std::vector<Range>* out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct Code;
  UnicodeRegex(std::string pattern, std::unique_ptr<Code> code, bool jit);

  std::string pattern_;
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

}  // namespace rotor
