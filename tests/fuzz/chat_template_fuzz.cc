// The chat-template renderer: detection from an arbitrary Jinja text, and
// rendering of arbitrary messages in every format. Besides no crash: Apply is
// the concatenation of Render's segments, and the content segments (tokenized
// as plain text) hold no more than the messages' content (a tool result
// JSON-escaped) and the separators that join system messages.
//
// Input: the template text, then messages; '\x01' separates fields ("role" then
// "content" alternate).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "chat template: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t end = in.find('\x01', start);
    fields.emplace_back(in.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  std::vector<rotor::ChatMessage> messages;
  for (size_t i = 1; i + 1 < fields.size(); i += 2) messages.push_back({fields[i], fields[i + 1]});

  std::vector<rotor::ChatTemplate> templates;
  auto detected = rotor::ChatTemplate::Detect(fields[0]);
  if (detected.ok()) templates.push_back(*detected);
  auto named = rotor::ChatTemplate::FromName(fields[0]);
  if (named.ok()) templates.push_back(*named);
  for (std::string_view name : rotor::ChatTemplate::Names())
    templates.push_back(*rotor::ChatTemplate::FromName(name));

  for (const rotor::ChatTemplate& t : templates) {
    for (bool gen : {false, true}) {
      const std::string text = t.Apply(messages, gen);
      const std::vector<rotor::ChatSegment> segments = t.Render(messages, gen);
      std::string joined, content;
      for (const rotor::ChatSegment& s : segments) {
        joined += s.text;
        if (s.content) content += s.text;
      }
      Check(joined == text, "Apply differs from the concatenated Render");
      // Formats without a system role join system messages into the next user
      // turn with "\n\n" (content: plain text, never a control token); a tool
      // result may be written as a JSON string (mistral): quotes, and at most
      // 6 bytes per byte escaped ("\u0001").
      size_t bound = 0;
      for (const rotor::ChatMessage& m : messages)
        bound += (m.role == "tool" ? 6 * m.content.size() + 2 : m.content.size()) + 2;
      Check(content.size() <= bound, "more content out than the messages hold");
      (void)t.EndOfTurn();
      (void)t.StopStrings();
      (void)t.SpecialTokens();
    }
  }
  return 0;
}
