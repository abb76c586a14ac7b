#include "tokenizer/eog.h"

#include <algorithm>
#include <array>

#include "base/log.h"

namespace rotor {

namespace {

constexpr std::array<std::string_view, 10> kEndOfTurn = {
    "<|eot_id|>",       // Llama 3
    "<|im_end|>",       // ChatML: Qwen, SmolLM
    "<|end|>",          // Phi 3
    "<end_of_turn>",    // Gemma
    "<|endoftext|>",    // GPT-2, Qwen base, Phi
    "<|end_of_text|>",  // Llama 3 base, Granite
    "<EOT>",
    "_<EOT>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",  // DeepSeek
    "<end_of_utterance>",
};
constexpr std::string_view kEndOfMessage = "<|eom_id|>";  // Llama 3.1 tool calls
constexpr std::string_view kSpmEos = "</s>";

}  // namespace

std::span<const std::string_view> EndOfTurnTexts() { return kEndOfTurn; }

std::vector<int32_t> FindEndOfGeneration(Vocab* vocab) {
  const size_t n = vocab->tokens.size();
  auto type = [&](size_t i) { return vocab->types.empty() ? TokenType::kNormal : vocab->types[i]; };

  // The first id of each listed text (the vocabulary is scanned once).
  std::array<int32_t, kEndOfTurn.size()> eot_ids;
  eot_ids.fill(-1);
  int32_t eom_id = -1;
  std::vector<int32_t> eog;
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = vocab->tokens[i];
    if (text.size() < 4 || (text[0] != '<' && text[0] != '_')) continue;
    const auto id = static_cast<int32_t>(i);
    bool listed = false;
    for (size_t k = 0; k < kEndOfTurn.size(); ++k) {
      if (text == kEndOfTurn[k]) {
        if (eot_ids[k] < 0) eot_ids[k] = id;
        listed = true;
      }
    }
    if (text == kEndOfMessage) {
      if (eom_id < 0) eom_id = id;
      listed = true;
    }
    if (listed) {
      if (type(i) != TokenType::kControl) {
        Log(LogLevel::kWarn,
            "tokenizer: token {} '{}' ends generation but has type {}; treating it as control", i,
            text, TokenTypeName(type(i)));
        if (vocab->types.empty()) vocab->types.assign(n, TokenType::kNormal);
        vocab->types[i] = TokenType::kControl;
      }
      eog.push_back(id);
    } else if (text == kSpmEos && type(i) == TokenType::kControl) {
      eog.push_back(id);
    }
  }
  if (vocab->eot < 0) {
    for (int32_t id : eot_ids) {
      if (id >= 0) {
        vocab->eot = id;
        break;
      }
    }
  }
  if (vocab->eom < 0) vocab->eom = eom_id;
  for (int32_t id : {vocab->eos, vocab->eot, vocab->eom}) {
    if (id >= 0) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  return eog;
}

}  // namespace rotor
