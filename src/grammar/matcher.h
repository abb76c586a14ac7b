// Where a text is in a grammar: the set of parse stacks that the text so far
// leaves open (llama.cpp's approach). A stack is a list of grammar positions,
// its top the element the next code point must match; an empty stack means
// the text so far is a complete sentence. Text arrives as UTF-8 bytes in
// arbitrary pieces (a token may end inside a character: those bytes are held
// and checked against the code points they could still become).
//
// Cost: Accepts() walks the stacks once per code point of the text without
// touching the matcher's state; stacks are deduplicated after every step, so
// their number stays bounded by the grammar's ambiguity at that point.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace rotor::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Would the text so far followed by `bytes` still be a prefix of a sentence?
  // An empty `bytes` is accepted iff the matcher is not dead.
  bool Accepts(std::string_view bytes) const;
  // Appends `bytes`; false (and nothing changes) if they are not accepted.
  bool Accept(std::string_view bytes);
  // The text so far is a whole sentence of the grammar (generation may end).
  bool CanEnd() const;
  // Nothing can follow the text so far (generation must end).
  bool Done() const;
  // Back to the empty text.
  void Reset();

  const Grammar& grammar() const { return *grammar_; }

 private:
  using Stack = std::vector<const Element*>;
  struct State {
    std::vector<Stack> stacks;
    // A character whose first bytes arrived: its bits so far and how many
    // continuation bytes are still due (0: none pending).
    uint32_t partial = 0;
    int need = 0;
    int len = 0;  // the pending character's length in bytes
  };

  // Pushes `s` with its top resolved to a character element (or empty).
  void Expand(Stack s, std::vector<Stack>* out) const;
  // The stacks after matching `cp` from each of `in` (deduplicated).
  void Step(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const;
  // `from` followed by `bytes` into *out; false when rejected (*out is then
  // unspecified).
  bool Feed(const State& from, std::string_view bytes, State* out) const;

  std::shared_ptr<const Grammar> grammar_;
  State state_;
};

}  // namespace rotor::grammar
