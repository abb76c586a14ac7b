#include "tokenizer/chat_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace rotor {
namespace {

struct NamedFormat {
  std::string_view name;
  ChatFormat format;
};

// Canonical names first (Names() lists these), then aliases.
constexpr std::array<NamedFormat, 13> kFormats = {{
    {"plain", ChatFormat::kPlain},
    {"llama2", ChatFormat::kLlama2},
    {"llama3", ChatFormat::kLlama3},
    {"chatml", ChatFormat::kChatMl},
    {"mistral", ChatFormat::kMistral},
    {"phi3", ChatFormat::kPhi3},
    {"gemma", ChatFormat::kGemma},
    {"zephyr", ChatFormat::kZephyr},
    {"llama-2", ChatFormat::kLlama2},
    {"llama-3", ChatFormat::kLlama3},
    {"qwen", ChatFormat::kChatMl},
    {"phi-3", ChatFormat::kPhi3},
    {"none", ChatFormat::kPlain},
}};
constexpr size_t kNumCanonical = 8;

bool Contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Jinja's `trim` / Python's str.strip() on ASCII whitespace.
std::string Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(kSpace);
  return std::string(s.substr(b, e - b + 1));
}

std::string Capitalized(std::string_view role) {
  std::string r(role);
  if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
  return r;
}

// For formats without a system role: system messages are folded into the next
// user message (`join(system, user)`); a system message with no user message
// after it becomes a user turn of its own.
template <typename Join>
std::vector<ChatMessage> FoldSystem(const std::vector<ChatMessage>& messages, Join join) {
  std::vector<ChatMessage> out;
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
    out.push_back({m.role == "assistant" ? "assistant" : "user", m.content});
  }
  if (have_system) out.push_back({"user", join(system, "")});
  return out;
}

std::string JoinLlama2(const std::string& system, const std::string& user) {
  return "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + user;
}

// Mistral and Gemma: the system prompt is a paragraph before the user's text.
std::string JoinParagraph(const std::string& system, const std::string& user) {
  return system + "\n\n" + user;
}

std::string ApplyLlama2(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : FoldSystem(messages, JoinLlama2)) {
    if (m.role == "user") {
      if (!out.empty()) out += "<s>";
      out.append("[INST] ").append(Trim(m.content)).append(" [/INST]");
    } else {
      out.append(" ").append(Trim(m.content)).append(" </s>");
    }
  }
  return out;
}

std::string ApplyMistral(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : FoldSystem(messages, JoinParagraph)) {
    if (m.role == "user") {
      out.append("[INST] ").append(m.content).append(" [/INST]");
    } else {
      out.append(m.content).append("</s>");
    }
  }
  return out;
}

std::string ApplyGemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : FoldSystem(messages, JoinParagraph)) {
    out.append("<start_of_turn>")
        .append(m.role == "assistant" ? "model" : "user")
        .append("\n")
        .append(Trim(m.content))
        .append("<end_of_turn>\n");
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

std::string ApplyLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages)
    out +=
        "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string ApplyChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Phi-3 and Zephyr: "<|role|>\n" + content + end-of-turn + "\n".
std::string ApplyTagged(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        std::string_view end_of_turn) {
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string role = m.role == "system" || m.role == "assistant" ? m.role : "user";
    out += "<|" + role + "|>\n" + m.content + std::string(end_of_turn) + "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

std::string ApplyPlain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) out += Capitalized(m.role) + ": " + m.content + "\n";
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::Detect(const std::string& jinja) {
  if (jinja.empty()) return ChatTemplate(ChatFormat::kPlain);
  // Most specific first: Llama-2 templates also contain "[INST]", Phi-3 and
  // Zephyr share "<|user|>".
  if (Contains(jinja, "<|start_header_id|>")) return ChatTemplate(ChatFormat::kLlama3);
  if (Contains(jinja, "<|im_start|>")) return ChatTemplate(ChatFormat::kChatMl);
  if (Contains(jinja, "<start_of_turn>")) return ChatTemplate(ChatFormat::kGemma);
  if (Contains(jinja, "<|user|>"))
    return ChatTemplate(Contains(jinja, "<|end|>") ? ChatFormat::kPhi3 : ChatFormat::kZephyr);
  if (Contains(jinja, "<<SYS>>")) return ChatTemplate(ChatFormat::kLlama2);
  if (Contains(jinja, "[INST]")) return ChatTemplate(ChatFormat::kMistral);
  std::string names;
  for (std::string_view n : Names()) names += (names.empty() ? "" : ", ") + std::string(n);
  return Errorf("chat template: not one of the known formats ({}); choose one by name", names);
}

Result<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
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
  for (size_t i = 0; i < kNumCanonical; ++i)
    if (kFormats[i].format == format_) return kFormats[i].name;
  return "?";
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  switch (format_) {
    case ChatFormat::kPlain:
      return ApplyPlain(messages, add_generation_prompt);
    case ChatFormat::kLlama2:
      return ApplyLlama2(messages);
    case ChatFormat::kLlama3:
      return ApplyLlama3(messages, add_generation_prompt);
    case ChatFormat::kChatMl:
      return ApplyChatMl(messages, add_generation_prompt);
    case ChatFormat::kMistral:
      return ApplyMistral(messages);
    case ChatFormat::kPhi3:
      return ApplyTagged(messages, add_generation_prompt, "<|end|>");
    case ChatFormat::kGemma:
      return ApplyGemma(messages, add_generation_prompt);
    case ChatFormat::kZephyr:
      return ApplyTagged(messages, add_generation_prompt, "</s>");
  }
  return "";
}

}  // namespace rotor
