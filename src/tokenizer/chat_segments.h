// Internal to the tokenizer module: building a rendered conversation out of
// markup and content segments (chat_template.cc, chat_tools.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace rotor::chat_internal {

using Segments = std::vector<ChatSegment>;

// Appends a piece, merging it into the last segment of the same kind. An
// empty content piece stays as a segment of its own when it follows markup.
inline void Put(Segments* out, std::string_view text, bool content) {
  if (!out->empty() && out->back().content == content) {
    out->back().text.append(text);
  } else if (!text.empty() || content) {
    out->push_back({std::string(text), content});
  }
}
inline void Markup(Segments* out, std::string_view text) { Put(out, text, false); }
inline void Content(Segments* out, std::string_view text) { Put(out, text, true); }
inline void Append(Segments* out, const Segments& body) {
  for (const ChatSegment& s : body) Put(out, s.text, s.content);
}

inline bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Jinja's `trim` over a message body made of several segments (a system
// prompt folded into a user message): whitespace is removed from the text's
// ends whichever segments hold it.
inline Segments Trimmed(Segments body) {
  for (ChatSegment& s : body) {
    size_t n = 0;
    while (n < s.text.size() && IsSpace(s.text[n])) ++n;
    s.text.erase(0, n);
    if (!s.text.empty()) break;
  }
  for (auto it = body.rbegin(); it != body.rend(); ++it) {
    size_t n = it->text.size();
    while (n > 0 && IsSpace(it->text[n - 1])) --n;
    it->text.resize(n);
    if (!it->text.empty()) break;
  }
  return body;
}

inline Segments Text(const std::string& content) { return {{content, true}}; }

// The formats with a tool-call convention (chat_tools.cc).
// `date`: Llama 3.1's system preamble ("" for Llama 3.0's format).
Segments RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      const std::vector<ChatTool>& tools, const std::string& date);
Segments RenderChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      const std::vector<ChatTool>& tools);
// Ends where the reply begins, as the format always does.
Segments RenderMistral(const std::vector<ChatMessage>& messages,
                       const std::vector<ChatTool>& tools);
// Mistral v0.3 (tekken false) and Nemo (true).
Segments RenderMistralV3(const std::vector<ChatMessage>& messages,
                         const std::vector<ChatTool>& tools, bool tekken);

}  // namespace rotor::chat_internal
