#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace rotor {

namespace {

// A run of the escaped text, linked to its neighbours; merged-away symbols keep
// len 0.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;
  uint32_t len;
};

// A candidate merge of two adjacent symbols whose joined text is a token.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t len;  // joined length when queued; stale if either side changed since
};

// Orders the queue: highest score on top, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmModel::SpmModel(const Vocab& vocab, const TokenIndex& index) : vocab_(vocab), index_(index) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = index_.Find(std::string_view(name, sizeof(name)));
    if (id < 0) {
      const char c = static_cast<char>(b);
      id = index_.Find(std::string_view(&c, 1));
    }
    byte_ids_[b] = id >= 0 ? id : vocab_.unk;
  }
}

std::string SpmModel::Escape(std::string_view text, bool space_prefix) {
  std::string s;
  s.reserve(text.size() + 8);
  if (space_prefix) s.append(kSpmSpace);
  for (char c : text) {
    if (c == ' ')
      s.append(kSpmSpace);
    else
      s.push_back(c);
  }
  return s;
}

void SpmModel::EncodeFragment(std::string_view text, bool after_special,
                              std::vector<int32_t>* out) const {
  const std::string s = Escape(text, vocab_.add_space_prefix && after_special);
  if (s.empty()) return;

  // One symbol per UTF-8 character; an invalid sequence is a symbol of its
  // maximal valid prefix (at least one byte). llama.cpp sizes a symbol by its
  // lead byte alone, so "\xff x" there swallows the escaped space's three
  // bytes into the \xff symbol and decodes with U+2581 where the space was;
  // on valid text the two agree.
  std::vector<Symbol> symbols;
  symbols.reserve(s.size());
  for (size_t off = 0; off < s.size();) {
    const size_t len = ScanUtf8(std::string_view(s).substr(off)).length;
    const auto i = static_cast<int32_t>(symbols.size());
    symbols.push_back({i - 1, off + len == s.size() ? -1 : i + 1, static_cast<uint32_t>(off),
                       static_cast<uint32_t>(len)});
    off += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = symbols[left].len + symbols[right].len;
    const int32_t id = index_.Find(std::string_view(s).substr(symbols[left].offset, len));
    if (id < 0) return;
    queue.push({Score(id), left, right, len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Skip pairs that an earlier merge changed.
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = std::string_view(s).substr(symbols[i].offset, symbols[i].len);
    const int32_t id = index_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_ids_[static_cast<unsigned char>(c)];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

std::string SpmModel::Piece(int32_t id) const {
  const std::string& text = vocab_.tokens[id];
  switch (Type(id)) {
    case TokenType::kNormal: {
      std::string piece;
      piece.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (std::string_view(text).substr(i, kSpmSpace.size()) == kSpmSpace) {
          piece.push_back(' ');
          i += kSpmSpace.size();
        } else {
          piece.push_back(text[i++]);
        }
      }
      return piece;
    }
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
  return std::string();  // llama.cpp shows nothing for these
}

}  // namespace rotor
