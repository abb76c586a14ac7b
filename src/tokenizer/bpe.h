// Byte-level BPE (tokenizer.ggml.model = "gpt2": GPT-2, Llama 3, Qwen 2,
// SmolLM) as llama.cpp runs it: the pre-tokenizer cuts the text into words;
// each word's bytes are shown through GPT-2's byte->Unicode mapping, one
// symbol per byte; then adjacent symbols are merged, lowest merge rank first
// (the rank is the index in tokenizer.ggml.merges; leftmost on ties), until no
// pair of neighbours has a merge. Each final symbol is a token; one that is not
// (a malformed vocabulary) falls back to the tokens of its single bytes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/vocab.h"

namespace rotor {

class BpeModel : public TokenizerModel {
 public:
  // `vocab` and `index` must outlive the model (the Tokenizer owns all three).
  // Errors: an unknown vocab.pre, a merge without a space.
  static Result<std::unique_ptr<BpeModel>> Create(const Vocab& vocab, const TokenIndex& index);

  // `after_special` does not matter for byte-level BPE (no space prefix).
  void EncodeFragment(std::string_view text, bool after_special,
                      std::vector<int32_t>* out) const override;
  // Normal tokens: their text mapped back to bytes ("Ġthe" -> " the").
  // Control, unknown and user-defined: their text. Byte tokens <0xNN>: that byte.
  std::string Piece(int32_t id) const override;

  const PreTokenizer& pre_tokenizer() const { return pre_; }
  size_t n_merges() const { return merges_.size(); }  // distinct (left, right) pairs

 private:
  // Where a merge of two adjacent symbols leads.
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the joined text
  };
  // PairKey(left, right) -> Merge, open addressing with linear probing: one
  // flat array, no allocation per entry (Llama 3 has 280k merges).
  class MergeTable {
   public:
    void Reserve(size_t n);
    // Keeps the first merge of a pair (the lowest rank, as llama.cpp).
    void Insert(uint64_t key, Merge merge);
    const Merge* Find(uint64_t key) const {
      for (size_t i = Slot(key);; i = (i + 1) & mask_) {
        const Entry& e = entries_[i];
        if (e.key == key) return &e.merge;
        if (e.key == kEmpty) return nullptr;
      }
    }
    size_t size() const { return size_; }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // no valid pair has both ids -1
    struct Entry {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    size_t Slot(uint64_t key) const {
      return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    }
    std::vector<Entry> entries_;  // [power of two >= 2 * size]
    size_t mask_ = 0;
    size_t size_ = 0;
  };

  BpeModel(const Vocab& vocab, const TokenIndex& index, PreTokenizer pre)
      : vocab_(vocab), index_(index), pre_(std::move(pre)) {}
  Status Build();
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  void EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  const Vocab& vocab_;
  const TokenIndex& index_;
  PreTokenizer pre_;
  // Symbols are the distinct texts that take part in merges (either side or
  // result), numbered from 0, so merging compares integers, not strings.
  MergeTable merges_;
  std::vector<int32_t> symbol_token_;     // [n_symbols] token of the text, or -1
  std::array<int32_t, 256> byte_symbol_;  // [byte] symbol of its 1-char text, or -1
  // The token of each byte's 1-char text; else <unk>; else -1 (dropped).
  std::array<int32_t, 256> byte_token_;
};

}  // namespace rotor
