// The logprobs objects of responses and stream chunks (api.h LogprobsJson).
#include "server/api.h"

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

}  // namespace rotor::serve
