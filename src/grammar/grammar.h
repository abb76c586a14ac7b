// A parsed GBNF grammar (llama.cpp's format, docs/GRAMMAR.md) in the shape
// the matcher walks: rules of alternatives, each a sequence of elements that
// are either a character class or a reference to another rule. Repetition,
// optional parts and groups are rewritten into generated rules by the parser,
// so the matcher only ever sees classes and references.
//
//   root ::= "a" [0-9]+ ("x" | y)?      rule "root", one alternative:
//                                        'a', ref(root_1), ref(root_3)
//
// Every alternative ends with a kEnd element, so a pointer to an element is a
// position in the grammar (what the matcher's stacks hold).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rotor::grammar {

struct Element {
  enum class Kind : uint8_t {
    kEnd,    // end of an alternative
    kChars,  // one code point in `ranges` (or not in them, if `negated`)
    kRef,    // the rule `rule`
  };
  Kind kind = Kind::kEnd;
  bool negated = false;
  int32_t rule = -1;
  // Inclusive code point ranges [first, second].
  std::vector<std::pair<uint32_t, uint32_t>> ranges = {};

  bool Matches(uint32_t cp) const;
  // Some code point in [lo, hi] matches (a partly received UTF-8 character).
  bool MatchesAnyIn(uint32_t lo, uint32_t hi) const;
};

using Alternative = std::vector<Element>;  // ends with kEnd

struct Rule {
  std::string name;
  std::vector<Alternative> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;
  // Index of a rule by name, -1 if none.
  int32_t Find(std::string_view name) const;
};

// Parses GBNF text. Errors read "grammar: line 3, column 7: expected '::='";
// undefined rules, a missing root and left recursion are errors too (the
// matcher could not terminate on them). Never crashes or hangs on any input
// (the fuzz harness's entry point).
Result<std::shared_ptr<const Grammar>> ParseGrammar(std::string_view text);

// The built-in JSON grammar: one JSON object (OpenAI's json_object), with
// bounded runs of whitespace so a model cannot pad forever.
std::string_view JsonGrammarText();

// JSON Schema (text) -> GBNF text for the supported subset (json_schema.h).
Result<std::string> JsonSchemaToGrammar(std::string_view schema_json);

}  // namespace rotor::grammar
