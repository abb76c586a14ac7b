// The algorithm behind a Tokenizer, one per tokenizer.ggml.model ("llama" =
// SentencePiece, spm.h; "gpt2" = byte-level BPE, bpe.h). The Tokenizer owns the
// vocabulary, special tokens, BOS/EOS and decoding policy; a model only turns
// plain-text fragments into ids and ids into bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rotor {

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;

  // Appends the ids of `text`, a non-empty fragment with no special token in it.
  // `after_special`: the fragment starts the input or follows a special token
  // (SentencePiece then adds its space prefix).
  virtual void EncodeFragment(std::string_view text, bool after_special,
                              std::vector<int32_t>* out) const = 0;

  // The bytes token `id` (in range) decodes to. Control and unknown tokens give
  // their text; the Tokenizer decides whether to show it.
  virtual std::string Piece(int32_t id) const = 0;
};

}  // namespace rotor
