// The logprobs objects of responses and stream chunks (api.h LogprobsJson).
#include "server/api.h"

#include <algorithm>

#include "base/check.h"

namespace rotor::serve {

using nlohmann::json;

namespace {

json Bytes(const std::string& s) {
  json b = json::array();
  for (const char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}

}  // namespace

json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprob>& tokens, int64_t text_offset) {
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top)
        top.push_back({{"token", text}, {"logprob", lp}, {"bytes", Bytes(text)}});
      content.push_back({{"token", t.token},
                         {"logprob", t.logprob},
                         {"bytes", Bytes(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = text_offset;
  for (const TokenLogprob& t : tokens) {
    texts.push_back(t.token);
    lps.push_back(t.logprob);
    json top = json::object();
    // Two alternatives may share a text (byte tokens, duplicates): the best stays.
    for (const auto& [text, lp] : t.top)
      if (!top.contains(text)) top[text] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.token.size());
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json PromptLogprobsJson(const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                        std::span<const std::optional<TokenLogprobs>> scores, int64_t echo_size) {
  CHECK_EQ(tokens.size(), scores.size());
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t decoded = 0;  // bytes of Decode(tokens[0..i))
  bool strip = tokenizer.add_space_prefix();
  for (size_t i = 0; i < tokens.size(); ++i) {
    texts.push_back(tokenizer.TokenToPiece(tokens[i], /*special=*/true));
    if (!scores[i]) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      lps.push_back(scores[i]->logprob);
      json top = json::object();
      for (const auto& [id, lp] : scores[i]->top) {
        const std::string text = tokenizer.TokenToPiece(id, /*special=*/true);
        if (!top.contains(text)) top[text] = lp;
      }
      tops.push_back(std::move(top));
    }
    // A text prompt's echo is the client's text, which its tokens decode to
    // (clamped in case a normalization made them differ).
    offsets.push_back(std::min(decoded, echo_size));
    std::string_view piece = tokenizer.PieceView(tokens[i]);
    if (piece.empty()) continue;
    if (strip && piece.front() == ' ') piece.remove_prefix(1);
    strip = false;
    decoded += std::ssize(piece);
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json ConcatLogprobs(json prompt, const json& more) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : more.at(key)) prompt.at(key).push_back(v);
  return prompt;
}

}  // namespace rotor::serve
