// End of generation: every token after which a model has finished its turn.
// Besides tokenizer.ggml.{eos,eot,eom}_token_id, chat models end turns with
// tokens that older converters did not record in those keys (Llama 3 base
// files name <|end_of_text|> as EOS, while the instruct model ends with
// <|eot_id|>); like llama.cpp, they are found by their text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace rotor {

// Texts that end a turn, in the order EOT is chosen from them when
// tokenizer.ggml.eot_token_id is absent.
std::span<const std::string_view> EndOfTurnTexts();

// Completes `vocab` and returns its end-of-generation ids, sorted, unique:
// - vocab->eot, if -1, becomes the first token found with an EndOfTurnTexts()
//   text; vocab->eom, if -1, the token "<|eom_id|>";
// - eos, eot and eom are end of generation, and so is every token with one of
//   those texts or "<|eom_id|>"; such a token is made a control token (so it is
//   never produced from plain text, shown only with special, and parsed from
//   prompts only with parse_special), as llama.cpp does, with a warning;
// - "</s>" is end of generation when it is a control token (SPM's EOS); as
//   plain text it may be an ordinary HTML piece of a BPE vocabulary.
std::vector<int32_t> FindEndOfGeneration(Vocab* vocab);

}  // namespace rotor
