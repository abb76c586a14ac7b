#include "tokenizer/chat_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <utility>

#include "tokenizer/chat_segments.h"
#include "tokenizer/tokenizer.h"

namespace rotor {
namespace {

using namespace chat_internal;  // NOLINT: the segment builders

struct NamedFormat {
  std::string_view name;
  ChatFormat format;
};

// Canonical names first (Names() lists these), then aliases. llama3.1 is
// llama3 with a date (ChatTemplate::name).
constexpr std::array<NamedFormat, 18> kFormats = {{
    {"plain", ChatFormat::kPlain},
    {"llama2", ChatFormat::kLlama2},
    {"llama3", ChatFormat::kLlama3},
    {"llama3.1", ChatFormat::kLlama3},
    {"chatml", ChatFormat::kChatMl},
    {"phi4", ChatFormat::kPhi4},
    {"mistral", ChatFormat::kMistral},
    {"mistral-v3", ChatFormat::kMistralV3},
    {"mistral-v3-tekken", ChatFormat::kMistralTekken},
    {"phi3", ChatFormat::kPhi3},
    {"gemma", ChatFormat::kGemma},
    {"zephyr", ChatFormat::kZephyr},
    {"llama-2", ChatFormat::kLlama2},
    {"llama-3", ChatFormat::kLlama3},
    {"qwen", ChatFormat::kChatMl},
    {"phi-3", ChatFormat::kPhi3},
    {"mistral-nemo", ChatFormat::kMistralTekken},
    {"none", ChatFormat::kPlain},
}};
constexpr size_t kNumCanonical = 12;
// Llama 3.1's template's date when it is not given one.
constexpr std::string_view kLlama31Date = "26 Jul 2024";

bool Contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

std::string Capitalized(std::string_view role) {
  std::string r(role);
  if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
  return r;
}

// A message after folding the system prompt: its body may be several segments.
struct Turn {
  std::string role;
  Segments body;
};

// For formats without a system role: system messages are folded into the next
// user message (`join(system, user)`); a system message with no user message
// after it becomes a user turn of its own.
template <typename Join>
std::vector<Turn> FoldSystem(const std::vector<ChatMessage>& messages, Join join) {
  std::vector<Turn> out;
  std::string system;
  bool have_system = false;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = have_system ? system + "\n\n" + m.content : m.content;
      have_system = true;
      continue;
    }
    if (m.role != "assistant" && have_system) {
      out.push_back({"user", join(system, m.content)});
      have_system = false;
      continue;
    }
    out.push_back({m.role == "assistant" ? "assistant" : "user", Text(m.content)});
  }
  if (have_system) out.push_back({"user", join(system, "")});
  return out;
}

Segments JoinLlama2(const std::string& system, const std::string& user) {
  return {{"<<SYS>>\n", false}, {system, true}, {"\n<</SYS>>\n\n", false}, {user, true}};
}

// Gemma (and Mistral, chat_tools.cc): the system prompt is a paragraph before
// the user's text.
Segments JoinParagraph(const std::string& system, const std::string& user) {
  return {{system, true}, {"\n\n", false}, {user, true}};
}

Segments RenderLlama2(const std::vector<ChatMessage>& messages) {
  Segments out;
  for (const Turn& t : FoldSystem(messages, JoinLlama2)) {
    if (t.role == "user") {
      if (!out.empty()) Markup(&out, "<s>");
      Markup(&out, "[INST] ");
      Append(&out, Trimmed(t.body));
      Markup(&out, " [/INST]");
    } else {
      Markup(&out, " ");
      Append(&out, Trimmed(t.body));
      Markup(&out, " </s>");
    }
  }
  return out;
}

Segments RenderGemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  Segments out;
  for (const Turn& t : FoldSystem(messages, JoinParagraph)) {
    Markup(&out, t.role == "assistant" ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
    Append(&out, Trimmed(t.body));
    Markup(&out, "<end_of_turn>\n");
  }
  if (add_generation_prompt) Markup(&out, "<start_of_turn>model\n");
  return out;
}

// Phi-3 and Zephyr: "<|role|>\n" + content + end-of-turn + "\n" (Phi-3.5
// leaves out an empty system message).
Segments RenderTagged(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      std::string_view end_of_turn) {
  Segments out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" && m.content.empty() && end_of_turn == "<|end|>") continue;
    const std::string role = m.role == "system" || m.role == "assistant" ? m.role : "user";
    Markup(&out, "<|" + role + "|>\n");
    Content(&out, m.content);
    Markup(&out, std::string(end_of_turn) + "\n");
  }
  if (add_generation_prompt) Markup(&out, "<|assistant|>\n");
  return out;
}

