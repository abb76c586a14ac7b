// The chat formats with a tool-call convention (ChatTemplate::SupportsTools):
// chatml and llama3, rendered with and without tools. Without tools and tool
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
// JSON is written as the templates' `tojson` (Python's json.dumps) writes it:
// ", " and ": " between items, indent 4 for llama3's tool list. Tool
// definitions and calls are message content (no control tokens in them); the
// tags around them are markup.
#include <nlohmann/json.hpp>

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
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
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
  Json args = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
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
                      const std::vector<ChatTool>& tools) {
  Segments out;
  size_t first = 0;
  bool tools_due = !tools.empty();  // until the first user message carries them
  if (tools_due) {
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

}  // namespace rotor::chat_internal
