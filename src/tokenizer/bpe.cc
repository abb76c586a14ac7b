#include "tokenizer/bpe.h"

#include <queue>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "tokenizer/byte_unicode.h"

namespace rotor {

namespace {

// A run of the word's bytes, linked to its neighbours; merged-away symbols
// keep len 0.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;
  uint32_t len;
  int32_t id;  // symbol id of the text, -1 if it takes part in no merge
};

// A merge of two adjacent symbols, queued with the ids they had then; stale
// once either side has changed.
struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;  // symbol id after the merge
};

// Orders the queue: lowest rank on top, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::Create(const Vocab& vocab, const TokenIndex& index) {
  ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(vocab.pre));
  std::unique_ptr<BpeModel> model(new BpeModel(vocab, index, std::move(pre)));
  RETURN_IF_ERROR(model->Build());
  return model;
}

void BpeModel::MergeTable::Reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  entries_.assign(cap, Entry{});
  mask_ = cap - 1;
  size_ = 0;
}

void BpeModel::MergeTable::Insert(uint64_t key, Merge merge) {
  CHECK_LT(2 * size_, entries_.size());
  for (size_t i = Slot(key);; i = (i + 1) & mask_) {
    Entry& e = entries_[i];
    if (e.key == key) return;
    if (e.key == kEmpty) {
      e = {key, merge};
      ++size_;
      return;
    }
  }
}

Status BpeModel::Build() {
  const std::vector<std::string>& merges = vocab_.merges;
  // Two passes so that only views are hashed: first every text that appears
  // as a side of a merge gets a symbol id; then each merge's result text gets
  // the id of that same text as a side, or a fresh id if it is never a side
  // (such a symbol takes part in no later merge, so it needs no identity
  // beyond its token).
  std::vector<uint32_t> spaces(merges.size());
  std::unordered_map<std::string_view, int32_t> sides;
  sides.reserve(merges.size() * 2);
  auto intern = [&](std::string_view text) {
    auto [it, added] = sides.try_emplace(text, static_cast<int32_t>(symbol_token_.size()));
    if (added) symbol_token_.push_back(index_.Find(text));
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    // "left right"; searching from 1 lets a left side be a lone space.
    const size_t space = merges[i].find(' ', 1);
    if (space == std::string::npos) {
      return Errorf(
          "tokenizer: tokenizer.ggml.merges[{}] = '{}' is not two texts joined by a space", i,
          merges[i]);
    }
    spaces[i] = static_cast<uint32_t>(space);
    const std::string_view m = merges[i];
    intern(m.substr(0, space));
    intern(m.substr(space + 1));
  }
  merges_.Reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    const std::string_view left = m.substr(0, spaces[i]), right = m.substr(spaces[i] + 1);
    joined.assign(left);
    joined.append(right);
    int32_t result;
    if (auto it = sides.find(joined); it != sides.end()) {
      result = it->second;
    } else {
      result = static_cast<int32_t>(symbol_token_.size());
      symbol_token_.push_back(index_.Find(joined));
    }
    merges_.Insert(PairKey(sides.at(left), sides.at(right)),
                   Merge{static_cast<int32_t>(i), result});
  }
  const int32_t unk = vocab_.unk;
  for (int b = 0; b < 256; ++b) {
    const std::string_view text = ByteToUnicode(static_cast<uint8_t>(b));
    auto it = sides.find(text);
    byte_symbol_[b] = it == sides.end() ? -1 : it->second;
    const int32_t id = index_.Find(text);
    byte_token_[b] = id >= 0 ? id : unk;
  }
  return Status::Ok();
}

void BpeModel::EncodeFragment(std::string_view text, bool /*after_special*/,
                              std::vector<int32_t>* out) const {
  for (std::string_view word : pre_.Split(text)) EncodeWord(word, out);
}

void BpeModel::EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const {
  for (char c : bytes) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) out->push_back(id);
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (pre_.spec().ignore_merges) {
    std::string encoded;
    encoded.reserve(word.size() * 2);
    AppendByteEncoded(word, &encoded);
    const int32_t id = index_.Find(encoded);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (word.size() == 1) {
    EmitBytes(word, out);
    return;
  }

  // One symbol per byte: each byte is one character of the mapped text.
  std::vector<Symbol> symbols(word.size());
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {i - 1, i + 1 == n ? -1 : i + 1, static_cast<uint32_t>(i), 1,
                  byte_symbol_[static_cast<uint8_t>(word[i])]};
  }
  std::vector<Bigram> storage;
  storage.reserve(word.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{},
                                                                     std::move(storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id, r = symbols[right].id;
    if (l < 0 || r < 0) return;
    const Merge* m = merges_.Find(PairKey(l, r));
    if (m == nullptr) return;
    queue.push({m->rank, left, right, l, r, m->result});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.len == 0 || right.len == 0 || left.id != top.left_id || right.id != top.right_id) {
      continue;
    }
    left.id = top.result;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t id = s.id >= 0 ? symbol_token_[s.id] : -1;
    if (id >= 0) {
      out->push_back(id);
    } else {
      EmitBytes(word.substr(s.begin, s.len), out);
    }
  }
}

std::string BpeModel::Piece(int32_t id) const {
  const std::string& text = vocab_.tokens[id];
  switch (vocab_.types.empty() ? TokenType::kNormal : vocab_.types[id]) {
    case TokenType::kNormal:
      return ByteDecode(text);
    case TokenType::kByte:
      return std::string(1, static_cast<char>(ParseByteToken(text)));
    case TokenType::kUnknown:
    case TokenType::kControl:
    case TokenType::kUserDefined:
      return text;
    case TokenType::kUnused:
    case TokenType::kUndefined:
      break;
  }
  return std::string();
}

}  // namespace rotor
