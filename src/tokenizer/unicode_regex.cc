#include "tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>

#include "base/check.h"
#include "base/log.h"

namespace rotor {

struct UnicodeRegex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string Pcre2Message(int error) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(error, buf, sizeof(buf));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(error)
               : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

Result<UnicodeRegex> UnicodeRegex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return Errorf("tokenizer: regex '{}': {} at offset {}", pattern, Pcre2Message(error),
                  error_offset);
  }
  auto owned = std::make_unique<Code>();
  owned->code = code;
  // Without JIT support (some architectures) the interpreter does the same work, slower.
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return UnicodeRegex(std::string(pattern), std::move(owned), jit);
}

UnicodeRegex::UnicodeRegex(std::string pattern, std::unique_ptr<Code> code, bool jit)
    : pattern_(std::move(pattern)), code_(std::move(code)), jit_(jit) {}
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;
UnicodeRegex::~UnicodeRegex() = default;

void UnicodeRegex::Split(std::string_view text, size_t base, std::vector<Range>* out) const {
  if (text.empty()) return;
  // Match data belongs to one call, so a shared regex needs no lock.
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(code_->code, nullptr));
  CHECK(match != nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;   // where the next search starts
  size_t done = 0;  // text before this is already in `out`
  while (pos < text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), pos, 0, match.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's fixed stack ran out (a very long run of something); the
      // interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_JIT, match.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Only resource limits can get here; keep the rest whole rather than lose it.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        Log(LogLevel::kWarn, "tokenizer: regex '{}' failed ({}); the rest of the text is one piece",
            pattern_, Pcre2Message(rc));
      }
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match: try again one character further on.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > done) out->push_back({base + done, base + begin});
    out->push_back({base + begin, base + end});
    done = pos = end;
  }
  if (done < text.size()) out->push_back({base + done, base + text.size()});
}

}  // namespace rotor
