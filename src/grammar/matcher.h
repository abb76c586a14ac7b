// Where a text is in a grammar: the set of parse stacks that the text so far
// leaves open (llama.cpp's approach). A stack is a list of grammar positions,
// its top the element the next code point must match; an empty stack means
// the text so far is a complete sentence. Text arrives as UTF-8 bytes in
// arbitrary pieces (a token may end inside a character: those bytes are held
// and checked against the code points they could still become).
//
// Cost: Accepts() walks the stacks once per code point of the text without
// touching the matcher's state; stacks are deduplicated after every step, so
// their number stays bounded by the grammar's ambiguity at that point. The
// expansion of references visits each distinct stack once, so rules that match
// nothing in several ways ("" | "") cost no more than one way. A grammar can
// still be ambiguous enough to need exponentially many stacks
// (x ::= "a" x "b" | "a" x "c" | ""): past kMaxStacks stacks, or kMaxExpansions
// expansion steps for one character, the text is refused and `overflowed()`
// says why (an error for the caller to report, never a hang).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/small_stack.h"
#include "grammar/token_trie.h"

namespace rotor::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Would the text so far followed by `bytes` still be a prefix of a sentence?
  // An empty `bytes` is accepted iff the matcher is not dead.
  bool Accepts(std::string_view bytes) const;
  // Accepts(text) of every token in `trie` at once, one step per trie node
  // reached: allowed[id] becomes 1 or 0 for each id the trie holds (the
  // others are left alone). With `skip_leading_space`, each text's leading
  // " \t\n\r\f\v" are not the grammar's, and a text of them alone is refused
  // (a chat reply's start). False when a step overflowed (overflowed() says
  // so; the mask is then incomplete).
  bool AllowedTokens(const TokenTrie& trie, std::span<uint8_t> allowed,
                     bool skip_leading_space = false) const;
  // Appends `bytes`; false (and nothing changes) if they are not accepted.
  bool Accept(std::string_view bytes);
  // The text so far is a whole sentence of the grammar (generation may end).
  bool CanEnd() const;
  // Nothing can follow the text so far (generation must end).
  bool Done() const;
  // Back to the empty text.
  void Reset();

  const Grammar& grammar() const { return *grammar_; }

  // Limits on one character's step (see the top of the file).
  static constexpr size_t kMaxStacks = 4096;
  static constexpr size_t kMaxExpansions = size_t{1} << 16;
  // A text was refused (or Reset() found no start) because a step needed more
  // than the limits: the grammar is too ambiguous to match here. Sticky until
  // Reset() or ClearOverflow(); Accepts() sets it too, so a caller testing
  // many texts clears it first and asks after the last.
  bool overflowed() const { return overflowed_ || dead_at_start_; }
  void ClearOverflow();
  // The error to report when overflowed().
  static std::string OverflowMessage();

 private:
  using Stack = SmallStack;
  // A character whose first bytes arrived: its bits so far and how many
  // continuation bytes are still due (0: none pending).
  struct Pending {
    uint32_t partial = 0;
    int need = 0;
    int len = 0;  // the pending character's length in bytes
  };
  struct State {
    std::vector<Stack> stacks;
    Pending pending;
  };
  enum class ByteStep { kRefused, kPending, kStepped };

  // One step's expansions: the stacks with a reference on top already
  // expanded, and the work done.
  struct Expansion;
  // Pushes `s` with its top resolved to a character element (or empty);
  // false past the limits.
  bool Expand(Stack s, std::vector<Stack>* out, Expansion* ex) const;
  // The stacks after matching `cp` from each of `in` (deduplicated); false
  // past the limits (sets overflowed_).
  bool Step(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const;
  // One byte after `stacks` with `*p` pending: a byte that completes a
  // character steps the stacks into *next (kStepped); one that starts or
  // continues a character only updates *p (kPending); else kRefused (also
  // past the limits: overflowed_ is set).
  ByteStep FeedByte(const std::vector<Stack>& stacks, unsigned char b, Pending* p,
                    std::vector<Stack>* next) const;
  // Some stack takes a character that the pending bytes can still become.
  static bool PendingPossible(const std::vector<Stack>& stacks, const Pending& p);
  // `from` followed by `bytes` into *out; false when rejected (*out is then
  // unspecified).
  bool Feed(const State& from, std::string_view bytes, State* out) const;

  std::shared_ptr<const Grammar> grammar_;
  State state_;
  // Set by a const query too (Accepts): a matcher belongs to one sequence.
  mutable bool overflowed_ = false;
  bool dead_at_start_ = false;  // Reset() overflowed: no text is accepted until the next
};

}  // namespace rotor::grammar
