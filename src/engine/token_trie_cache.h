// The vocabulary's token texts as a trie (grammar/token_trie.h), built on
// first use: a grammar's mask of the vocabulary walks it (SampleStep). One per
// tokenizer, shared by every sequence that samples from it; thread-safe.
#pragma once

#include <memory>
#include <mutex>

#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace rotor {

class TokenTrieCache {
 public:
  explicit TokenTrieCache(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // The trie of every token's piece (PieceView(id), not special).
  const grammar::TokenTrie& Get() const;

 private:
  const Tokenizer& tokenizer_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<grammar::TokenTrie> trie_;
};

}  // namespace rotor