// Phi-4: "<|im_start|>" + role + "<|im_sep|>" + content + "<|im_end|>", no
// newlines; roles other than system, user and assistant are left out, as its
// template does.
Segments RenderPhi4(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  Segments out;
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") continue;
    Markup(&out, "<|im_start|>" + m.role + "<|im_sep|>");
    Content(&out, m.content);
    Markup(&out, "<|im_end|>");
  }
  if (add_generation_prompt) Markup(&out, "<|im_start|>assistant<|im_sep|>");
  return out;
}

Segments RenderPlain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  Segments out;
  for (const ChatMessage& m : messages) {
    Markup(&out, Capitalized(m.role) + ": ");
    Content(&out, m.content);
    Markup(&out, "\n");
  }
  if (add_generation_prompt) Markup(&out, "Assistant:");
  return out;
}

// Llama 3.1's date: today's where the template asks for it (Llama 3.2's
// strftime_now), else the default it sets (`date_string = "26 Jul 2024"`).
std::string Llama31Date(const std::string& jinja) {
  if (Contains(jinja, "strftime_now")) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    if (std::strftime(buf, sizeof buf, "%d %b %Y", &tm) > 0) return buf;
  }
  for (const std::string_view key : {"date_string = \"", "date_string = '"}) {
    const size_t at = jinja.find(key);
    if (at == std::string::npos) continue;
    const size_t from = at + key.size(), to = jinja.find(key.back(), from);
    if (to != std::string::npos && to - from <= 20) return jinja.substr(from, to - from);
  }
  return std::string(kLlama31Date);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::Detect(const std::string& jinja) {
  if (jinja.empty()) return ChatTemplate(ChatFormat::kPlain);
  // Most specific first: Llama-2 templates also contain "[INST]", Phi-3 and
  // Zephyr share "<|user|>", Phi-4 writes ChatML's tokens.
  if (Contains(jinja, "<|start_header_id|>")) {
    if (Contains(jinja, "Cutting Knowledge Date"))
      return ChatTemplate(ChatFormat::kLlama3, Llama31Date(jinja));
    return ChatTemplate(ChatFormat::kLlama3);
  }
  if (Contains(jinja, "<|im_sep|>")) return ChatTemplate(ChatFormat::kPhi4);
  if (Contains(jinja, "<|im_start|>")) return ChatTemplate(ChatFormat::kChatMl);
  if (Contains(jinja, "<start_of_turn>")) return ChatTemplate(ChatFormat::kGemma);
  if (Contains(jinja, "<|user|>"))
    return ChatTemplate(Contains(jinja, "<|end|>") ? ChatFormat::kPhi3 : ChatFormat::kZephyr);
  if (Contains(jinja, "<<SYS>>")) return ChatTemplate(ChatFormat::kLlama2);
  if (Contains(jinja, "[INST]")) {
    // v0.1 / v0.2 write ' [/INST]'; Nemo's "[INST]" + content, v0.3's
    // "[INST] " + content + "[/INST]".
    if (Contains(jinja, " [/INST]")) return ChatTemplate(ChatFormat::kMistral);
    if (Contains(jinja, "[INST]\"") || Contains(jinja, "[INST]'"))
      return ChatTemplate(ChatFormat::kMistralTekken);
    return ChatTemplate(ChatFormat::kMistralV3);
  }
  std::string names;
  for (std::string_view n : Names()) names += (names.empty() ? "" : ", ") + std::string(n);
  return Errorf("chat template: not one of the known formats ({}); choose one by name", names);
}

Result<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "llama3.1") return ChatTemplate(ChatFormat::kLlama3, std::string(kLlama31Date));
  for (const NamedFormat& f : kFormats)
    if (f.name == lower) return ChatTemplate(f.format);
  std::string names;
  for (std::string_view n : Names()) names += (names.empty() ? "" : ", ") + std::string(n);
  return Errorf("chat template: unknown name '{}' (known: {})", name, names);
}

std::vector<std::string_view> ChatTemplate::Names() {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < kNumCanonical; ++i) names.push_back(kFormats[i].name);
  return names;
}

std::string_view ChatTemplate::name() const {
  if (format_ == ChatFormat::kLlama3 && !date_.empty()) return "llama3.1";
  for (size_t i = 0; i < kNumCanonical; ++i)
    if (kFormats[i].format == format_) return kFormats[i].name;
  return "?";
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  return Apply(messages, add_generation_prompt, {});
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt,
                                const std::vector<ChatTool>& tools) const {
  std::string out;
  for (const ChatSegment& s : Render(messages, add_generation_prompt, tools)) out += s.text;
  return out;
}

