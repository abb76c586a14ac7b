#include "grammar/token_trie.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace rotor::grammar {

TokenTrie::TokenTrie(std::span<const std::string_view> texts)
    : n_tokens_(static_cast<int32_t>(texts.size())) {
  CHECK(texts.size() < std::numeric_limits<int32_t>::max());
  // Sorted texts put every prefix right before the texts that extend it, so
  // one pass builds the preorder: keep the path of open nodes, close those
  // past the common prefix with the previous text, open the rest.
  std::vector<int32_t> order;
  order.reserve(texts.size());
  for (size_t id = 0; id < texts.size(); ++id)
    if (!texts[id].empty() && texts[id].size() <= std::numeric_limits<uint16_t>::max())
      order.push_back(static_cast<int32_t>(id));
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return texts[a] < texts[b]; });
  std::vector<uint32_t> path;  // [depth - 1]: the open node at each depth
  std::string_view prev;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
  };
  for (const int32_t id : order) {
    const std::string_view t = texts[id];
    const size_t common =
        std::mismatch(t.begin(), t.end(), prev.begin(), prev.end()).first - t.begin();
    close_to(common);
    for (size_t d = path.size(); d < t.size(); ++d) {
      const auto here = static_cast<uint32_t>(ids_.size());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(Node{.byte = static_cast<uint8_t>(t[d]),
                            .depth = static_cast<uint16_t>(d + 1),
                            .end = 0,
                            .ids_begin = here,
                            .ids_end = here});
    }
    // The text ends at the deepest open node: new, or the previous text's
    // (the same text again, so its ids stay one run).
    ids_.push_back(id);
    nodes_[path.back()].ids_end = static_cast<uint32_t>(ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(t.size()));
    prev = t;
  }
  close_to(0);
}

}  // namespace rotor::grammar
