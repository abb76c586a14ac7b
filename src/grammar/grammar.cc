#include "grammar/grammar.h"

namespace rotor::grammar {

bool Element::Matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in |= cp >= lo && cp <= hi;
  return in != negated;
}

bool Element::MatchesAnyIn(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Some code point of [lo, hi] lies outside every range: walk up from lo,
  // jumping past each range that covers the current point.
  uint32_t cp = lo;
  for (bool moved = true; moved && cp <= hi;) {
    moved = false;
    for (const auto& [a, b] : ranges)
      if (cp >= a && cp <= b) {
        if (b >= hi) return false;
        cp = b + 1;
        moved = true;
      }
  }
  return cp <= hi;
}

int32_t Grammar::Find(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

std::string_view JsonGrammarText() {
  return R"(# One JSON object (rotor's built-in json_object grammar).
root    ::= object
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( "," ws member )* )? "}"
member  ::= string ws ":" ws value ws
array   ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number  ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
ws      ::= ( [ \t\n] [ \t]{0,16} )?
)";
}

}  // namespace rotor::grammar