std::vector<ChatSegment> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt) const {
  return Render(messages, add_generation_prompt, {});
}

bool ChatTemplate::SupportsTools() const {
  return format_ == ChatFormat::kChatMl || format_ == ChatFormat::kLlama3 || IsMistral(format_);
}

std::vector<ChatSegment> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt,
                                              const std::vector<ChatTool>& tools) const {
  switch (format_) {
    case ChatFormat::kPlain:
      return RenderPlain(messages, add_generation_prompt);
    case ChatFormat::kLlama2:
      return RenderLlama2(messages);
    case ChatFormat::kLlama3:
      return RenderLlama3(messages, add_generation_prompt, tools, date_);
    case ChatFormat::kChatMl:
      return RenderChatMl(messages, add_generation_prompt, tools);
    case ChatFormat::kPhi4:
      return RenderPhi4(messages, add_generation_prompt);
    case ChatFormat::kMistral:
      return RenderMistral(messages, tools);
    case ChatFormat::kMistralV3:
    case ChatFormat::kMistralTekken:
      return RenderMistralV3(messages, tools, format_ == ChatFormat::kMistralTekken);
    case ChatFormat::kPhi3:
      return RenderTagged(messages, add_generation_prompt, "<|end|>");
    case ChatFormat::kGemma:
      return RenderGemma(messages, add_generation_prompt);
    case ChatFormat::kZephyr:
      return RenderTagged(messages, add_generation_prompt, "</s>");
  }
  return {};
}

std::string_view ChatTemplate::EndOfTurn() const {
  switch (format_) {
    case ChatFormat::kPlain: return "";
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
    case ChatFormat::kMistralV3:
    case ChatFormat::kMistralTekken:
    case ChatFormat::kZephyr: return "</s>";
    case ChatFormat::kLlama3: return "<|eot_id|>";
    case ChatFormat::kChatMl:
    case ChatFormat::kPhi4: return "<|im_end|>";
    case ChatFormat::kPhi3: return "<|end|>";
    case ChatFormat::kGemma: return "<end_of_turn>";
  }
  return "";
}

std::vector<std::string> ChatTemplate::StopStrings() const {
  if (format_ == ChatFormat::kPlain) return {"\nUser:"};
  return {};
}

std::vector<std::string_view> ChatTemplate::SpecialTokens() const {
  switch (format_) {
    case ChatFormat::kPlain: return {};
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
    case ChatFormat::kMistralV3:
    case ChatFormat::kMistralTekken:
    // [INST], <|user|> and Mistral's tool markers ([TOOL_CALLS], ...): text in
    // some of these vocabularies (Mistral v0.1), control tokens in others
    // (v0.3), so not required.
    case ChatFormat::kZephyr: return {"</s>"};
    case ChatFormat::kLlama3: return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::kChatMl: return {"<|im_start|>", "<|im_end|>"};
    case ChatFormat::kPhi4: return {"<|im_start|>", "<|im_sep|>", "<|im_end|>"};
    case ChatFormat::kPhi3: return {"<|user|>", "<|assistant|>", "<|end|>"};
    case ChatFormat::kGemma: return {"<start_of_turn>", "<end_of_turn>"};
  }
  return {};
}

Status CheckChatTemplateTokens(const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  std::vector<std::string_view> missing;
  for (std::string_view text : chat_template.SpecialTokens()) {
    const std::vector<int32_t> ids =
        tokenizer.Encode(text, /*add_special=*/false, /*parse_special=*/true);
    const bool special = ids.size() == 1 && (tokenizer.Type(ids[0]) == TokenType::kControl ||
                                             tokenizer.Type(ids[0]) == TokenType::kUserDefined);
    if (!special) missing.push_back(text);
  }
  if (missing.empty()) return Status::Ok();
  std::string names;
  for (std::string_view m : missing) names += (names.empty() ? "" : ", ") + std::string(m);
  return Errorf(
      "chat template {}: the vocabulary has no special token {} (its markup would be plain "
      "text the model was not trained on); choose a template it has with --chat-template",
      chat_template.name(), names);
}

bool EncodeChatSegments(const Tokenizer& tokenizer, std::span<const ChatSegment> segments,
                        bool after_special, std::vector<int32_t>* out) {
  std::vector<Tokenizer::TextPiece> pieces;
  pieces.reserve(segments.size());
  for (const ChatSegment& s : segments) pieces.push_back({s.text, /*parse_special=*/!s.content});
  return tokenizer.EncodeAppend(pieces, after_special, out);
}

}  // namespace rotor
