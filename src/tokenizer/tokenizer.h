// Text <-> token ids for Llama-family GGUF models, matching llama.cpp:
// SentencePiece (tokenizer.ggml.model "llama") and byte-level BPE ("gpt2":
// Llama 3, Qwen 2, SmolLM, GPT-2).
//
//   ASSIGN_OR_RETURN(auto tok, Tokenizer::FromGguf(*gguf));
//   std::vector<int32_t> ids = tok->Encode("Once upon a time", /*add_special=*/true);
//   StreamDecoder out(*tok);
//   for (int32_t id : generated) fputs(out.Push(id).c_str(), stdout);
//   fputs(out.Flush().c_str(), stdout);
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/vocab.h"

namespace rotor {

class GgufFile;

// Immutable once built: every method is const and safe to call from several
// threads. Not movable (the model refers to the vocabulary); hold it by pointer.
class Tokenizer {
 public:
  // From the tokenizer.ggml.* keys; errors name the key and the value. Works
  // on vocabulary-only files (no tensors).
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // From a vocabulary built in memory (tests, converters). The vocabulary is
  // completed as FindEndOfGeneration (eog.h) describes.
  static Result<std::unique_ptr<Tokenizer>> FromVocab(Vocab vocab);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text -> ids (llama.cpp's llama_tokenize). `add_special`: BOS in front if the
  // vocabulary's add_bos_token, EOS at the end if its add_eos_token.
  // `parse_special`: text such as "<s>" or "<|im_start|>" becomes the control
  // token; otherwise control texts are ordinary text (BPE splits
  // "<|endoftext|>" into "<", "|", "endoftext", ...) and only user-defined
  // tokens are matched as whole tokens. Never fails: every byte is encoded,
  // invalid UTF-8 included (SPM byte tokens; BPE byte-level symbols).
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              bool parse_special = false) const;
  // Encode for text made of pieces of which only some may hold special tokens
  // (chat markup may, message content may not), continuing earlier input:
  // special tokens are matched only in pieces with `parse_special`, and the
  // plain text between them is one run across piece boundaries, tokenized as
  // if the pieces were one text. Appends to `out`, adding nothing around.
  // `after_special`: nothing came before, or it ended with a special token
  // (SentencePiece then adds its space prefix, as Encode does at the start).
  // Returns the value to pass for the text that follows.
  struct TextPiece {
    std::string_view text;
    bool parse_special = false;
  };
  bool EncodeAppend(std::span<const TextPiece> pieces, bool after_special,
                    std::vector<int32_t>* out) const;

  // Ids -> text: the concatenated pieces (see TokenToPiece). When the
  // vocabulary adds a space prefix, the first piece that produces text loses
  // one leading space (so Decode(Encode(s, true)) == s). Unlike llama.cpp's
  // llama_detokenize, this also happens after a leading BOS, as in SentencePiece
  // and llama2.c. Out-of-range ids produce nothing. The result is raw bytes and
  // may be invalid UTF-8 (use StreamDecoder for display).
  std::string Decode(std::span<const int32_t> ids, bool special = false) const;

  // The bytes of one token: SPM "▁" -> ' ', <0xNN> -> that byte; BPE "Ġ" -> ' ',
  // every mapped character back to its byte (byte_unicode.h). Control and unknown
  // tokens give "" unless `special` (then their text, e.g. "<s>"); unused ones
  // always "". Out-of-range ids give "".
  std::string TokenToPiece(int32_t id, bool special = false) const {
    return std::string(PieceView(id, special));
  }
  std::string_view PieceView(int32_t id, bool special = false) const;

  // The token whose text is exactly `text` ("<s>", "▁the"), or -1.
  int32_t TokenId(std::string_view text) const { return index_.Find(text); }
  // The raw vocabulary text ("▁the", "<0x0A>"); "" if out of range.
  std::string_view TokenText(int32_t id) const;
  TokenType Type(int32_t id) const;
  float Score(int32_t id) const;

  int32_t bos() const { return vocab_.bos; }  // -1: none
  int32_t eos() const { return vocab_.eos; }
  int32_t unk() const { return vocab_.unk; }
  int32_t pad() const { return vocab_.pad; }
  int32_t eot() const { return vocab_.eot; }  // -1: none
  int32_t eom() const { return vocab_.eom; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  bool add_space_prefix() const { return vocab_.add_space_prefix; }
  const std::string& model_name() const { return vocab_.model; }
  const std::string& pre() const { return vocab_.pre; }  // BPE pre-tokenizer name
  const Vocab& vocab() const { return vocab_; }

  // Generation stops here: EOS, EOT, EOM, or a token with an end-of-turn text
  // such as <|eot_id|>, <|im_end|>, <|endoftext|>, <end_of_turn> (eog.h).
  bool IsEndOfGeneration(int32_t id) const {
    return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
  }
  // Every end-of-generation id, sorted.
  std::span<const int32_t> eog_ids() const { return eog_ids_; }
  bool IsControl(int32_t id) const { return Type(id) == TokenType::kControl; }

 private:
  explicit Tokenizer(Vocab vocab);
  Status Init();

  // A piece of the input: raw text (id -1) or an already matched special token.
  struct Fragment {
    std::string_view text;
    int32_t id;
  };
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;

  Vocab vocab_;
  TokenIndex index_;
  std::unique_ptr<TokenizerModel> model_;
  std::vector<std::string> pieces_;   // [n_vocab] model_->Piece(id)
  std::vector<int32_t> special_ids_;  // control, unknown, user-defined; longest text first
  std::vector<int32_t> eog_ids_;      // sorted
};

// Turns a stream of ids into printable text: returns only complete UTF-8
// characters, holding back the start of a character whose bytes arrive as
// several byte tokens. Invalid bytes come out as U+FFFD, never held forever.
class StreamDecoder {
 public:
  // `strip_leading_space`: drop the space-prefix space of the first piece, for
  // streams that start at the beginning of the text (Decode's convention).
  // Leave it off when streaming a continuation of a prompt.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space = false);

  // The text that `id` completes (often "", while a character is unfinished).
  std::string Push(int32_t id);
  // Whatever is held back, as U+FFFD; then the decoder is empty.
  std::string Flush();
  // Forgets held bytes; the next piece is first again.
  void Reset();
  // Bytes held back waiting for the rest of a character.
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool strip_leading_space_;
  bool at_start_ = true;
  std::string pending_;
};


}  // namespace rotor
