#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/eog.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"

namespace rotor {

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  ASSIGN_OR_RETURN(Vocab vocab, VocabFromGguf(file));
  return FromVocab(std::move(vocab));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(Vocab vocab) {
  RETURN_IF_ERROR(ValidateVocab(vocab));
  std::unique_ptr<Tokenizer> tok(new Tokenizer(std::move(vocab)));
  RETURN_IF_ERROR(tok->Init());
  return tok;
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

Status Tokenizer::Init() {
  const size_t n = vocab_.tokens.size();
  // An empty text could never be typed or matched; llama.cpp renames it.
  for (size_t i = 0; i < n; ++i) {
    if (vocab_.tokens[i].empty()) vocab_.tokens[i] = fmt::format("[EMPTY_{}]", i);
  }
  // Before anything reads token types: it may turn end-of-turn tokens into control.
  eog_ids_ = FindEndOfGeneration(&vocab_);
  index_ = TokenIndex(vocab_.tokens);
  if (vocab_.model == kBpeModelName) {
    ASSIGN_OR_RETURN(model_, BpeModel::Create(vocab_, index_));
  } else {
    model_ = std::make_unique<SpmModel>(vocab_, index_);
  }
  pieces_.reserve(n);
  for (size_t i = 0; i < n; ++i) pieces_.push_back(model_->Piece(static_cast<int32_t>(i)));

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = Type(static_cast<int32_t>(i));
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) {
      special_ids_.push_back(static_cast<int32_t>(i));
    }
  }
  // Longest first so that a special token containing another wins; ties by id
  // (llama.cpp's order among equal lengths is unspecified).
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[a].size() > vocab_.tokens[b].size();
  });
  return Status::Ok();
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return vocab_.tokens[id];
}

TokenType Tokenizer::Type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return vocab_.types.empty() ? TokenType::kNormal : vocab_.types[id];
}

float Tokenizer::Score(int32_t id) const {
  if (id < 0 || id >= n_vocab() || vocab_.scores.empty()) return 0.0f;
  return vocab_.scores[id];
}

std::string_view Tokenizer::PieceView(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return {};
  if (!special) {
    const TokenType t = Type(id);
    if (t == TokenType::kControl || t == TokenType::kUnknown) return {};
  }
  return pieces_[id];
}

std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecial(std::string_view text,
                                                         bool parse_special) const {
  std::vector<Fragment> fragments = {{text, -1}};
  std::vector<Fragment> next;
  for (int32_t id : special_ids_) {
    const TokenType t = Type(id);
    // User-defined tokens are always whole tokens; control and unknown ones
    // only when the caller parses specials (llama.cpp's tokenizer_st_partition).
    if (!parse_special && (t == TokenType::kControl || t == TokenType::kUnknown)) continue;
    const std::string_view special = vocab_.tokens[id];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t start = 0;
      for (size_t match; (match = f.text.find(special, start)) != std::string_view::npos;) {
        if (match > start) next.push_back({f.text.substr(start, match - start), -1});
        next.push_back({special, id});
        start = match + special.size();
      }
      if (start < f.text.size()) next.push_back({f.text.substr(start), -1});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  // The start of the input counts as after a special.
  const TextPiece piece{text, parse_special};
  EncodeAppend(std::span<const TextPiece>(&piece, 1), /*after_special=*/true, &ids);
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) ids.push_back(vocab_.eos);
  return ids;
}

bool Tokenizer::EncodeAppend(std::span<const TextPiece> pieces, bool after_special,
                             std::vector<int32_t>* out) const {
  std::string run;  // plain text not yet encoded, across pieces
  auto flush = [&] {
    if (run.empty()) return;
    model_->EncodeFragment(run, after_special, out);
    after_special = false;
    run.clear();
  };
  for (const TextPiece& p : pieces) {
    if (p.text.empty()) continue;
    for (const Fragment& f : SplitSpecial(p.text, p.parse_special)) {
      if (f.id >= 0) {
        flush();
        out->push_back(f.id);
        after_special = true;
      } else {
        run.append(f.text);
      }
    }
  }
  flush();
  return after_special;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool special) const {
  std::string text;
  bool strip = vocab_.add_space_prefix;
  for (int32_t id : ids) {
    std::string_view piece = PieceView(id, special);
    if (piece.empty()) continue;
    if (strip && piece.front() == ' ') piece.remove_prefix(1);
    strip = false;
    text.append(piece);
  }
  return text;
}

}  // namespace rotor
