#include "engine/token_trie_cache.h"

#include <string_view>
#include <vector>

namespace rotor {

const grammar::TokenTrie& TokenTrieCache::Get() const {
  std::call_once(once_, [this] {
    std::vector<std::string_view> texts(tokenizer_.n_vocab());
    for (int32_t id = 0; id < tokenizer_.n_vocab(); ++id) texts[id] = tokenizer_.PieceView(id);
    trie_ = std::make_unique<grammar::TokenTrie>(texts);
  });
  return *trie_;
}

}  // namespace rotor
