// The vocabulary's token texts as a byte trie, for masking a vocabulary with
// a grammar (Matcher::AllowedTokens): a prefix that many tokens share
// ("\"", " the", "  ") is matched once instead of once per token, and a
// prefix the grammar refuses drops every token under it at once.
//
// Layout: the nodes in depth-first preorder, each with its byte, its depth
// and the index just past its subtree, so a walk is a loop over the array
// that jumps past a refused subtree; the ids whose text ends at a node are a
// run of `ids`. The root (the empty text) is implicit.
//
//   texts {0:"a", 1:"ab", 2:"b", 3:""}    nodes  0:'a' d1 end 2 ids{0}
//                                                1:'b' d2 end 2 ids{1}
//                                                2:'b' d1 end 3 ids{2}
//   (an empty text is in no node: nothing to match)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace rotor::grammar {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte;
    uint16_t depth;       // 1 for a first byte; texts longer than 65535 bytes are left out
    uint32_t end;         // index past this node's subtree
    uint32_t ids_begin;   // [ids_begin, ids_end) of ids(): tokens whose text ends here
    uint32_t ids_end;
  };

  // texts[id] is token id's text (bytes, any content).
  explicit TokenTrie(std::span<const std::string_view> texts);

  std::span<const Node> nodes() const { return nodes_; }
  std::span<const int32_t> ids() const { return ids_; }
  int max_depth() const { return max_depth_; }
  int32_t n_tokens() const { return n_tokens_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  int max_depth_ = 0;
  int32_t n_tokens_ = 0;
};

}  // namespace rotor::grammar
