// Tool calls in /v1/chat/completions: the request's tools, tool_choice,
// parallel_tool_calls and the messages' tool_calls / tool results; the grammar
// that makes the model call a tool in its template's syntax; the calls parsed
// out of a reply and their JSON (OpenAI's message.tool_calls and stream
// deltas).
//
// Templates with a tool format: chatml (<tool_call>{"name", "arguments"}
// </tool_call> blocks), llama3 (one {"name", "parameters"} object) and
// mistral ("[TOOL_CALLS] [" {"name", "arguments"}, ... "]");
// tokenizer/chat_tools.cc renders them. tool_choice:
//   none      tools are not rendered into the prompt; the reply is text
//   auto      tools rendered; the model answers freely until it starts a call
//             (ToolCallTriggerOf: chatml "<tool_call>" and mistral
//             "[TOOL_CALLS]" anywhere, llama3 "{" opening the reply); from
//             there the reply is held to the same
//             grammar as "required" (a lazy grammar, as llama-server's), so a
//             call that starts is well formed; the calls are parsed out
//   required  tools rendered, and sampling is constrained by a grammar: the
//             reply is calls only, each naming an offered tool with arguments
//             valid against its parameters schema (chatml and mistral: up to
//             4 calls with parallel_tool_calls, else 1; llama3: always 1)
//   {"type": "function", "function": {"name": N}}  as required, tool N only
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/api.h"

namespace rotor::serve {

// The most calls a reply may hold under a grammar (parallel_tool_calls).
inline constexpr int kMaxParallelCalls = 4;

// tools, tool_choice, parallel_tool_calls of a request body. Errors name the
// field ("tools[1].function.name"). `ordered`: the body parsed in its keys'
// order (ParseOrdered), where the tools' parameter schemas are read.
std::optional<ApiError> ParseTools(const nlohmann::json& body,
                                   const nlohmann::ordered_json& ordered, ApiTools* out);
// A message's tool_calls (assistant) and tool_call_id (tool); `where` is
// "messages[i]".
std::optional<ApiError> ParseMessageTools(const nlohmann::json& message, const std::string& where,
                                          ChatMessage* out);

// Checks a chat request's tool use against the template (one without a tool
// format takes neither offered tools nor tool messages: a 400 naming it) and
// sets the tool-call grammar in `options`: for "required" or a named
// function from the first token, for "auto" lazily (from the call's
// trigger). A grammar of the request's own (response_format, ...) conflicts
// with the first and takes the place of the second.
// `defaults` tells the server's grammar from the request's.
// A call marker that is a control token in `tokenizer`'s vocabulary (Mistral
// v0.3's [TOOL_CALLS]) is made a preserved token (SamplingParams).
std::optional<ApiError> PrepareTools(const ApiRequest& api, const ChatTemplate& chat_template,
                                     const Tokenizer& tokenizer, const GenerateOptions& defaults,
                                     GenerateOptions* options);

// GBNF for calls to `tools` in the format's syntax (chatml and mistral:
// `parallel` allows up to kMaxParallelCalls calls); errors name the schema's
// problem.
Result<std::string> ToolCallGrammar(ChatFormat format, const std::vector<ChatTool>& tools,
                                    bool parallel);

// Where a call starts in a reply, for tool_choice "auto": the text that
// opens a call and whether it must open the reply (after whitespace).
struct ToolCallTrigger {
  std::string text;
  bool at_start = false;
};
ToolCallTrigger ToolCallTriggerOf(ChatFormat format);

struct ToolCall {
  std::string id;         // call_<24 random letters and digits>
  std::string name;       // an offered tool
  std::string arguments;  // JSON text of an object
};
struct ToolReply {
  std::string content;  // the text outside the calls, trimmed (all of it, as is, if none)
  std::vector<ToolCall> calls;
};
// The calls in a reply: chatml's <tool_call> blocks whose JSON is
// {"name": offered tool, "arguments": object}; llama3's reply when all of it is
// one such object with "parameters" (or "arguments"), or one per line;
// mistral's "[TOOL_CALLS]" followed by a JSON array of such objects (or one
// object), the text before it content; a mistral reply that is all such an
// array is calls too (a vocabulary with [TOOL_CALLS] as a control token leaves
// it out of the text). What does not parse stays text.
ToolReply ParseToolReply(std::string_view text, ChatFormat format,
                         const std::vector<ChatTool>& tools);

// The whole response with message.tool_calls (content null when there is no
// text) and finish_reason "tool_calls" when the reply made calls.
nlohmann::json FullToolResponse(const ResponseMeta& meta, const ToolReply& reply,
                                FinishReason finish, const TokenUsage& usage);
// The stream chunks for a reply: its text (if any), one chunk per call
// (delta.tool_calls [{index, id, type, function {name, arguments}}]), then the
// finish chunk.
std::vector<nlohmann::json> ToolStreamChunks(const ResponseMeta& meta, const ToolReply& reply,
                                             FinishReason finish);

}  // namespace rotor::serve
