// SentencePiece (tokenizer.ggml.model = "llama") as llama.cpp runs it: the text
// is split into UTF-8 characters, then adjacent symbols are merged, highest
// vocabulary score first (leftmost on ties), while the merged text is a token;
// what is left without a token becomes byte tokens <0xNN>.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_model.h"
#include "tokenizer/vocab.h"

namespace rotor {

// "\xE2\x96\x81", U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

class SpmModel : public TokenizerModel {
 public:
  // `vocab` and `index` must outlive the model (the Tokenizer owns all three).
  SpmModel(const Vocab& vocab, const TokenIndex& index);

  void EncodeFragment(std::string_view text, bool after_special,
                      std::vector<int32_t>* out) const override;
  std::string Piece(int32_t id) const override;

  // Spaces -> U+2581, with one more in front when `space_prefix`.
  static std::string Escape(std::string_view text, bool space_prefix);

 private:
  float Score(int32_t id) const { return vocab_.scores.empty() ? 0.0f : vocab_.scores[id]; }
  TokenType Type(int32_t id) const {
    return vocab_.types.empty() ? TokenType::kNormal : vocab_.types[id];
  }

  const Vocab& vocab_;
  const TokenIndex& index_;
  // The token each byte falls back to: <0xNN>, else the one-byte text, else
  // <unk>; -1 if none of those exists (the byte is then dropped).
  std::array<int32_t, 256> byte_ids_;
};

}  // namespace rotor
