// Grammars (grammar/grammar.h) on arbitrary bytes: the GBNF parser, the JSON
// Schema converter, and the matcher fed text in pieces.
//
// Input: a mode byte, then a definition and a text separated by '\x00'.
//   mode even: the definition is GBNF;
//   mode odd:  the definition is a JSON Schema; whatever GBNF the converter
//              writes must parse (a converter bug otherwise).
// The text is fed to a matcher of the parsed grammar in pieces whose sizes come
// from the mode byte; besides no crash or hang: Accepts(x) predicts Accept(x),
// a rejected piece changes nothing, a Reset() matcher agrees with a new one, and
// the vocabulary mask (AllowedTokens over a trie of the text's short pieces,
// at the first pieces) equals Accepts() of each, with and without a leading-space skip.
// A grammar too ambiguous to follow (Matcher::overflowed) ends the feeding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "grammar: %s\n", what);
    std::abort();
  }
}

// The mask from the matcher's state equals Accepts() of every token; false
// when the grammar was too ambiguous to decide (the feeding ends).
bool CheckMask(const rotor::grammar::Matcher& m, const std::vector<std::string_view>& vocab,
               const rotor::grammar::TokenTrie& trie) {
  std::vector<uint8_t> allowed(vocab.size());
  for (const bool skip : {false, true}) {
    if (!m.AllowedTokens(trie, allowed, skip)) return false;
    for (size_t id = 0; id < vocab.size(); ++id) {
      std::string_view t = vocab[id];
      if (skip) t.remove_prefix(std::min(t.size(), t.find_first_not_of(" \t\n\r\f\v")));
      const bool want = !t.empty() && m.Accepts(t);
      if (m.overflowed()) return false;
      Check((allowed[id] != 0) == want, "the trie mask and Accepts() disagree");
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t sep = in.find('\0');
  const std::string_view definition = in.substr(0, sep);
  const std::string_view text = sep == std::string_view::npos ? "" : in.substr(sep + 1);
  // Long texts only slow the search down; the parser sees the whole definition.
  if (text.size() > 512) return 0;

  std::string gbnf(definition);
  if (mode & 1) {
    auto converted = rotor::grammar::JsonSchemaToGrammar(definition);
    if (!converted.ok()) return 0;
    gbnf = std::move(*converted);
  }
  auto grammar = rotor::grammar::ParseGrammar(gbnf);
  if (mode & 1) Check(grammar.ok(), "the JSON Schema converter wrote GBNF that does not parse");
  if (!grammar.ok()) return 0;

  rotor::grammar::Matcher matcher(*grammar);
  const size_t piece = 1 + (mode >> 1) % 7;  // 1..7 bytes: pieces end inside characters
  // A vocabulary of the text's pieces of 1..4 bytes (at most 64 of them),
  // masked at the first 16 pieces: a bounded cost per input (each Accepts()
  // may take a step's whole budget).
  std::vector<std::string_view> vocab;
  for (size_t at = 0; at < text.size() && vocab.size() < 64; ++at)
    for (size_t len = 1; len <= 4 && at + len <= text.size(); ++len)
      vocab.push_back(text.substr(at, len));
  const rotor::grammar::TokenTrie trie(vocab);
  bool masks = true;
  for (size_t at = 0; at < text.size(); at += piece) {
    const std::string_view bytes = text.substr(at, piece);
    if (masks && at < 16 * piece) masks = CheckMask(matcher, vocab, trie);
    matcher.ClearOverflow();
    const bool predicted = matcher.Accepts(bytes);
    const bool can_end = matcher.CanEnd();
    Check(matcher.Accept(bytes) == predicted, "Accepts() and Accept() disagree");
    if (!predicted) Check(matcher.CanEnd() == can_end, "a rejected piece changed the state");
    (void)matcher.Done();
    // Too ambiguous to go on (each further piece would cost the whole step
    // budget again): the engine ends the reply here with an error.
    if (matcher.overflowed()) break;
  }
  matcher.Reset();
  rotor::grammar::Matcher fresh(*grammar);
  Check(matcher.CanEnd() == fresh.CanEnd() && matcher.Done() == fresh.Done(),
        "a Reset() matcher differs from a new one");
  return 0;
}
