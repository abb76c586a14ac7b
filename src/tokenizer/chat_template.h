// Chat templates: a conversation -> the prompt text a chat model was trained on.
//
// GGUF files carry the template as Jinja (`tokenizer.chat_template`). Rather
// than interpreting Jinja, Detect() recognises the common formats by
// distinctive substrings and Apply() renders them in C++:
//
// clang-format off
//   name               recognised by                a user turn, then the generation prompt
//   llama2             "<<SYS>>" (and "[INST]")     [INST] Hi [/INST]
//   llama3             "<|start_header_id|>"        <|start_header_id|>user<|end_header_id|>
//                                                   \n\nHi<|eot_id|><|start_header_id|>
//                                                   assistant<|end_header_id|>\n\n
//   llama3.1           and "Cutting Knowledge Date" the same after a system turn that opens
//                                                   "Cutting Knowledge Date: December 2023\n
//                                                   Today Date: D\n\n"
//   chatml             "<|im_start|>" (Qwen, ...)   <|im_start|>user\nHi<|im_end|>\n
//                                                   <|im_start|>assistant\n
//   phi4               "<|im_sep|>"                 <|im_start|>user<|im_sep|>Hi<|im_end|>
//                                                   <|im_start|>assistant<|im_sep|>
//   mistral            "[INST]" and " [/INST]"      [INST] Hi [/INST]      (v0.1, v0.2)
//   mistral-v3         "[INST] " without " [/INST]" [INST] Hi[/INST]       (v0.3)
//   mistral-v3-tekken  "[INST]" + a quote           [INST]Hi[/INST]        (Nemo)
//   phi3               "<|user|>" and "<|end|>"     <|user|>\nHi<|end|>\n<|assistant|>\n
//   gemma              "<start_of_turn>"            <start_of_turn>user\nHi<end_of_turn>\n
//                                                   <start_of_turn>model\n
//   zephyr             "<|user|>", no "<|end|>"     <|user|>\nHi</s>\n<|assistant|>\n
//   plain              no template (the fallback)   User: Hi\nAssistant:
// clang-format on
//
// plain is for models without a template (base models): "System: ...\n" if
// there is a system prompt, then "User: <message>\n" and "Assistant: <reply>\n"
// lines, each role capitalised; a reply ends at the model's end of text or
// where it starts a "\nUser:" line of its own.
//
// The output never starts with the BOS token: the tokenizer adds it (its
// add_bos), and control-token text inside ("<|im_start|>", a later "<s>") must
// be tokenized with parse_special. Formats without a system role (llama2,
// mistral, gemma) put a system message in front of the next user message, as
// the models' own templates do; mistral-v3 and -tekken put the system prompt
// in front of the conversation's last message when it is the user's (and
// nowhere otherwise), as theirs do. Llama 3.1's date is the template's
// default ("26 Jul 2024"), or today's where the template asks for it
// (Llama 3.2's strftime_now). phi3 leaves out an empty system message. Roles
// are "system", "user" and "assistant"; chatml and llama3 write any other role
// by its name, the rest treat it as "user". Default system prompts written
// into a model's template (Qwen's "You are a helpful assistant.") are not
// reproduced.
//
// Tool calling (tools offered to the model, assistant tool calls, "tool"
// results) is defined for chatml, llama3 (and 3.1) and the mistral formats
// only: chat_tools.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace rotor {

class Tokenizer;

// A function call the assistant made (OpenAI's tool_calls): `arguments` is
// JSON text.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // role "assistant"
  std::string tool_call_id = {};             // role "tool": the call answered
};

// A function the model may call: `parameters` is its arguments' JSON Schema
// as JSON text ("" for none).
struct ChatTool {
  std::string name;
  std::string description;
  std::string parameters;
};

// A piece of a rendered conversation: template markup, to be tokenized with
// parse_special ("<|im_start|>" becomes its control token), or message content,
// tokenized as plain text so that no message can inject a control token.
struct ChatSegment {
  std::string text;
  bool content = false;
  friend bool operator==(const ChatSegment&, const ChatSegment&) = default;
};

