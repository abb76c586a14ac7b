// The chat formats with a tool-call convention (ChatTemplate::SupportsTools):
// chatml, llama3 and mistral, rendered with and without tools. Without tools and tool
// messages they are the plain formats of chat_template.h.
//
// chatml follows Qwen2.5's template (Hermes style):
//   tools          a system turn: the system message's text (when the
//                  conversation starts with one) and a blank line, then
//                  "# Tools\n\nYou may call one or more functions to assist
//                  with the user query.\n\nYou are provided with function
//                  signatures within <tools></tools> XML tags:\n<tools>", each
//                  tool "\n" + {"type": "function", "function": {...}}, then
//                  "\n</tools>\n\nFor each function call, return a json object
//                  with function name and arguments within <tool_call></tool_call>
//                  XML tags:\n<tool_call>\n{\"name\": <function-name>,
//                  \"arguments\": <args-json-object>}\n</tool_call>"
//   assistant calls  "<|im_start|>assistant", "\n" + its text if any, then per
//                  call "\n<tool_call>\n{"name": N, "arguments": A}\n</tool_call>"
//   tool results   consecutive tool messages make one user turn, each
//                  "\n<tool_response>\n" + content + "\n</tool_response>"
//
// llama3 follows Llama 3.1's JSON tool calling, tools in the first user message:
//   tools          a system turn "Environment: ipython\n\n" + the system
//                  message's text (trimmed); the first user message starts with
//                  "Given the following functions, please respond with a JSON
//                  for a function call with its proper arguments that best
//                  answers the given prompt.\n\nRespond in the format {"name":
//                  function name, "parameters": dictionary of argument name and
//                  its value}.Do not use variables.\n\n" and each tool as JSON
//                  indented by 4, + "\n\n"
//   assistant calls  {"name": N, "parameters": A} (several: one per line; Llama
//                  3.1 makes one call per turn)
//   tool results   an "ipython" turn
//
// mistral follows Mistral-7B-Instruct-v0.3's template (the v3 tokenizer's
// control tokens as markup; in vocabularies without them they are plain text):
//   tools          "[AVAILABLE_TOOLS] [" + the tools as {"type": "function",
//                  "function": {...}} joined by ", " + "][/AVAILABLE_TOOLS]"
//                  right before the last user message's "[INST]" (at the end
//                  when there is no user message)
//   assistant calls  its text if any, then "[TOOL_CALLS] [" + the calls as
//                  {"name": N, "arguments": A, "id": I} joined by ", " + "]</s>"
//   tool results   each "[TOOL_RESULTS] {"content": C, "call_id": I}[/TOOL_RESULTS]";
//                  C is the result as written when it is JSON (the template
//                  inserts it unquoted), else a JSON string (as mistral_common
//                  writes it), so the object is always valid JSON
//   ids            v0.3 takes 9-letter alphanumeric call ids: MistralCallId()
//                  maps OpenAI's ("call_...") to one, the same for a call and
//                  for the result that answers it
// The rest is the plain mistral format of chat_template.h ("[INST] " + text +
// " [/INST]", replies + "</s>", a system message folded into the next user
// message).
//
// JSON is written as the templates' `tojson` (Python's json.dumps) writes it:
// ", " and ": " between items, indent 4 for llama3's tool list. Tool
// definitions and calls are message content (no control tokens in them); the
// tags around them are markup.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "tokenizer/chat_segments.h"

namespace rotor::chat_internal {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// json.dumps(j) with the default separators.
void PyDump(const Json& j, std::string* out) {
  if (j.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) *out += ", ";
      first = false;
      *out += Dump(Json(key)) + ": ";
      PyDump(value, out);
    }
    *out += '}';
  } else if (j.is_array()) {
    *out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) *out += ", ";
      PyDump(j[i], out);
    }
    *out += ']';
  } else {
    *out += Dump(j);
  }
}

std::string PyJson(const Json& j) {
  std::string out;
  PyDump(j, &out);
  return out;
}

