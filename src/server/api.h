// The OpenAI-compatible request and response shapes of `rotor serve`: parsing
// of /v1/completions and /v1/chat/completions bodies into generation options,
// the JSON of responses, stream chunks and errors.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"

namespace rotor::serve {

enum class Endpoint { kCompletions, kChat };

// The most tokens one request may ask for (max_tokens).
inline constexpr int kMaxTokensLimit = 1 << 20;

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
nlohmann::json ErrorBody(const ApiError& e);
// The error for an HTTP status that has no body of ours (404, 405, 413, ...).
ApiError ErrorForStatus(int status, std::string_view method, std::string_view path);

// tool_choice: "auto" lets the model choose, "none" offers no tools,
// "required" (or a named function) makes it call one.
enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

// A chat request's tools (tool_calls.h parses them).
struct ApiTools {
  std::vector<ChatTool> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string function;  // kFunction: the tool's name
  bool parallel = true;  // parallel_tool_calls: one call or more per reply
  // Tools are rendered into the prompt and calls parsed out of the reply.
  bool offered() const { return !tools.empty() && choice != ToolChoice::kNone; }
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::string prompt;                  // completions, unless prompt_tokens
  std::vector<int32_t> prompt_tokens;  // completions: ids given by the client
  std::vector<ChatMessage> messages;   // chat
  ApiTools tools;                      // chat: tools, tool_choice, parallel_tool_calls
  GenerateOptions options;             // the server's defaults, overridden by the request
};

// Parses a request body. Fields: prompt | messages, max_tokens
// (max_completion_tokens), temperature, top_p, top_k, min_p, seed, stop,
// stream, stream_options; chat: tools, tool_choice, parallel_tool_calls
// (tool_calls.h); rotor extensions kv, kv_size, kv_keep, kv_recent, kv_window,
// rope_k, kv_positions, kv_type, ignore_eos, repeat_penalty, repeat_last_n. Null means
// the server's default; other OpenAI fields are ignored, except the ones that
// would change the output's shape (n > 1, echo, best_of > 1, logprobs), which
// are rejected. Naming a kv policy other than the server's starts its size,
// keep, recent and positions from their defaults.
std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint,
                                     const GenerateOptions& defaults, ApiRequest* out);

// "stop" or "length" (a full context is "length"); cancelled is "cancelled".
std::string_view OpenAiFinishReason(FinishReason reason);

// What every response and chunk of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // cmpl-... / chatcmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A response's token counts: cached = prompt tokens taken from the prefix
// cache (usage.prompt_tokens_details.cached_tokens, as OpenAI reports it).
struct TokenUsage {
  int64_t prompt = 0, completion = 0, cached = 0;
};
nlohmann::json Usage(const TokenUsage& u);
// The whole (non-streaming) response.
nlohmann::json FullResponse(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                            const TokenUsage& usage);
// One stream chunk: text (chat: the delta's content; `role` adds the
// assistant role) or, with `finish`, the last chunk of the choice.
nlohmann::json StreamChunk(const ResponseMeta& meta, std::string_view text, bool role,
                           std::optional<FinishReason> finish);
// The stream_options.include_usage chunk: no choices, only usage.
nlohmann::json UsageChunk(const ResponseMeta& meta, const TokenUsage& usage);

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string Dump(const nlohmann::json& j);

}  // namespace rotor::serve
