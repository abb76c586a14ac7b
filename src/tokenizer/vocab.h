// The vocabulary a tokenizer is built from, as stored under tokenizer.ggml.* in
// a GGUF file, and its validation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace rotor {

class GgufFile;

// tokenizer.ggml.token_type values (SentencePiece's piece types).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

std::string_view TokenTypeName(TokenType type);

// The byte a byte token's text "<0xNN>" stands for (hex in either case); -1 if
// `text` is not of that form.
int ParseByteToken(std::string_view text);

// tokenizer.ggml.model: "llama" is SentencePiece (SPM), "gpt2" byte-level BPE.
inline constexpr std::string_view kSpmModelName = "llama";
inline constexpr std::string_view kBpeModelName = "gpt2";

struct Vocab {
  std::string model{kSpmModelName};
  // tokenizer.ggml.pre: the BPE pre-tokenizer ("llama-bpe", "qwen2", ...; see
  // pre_tokenizer.h). Unused by SPM.
  std::string pre{"default"};
  // tokenizer.ggml.merges, BPE only: "left right" texts, rank = index.
  std::vector<std::string> merges;
  std::vector<std::string> tokens;  // [n_vocab] raw token texts ("▁the", "<0x0A>", "<s>")
  std::vector<float> scores;        // [n_vocab] or empty (all 0)
  std::vector<TokenType> types;     // [n_vocab] or empty (all normal)
  // Special ids; -1 where the vocabulary has none.
  int32_t bos = 1;
  int32_t eos = 2;
  int32_t unk = 0;
  int32_t pad = -1;
  int32_t eot = -1;  // end of turn (chat models)
  int32_t eom = -1;  // end of message (tool calls)
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;
};

// Checks sizes, special ids and token texts. Errors start with "tokenizer: ".
// A model name other than "llama" or "gpt2", or (gpt2) an unknown pre-tokenizer,
// is an error naming it.
Status ValidateVocab(const Vocab& vocab);

// Reads tokenizer.ggml.{model, pre, tokens, scores, token_type, merges,
// bos_token_id, eos_token_id, unknown_token_id, padding_token_id, eot_token_id,
// eom_token_id, add_bos_token, add_eos_token, add_space_prefix} with llama.cpp's
// defaults for absent keys, which depend on the model: SPM bos 1, eos 2, unk 0,
// add_bos, space prefix; BPE bos = eos = 11, no unk, no space prefix, add_bos
// only for Llama-3-style pre-tokenizers; an absent pre is "default" (with a
// warning, as in llama.cpp). Validates the result (ValidateVocab) so a bad file is an error
// naming the key and the value.
Result<Vocab> VocabFromGguf(const GgufFile& file);

// Text -> id, built once per vocabulary. Where two tokens share a text the
// later id wins, as in llama.cpp.
class TokenIndex {
 public:
  TokenIndex() = default;
  explicit TokenIndex(const std::vector<std::string>& tokens);
  // -1 if no token has exactly this text.
  int32_t Find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? -1 : it->second;
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> map_;
};

}  // namespace rotor