// JSON text as a value; text that is not JSON stays a string.
Json Parsed(const std::string& text) {
  Json j = ParseBoundedJson<Json>(text);
  return j.is_discarded() ? Json(text) : j;
}

Json ToolJson(const ChatTool& tool) {
  Json f = {{"name", tool.name}};
  if (!tool.description.empty()) f["description"] = tool.description;
  if (!tool.parameters.empty()) f["parameters"] = Parsed(tool.parameters);
  return {{"type", "function"}, {"function", std::move(f)}};
}

// {"name": N, "<args_key>": A}; arguments that are not JSON are written as
// given.
std::string CallJson(const ChatToolCall& call, const char* args_key) {
  Json args = ParseBoundedJson<Json>(call.arguments);
  const std::string a = args.is_discarded() ? call.arguments : PyJson(args);
  return "{\"name\": " + Dump(Json(call.name)) + ", \"" + args_key + "\": " + a + "}";
}

constexpr std::string_view kChatMlToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kChatMlToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

constexpr std::string_view kLlama3ToolsIntro =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
    "and its value}.Do not use variables.\n\n";

void Llama3Header(Segments* out, const std::string& role) {
  Markup(out, "<|start_header_id|>" + role + "<|end_header_id|>\n\n");
}

void Llama3ToolList(Segments* out, const std::vector<ChatTool>& tools) {
  Markup(out, kLlama3ToolsIntro);
  for (const ChatTool& t : tools) {
    Content(out, Dump(ToolJson(t), 4));
    Markup(out, "\n\n");
  }
}

// Mistral's tool results carry the call's id: 9 ASCII letters and digits.
bool IsMistralId(std::string_view id) {
  return id.size() == 9 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
         });
}

// gap + "[" + each call {"name": N, "arguments": A, "id": I} + "]" (gap: " "
// but for Nemo's format, which writes no space after its markers).
std::string MistralCalls(const std::vector<ChatToolCall>& calls, std::string_view gap) {
  std::string out = std::string(gap) + "[";
  for (size_t c = 0; c < calls.size(); ++c) {
    std::string call = CallJson(calls[c], "arguments");
    call.pop_back();  // its closing brace: the id follows
    out += (c ? ", " : "") + call + ", \"id\": " + Dump(Json(MistralCallId(calls[c].id))) + "}";
  }
  return out + "]";
}

// gap + "{"content": C, "call_id": I}": C unquoted when the result is JSON,
// else a JSON string. Only C is the message's content; the rest is markup (I
// is always 9 letters and digits).
void MistralResult(Segments* out, const ChatMessage& m, std::string_view gap) {
  const Json parsed = ParseBoundedJson<Json>(m.content);
  Markup(out, std::string(gap) + "{\"content\": ");
  Content(out, parsed.is_discarded() ? Dump(Json(m.content)) : m.content);
  Markup(out, ", \"call_id\": " + Dump(Json(MistralCallId(m.tool_call_id))) + "}");
}

void MistralToolList(Segments* out, const std::vector<ChatTool>& tools, std::string_view gap) {
  Markup(out, "[AVAILABLE_TOOLS]");
  std::string list = std::string(gap) + "[";
  for (size_t i = 0; i < tools.size(); ++i) list += (i ? ", " : "") + PyJson(ToolJson(tools[i]));
  Content(out, list + "]");
  Markup(out, "[/AVAILABLE_TOOLS]");
}

}  // namespace