// kMistral: v0.1 / v0.2 ("[INST] Hi [/INST]"); kMistralV3: v0.3 ("[INST]
// Hi[/INST]", replies " " + trimmed, the system prompt before the last user
// message); kMistralTekken: Mistral-Nemo ("[INST]Hi[/INST]", no spaces around
// markers). kPhi4: "<|im_start|>user<|im_sep|>Hi<|im_end|>".
enum class ChatFormat {
  kPlain,
  kLlama2,
  kLlama3,
  kChatMl,
  kMistral,
  kPhi3,
  kGemma,
  kZephyr,
  kMistralV3,
  kMistralTekken,
  kPhi4,
};
// The Mistral formats share the tool-call convention ([TOOL_CALLS]).
inline bool IsMistral(ChatFormat f) {
  return f == ChatFormat::kMistral || f == ChatFormat::kMistralV3 ||
         f == ChatFormat::kMistralTekken;
}

class ChatTemplate {
 public:
  ChatTemplate() = default;  // plain
  explicit ChatTemplate(ChatFormat format) : format_(format) {}
  // Llama 3.1+ (llama3 with `date`): the system turn always opens with
  // "Cutting Knowledge Date: December 2023\nToday Date: <date>\n\n".
  ChatTemplate(ChatFormat format, std::string date) : format_(format), date_(std::move(date)) {}

  // From a GGUF's tokenizer.chat_template: "" gives plain; a template that is
  // none of the known formats is an error naming them.
  static Result<ChatTemplate> Detect(const std::string& jinja);
  // By name (case-insensitive; also "llama-2", "llama-3", "qwen", "phi-3").
  static Result<ChatTemplate> FromName(std::string_view name);
  // The canonical names, as listed above.
  static std::vector<std::string_view> Names();

  ChatFormat format() const { return format_; }
  std::string_view name() const;
  // Llama 3.1+'s "Today Date" ("" for other formats and Llama 3.0).
  const std::string& date() const { return date_; }

  // The prompt for `messages`; with `add_generation_prompt` it ends where the
  // assistant's reply begins (llama2 and mistral always do).
  std::string Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // The same text as markup and content segments (adjacent segments of one
  // kind merged; an empty message keeps an empty content segment).
  std::vector<ChatSegment> Render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const;
  // With tools offered to the model (chat_tools.cc; SupportsTools() formats
  // only, the others ignore `tools`).
  std::string Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::vector<ChatTool>& tools) const;
  std::vector<ChatSegment> Render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  const std::vector<ChatTool>& tools) const;
  // The format has a tool-call convention: chatml, llama3 and mistral
  // (chat_tools.cc describes them); only these render tools, tool calls and
  // tool results.
  bool SupportsTools() const;

  // The markup that ends an assistant turn, as a token's text: "<|im_end|>",
  // "<|eot_id|>", "<|end|>", "<end_of_turn>", "</s>"; "" for plain. A reply
  // stops when the model samples it.
  std::string_view EndOfTurn() const;
  // Text that ends a reply when the model writes it: plain has no end token,
  // so a reply ends where the model starts the user's next line ("\nUser:").
  std::vector<std::string> StopStrings() const;
  // The markup the format writes as special tokens ("<|im_start|>",
  // "<|im_end|>"); a vocabulary must have each as one token.
  std::vector<std::string_view> SpecialTokens() const;

 private:
  ChatFormat format_ = ChatFormat::kPlain;
  std::string date_;
};

// The call id Mistral's format writes for an OpenAI call id: the id itself
// when it is 9 ASCII letters and digits (v0.3's ids), else 9 such characters
// derived from it (a stable hash), so a call and its result still match.
std::string MistralCallId(std::string_view id);

// Every SpecialTokens() text is one control (or user-defined) token of the
// vocabulary; else an error naming the missing ones (the markup would be read
// as plain text, and the model would see a format it was not trained on).
Status CheckChatTemplateTokens(const ChatTemplate& chat_template, const Tokenizer& tokenizer);

// Appends the tokens of rendered segments to `out`: special tokens are
// matched in the template's markup only, never in message content, so a
// message cannot inject control tokens. `after_special` as in
// Tokenizer::EncodeAppend (true at the start of a prompt); returns its value
// for what follows. Adds no BOS.
bool EncodeChatSegments(const Tokenizer& tokenizer, std::span<const ChatSegment> segments,
                        bool after_special, std::vector<int32_t>* out);

}  // namespace rotor