Segments RenderChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      const std::vector<ChatTool>& tools) {
  Segments out;
  size_t first = 0;
  if (!tools.empty()) {
    Markup(&out, "<|im_start|>system\n");
    if (!messages.empty() && messages[0].role == "system") {
      Content(&out, messages[0].content);
      Markup(&out, "\n\n");
      first = 1;
    }
    Markup(&out, kChatMlToolsIntro);
    for (const ChatTool& t : tools) {
      Markup(&out, "\n");
      Content(&out, PyJson(ToolJson(t)));
    }
    Markup(&out, kChatMlToolsOutro);
    Markup(&out, "<|im_end|>\n");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == first || messages[i - 1].role != "tool") Markup(&out, "<|im_start|>user");
      Markup(&out, "\n<tool_response>\n");
      Content(&out, m.content);
      Markup(&out, "\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") Markup(&out, "<|im_end|>\n");
      continue;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      Markup(&out, "<|im_start|>assistant");
      if (!m.content.empty()) {
        Markup(&out, "\n");
        Content(&out, m.content);
      }
      for (const ChatToolCall& call : m.tool_calls) {
        Markup(&out, "\n<tool_call>\n");
        Content(&out, CallJson(call, "arguments"));
        Markup(&out, "\n</tool_call>");
      }
      Markup(&out, "<|im_end|>\n");
      continue;
    }
    Markup(&out, "<|im_start|>" + m.role + "\n");
    Content(&out, m.content);
    Markup(&out, "<|im_end|>\n");
  }
  if (add_generation_prompt) Markup(&out, "<|im_start|>assistant\n");
  return out;
}

Segments RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      const std::vector<ChatTool>& tools, const std::string& date) {
  Segments out;
  size_t first = 0;
  bool tools_due = !tools.empty();  // until the first user message carries them
  if (!date.empty()) {
    // Llama 3.1+: a system turn always, its date lines before the system
    // prompt (trimmed).
    Llama3Header(&out, "system");
    if (tools_due) Markup(&out, "Environment: ipython\n");
    Markup(&out, "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n");
    if (!messages.empty() && messages[0].role == "system") {
      Append(&out, Trimmed(Text(messages[0].content)));
      first = 1;
    }
    Markup(&out, "<|eot_id|>");
  } else if (tools_due) {
    Segments body = {{"Environment: ipython\n\n", false}};
    if (!messages.empty() && messages[0].role == "system") {
      Content(&body, messages[0].content);
      first = 1;
    }
    Llama3Header(&out, "system");
    Append(&out, Trimmed(body));
    Markup(&out, "<|eot_id|>");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      Llama3Header(&out, "ipython");
      Content(&out, m.content);
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      Llama3Header(&out, "assistant");
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        if (c) Markup(&out, "\n");
        Content(&out, CallJson(m.tool_calls[c], "parameters"));
      }
    } else {
      Llama3Header(&out, m.role);
      if (tools_due && m.role == "user") {
        Llama3ToolList(&out, tools);
        tools_due = false;
      }
      Append(&out, Trimmed(Text(m.content)));
    }
    Markup(&out, "<|eot_id|>");
  }
  if (tools_due) {  // no user message: the tools in a user turn of their own
    Llama3Header(&out, "user");
    Llama3ToolList(&out, tools);
    Markup(&out, "<|eot_id|>");
  }
  if (add_generation_prompt) Markup(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

Segments RenderMistral(const std::vector<ChatMessage>& messages,
                       const std::vector<ChatTool>& tools) {
  // System messages wait for the next user message ("system\n\nuser");
  // with none after them they make a user turn of their own at the end.
  struct Turn {
    const ChatMessage* m;  // nullptr: the user turn of a trailing system prompt
    Segments user;         // a user turn's body
  };
  std::vector<Turn> turns;
  std::string system;
  bool have_system = false;
  auto user_body = [&](const std::string& text) {
    if (!have_system) return Text(text);
    have_system = false;
    return Segments{{system, true}, {"\n\n", false}, {text, true}};
  };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = have_system ? system + "\n\n" + m.content : m.content;
      have_system = true;
    } else if (m.role == "assistant" || m.role == "tool") {
      turns.push_back({&m, {}});
    } else {
      turns.push_back({&m, user_body(m.content)});
    }
  }
  if (have_system) turns.push_back({nullptr, user_body("")});
  size_t last_user = turns.size();
  for (size_t i = 0; i < turns.size(); ++i)
    if (!turns[i].m || (turns[i].m->role != "assistant" && turns[i].m->role != "tool"))
      last_user = i;

  Segments out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage* m = turns[i].m;
    if (m && m->role == "tool") {
      Markup(&out, "[TOOL_RESULTS]");
      MistralResult(&out, *m, " ");
      Markup(&out, "[/TOOL_RESULTS]");
    } else if (m && m->role == "assistant") {
      if (!m->content.empty() || m->tool_calls.empty()) Content(&out, m->content);
      if (!m->tool_calls.empty()) {
        Markup(&out, "[TOOL_CALLS]");
        Content(&out, MistralCalls(m->tool_calls, " "));
      }
      Markup(&out, "</s>");
    } else {
      if (i == last_user && !tools.empty()) MistralToolList(&out, tools, " ");
      Markup(&out, "[INST] ");
      Append(&out, turns[i].user);
      Markup(&out, " [/INST]");
    }
  }
  if (last_user == turns.size() && !tools.empty()) MistralToolList(&out, tools, " ");
  return out;
}

Segments RenderMistralV3(const std::vector<ChatMessage>& messages,
                         const std::vector<ChatTool>& tools, bool tekken) {
  const std::string_view gap = tekken ? "" : " ";
  // The system prompt (the templates take the first message's; later ones,
  // which they refuse, join it) goes before the last message when that is
  // the user's, and nowhere else.
  std::string system;
  bool have_system = false;
  std::vector<const ChatMessage*> loop;  // the other messages, in order
  for (const ChatMessage& m : messages) {
    if (m.role != "system") {
      loop.push_back(&m);
    } else {
      system = have_system ? system + "\n\n" + m.content : m.content;
      have_system = true;
    }
  }
  auto is_user = [](const ChatMessage& m) { return m.role != "assistant" && m.role != "tool"; };
  size_t last_user = loop.size();
  for (size_t i = 0; i < loop.size(); ++i)
    if (is_user(*loop[i])) last_user = i;
  Segments out;
  auto user_turn = [&](std::string_view text, bool with_system) {
    Markup(&out, "[INST]" + std::string(gap));
    if (with_system) {
      Content(&out, system);
      Markup(&out, "\n\n");
    }
    Content(&out, text);
    Markup(&out, "[/INST]");
  };
  for (size_t i = 0; i < loop.size(); ++i) {
    const ChatMessage& m = *loop[i];
    if (m.role == "tool") {
      Markup(&out, "[TOOL_RESULTS]");
      MistralResult(&out, m, gap);
      Markup(&out, "[/TOOL_RESULTS]");
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      Markup(&out, "[TOOL_CALLS]");
      Content(&out, MistralCalls(m.tool_calls, gap));
      Markup(&out, "</s>");
    } else if (m.role == "assistant") {
      if (tekken) {
        Content(&out, m.content);
      } else {  // " " + content|trim
        Markup(&out, " ");
        Append(&out, Trimmed(Text(m.content)));
      }
      Markup(&out, "</s>");
    } else {
      if (i == last_user && !tools.empty()) MistralToolList(&out, tools, gap);
      user_turn(m.content, have_system && i + 1 == loop.size());
    }
  }
  if (last_user == loop.size()) {  // no user message: the tools and the system prompt alone
    if (!tools.empty()) MistralToolList(&out, tools, gap);
    if (have_system) user_turn(system, false);
  }
  return out;
}

}  // namespace rotor::chat_internal

namespace rotor {

std::string MistralCallId(std::string_view id) {
  if (chat_internal::IsMistralId(id)) return std::string(id);
  // FNV-1a: stable across runs and builds, so a call and its result agree.
  uint64_t h = 14695981039346656037ull;
  for (const char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  static constexpr char kChars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string out(9, 'a');
  for (char& c : out) {  // 62^9 < 2^64: nine digits of the hash in base 62
    c = kChars[h % 62];
    h /= 62;
  }
  return out;
}

}  // namespace rotor
