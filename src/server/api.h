// The OpenAI-compatible request and response shapes of `rotor serve`: parsing
// of /v1/completions and /v1/chat/completions bodies into generation options,
// the JSON of responses, stream chunks and errors.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/sample_step.h"
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
// A 400 invalid_request_error naming `param` ("" -> null) and `code`.
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
// The Content-Type of every JSON body the server writes.
inline constexpr const char* kJson = "application/json";
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

// Choices per prompt (n) at most; the server also keeps n <= --parallel.
inline constexpr int kMaxChoices = 16;
// Prompts in one completions request (a prompt array) at most.
inline constexpr int kMaxPrompts = 64;
// Inputs of one /v1/embeddings request at most (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// One completions prompt: text, or token ids given by the client.
struct ApiPrompt {
  std::string text;
  std::vector<int32_t> tokens;  // non-empty: these ids, not `text`
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::vector<ApiPrompt> prompts;      // completions: one or more (a prompt array)
  std::vector<ChatMessage> messages;   // chat
  ApiTools tools;                      // chat: tools, tool_choice, parallel_tool_calls
  int n = 1;                           // choices per prompt
  bool echo = false;                   // completions: the prompt starts each choice's text
  // Log-probabilities of the generated tokens and this many alternatives
  // (chat: logprobs true + top_logprobs; completions: logprobs N); -1 = off.
  // Also options.logprobs.
  int logprobs = -1;
  GenerateOptions options;             // the server's defaults, overridden by the request
};

// Parses a request body. The fields each endpoint knows are in fields.h (one
// table; anything else is a 400 naming it): prompt | messages, max_tokens
// (max_completion_tokens, n_predict), temperature, top_p, top_k, min_p, seed,
// stop, stream, stream_options, n, echo, logprobs, top_logprobs, logit_bias,
// response_format; chat: tools, tool_choice, parallel_tool_calls
// (tool_calls.h); llama-server's grammar, json_schema, cache_prompt, ignore_eos, repeat_penalty, repeat_last_n; rotor's kv, kv_size, kv_keep,
// kv_recent, kv_window, rope_k, kv_positions, kv_type. Null means the
// server's default; the table's ignored OpenAI fields (user, metadata, ...)
// are accepted and ignored. best_of must equal n. Naming a kv policy
// other than the server's starts its size, keep, recent and positions from
// their defaults.
std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint,
                                     const GenerateOptions& defaults, ApiRequest* out);

// OpenAI's logit_bias object {"token id": bias in [-100, 100]} (null: none);
// errors name `param` and the key. Ids are checked against the vocabulary
// later (Engine::Validate).
std::optional<ApiError> ParseLogitBias(const nlohmann::json& v, const std::string& param,
                                       std::vector<std::pair<int32_t, float>>* out);

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

// One token's log-probability for a response: its text (the tokenizer's
// piece) and the alternatives'.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // best first
};
// A choice's logprobs object: chat {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}], "refusal": null}; completions
// {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset},
// offsets counted in bytes from `text_offset` (the echoed prompt's length).
nlohmann::json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprob>& tokens,
                            int64_t text_offset = 0);
// The echoed prompt's part of a completions logprobs object (echo with
// logprobs), `scores` from engine/score.h: "tokens" has each prompt token's
// piece as generated tokens show theirs (control tokens by their text: BOS is
// "<s>"); "token_logprobs" and "top_logprobs" are null for the first token
// (nothing precedes it); "text_offset" is where the token's text starts in
// the echo, `echo_size` bytes long (Decode's convention: control tokens and
// the space-prefix space take no room; generated tokens start at echo_size).
nlohmann::json PromptLogprobsJson(const Tokenizer& tokenizer, std::span<const int32_t> tokens,
                                  std::span<const std::optional<TokenLogprobs>> scores,
                                  int64_t echo_size);
// The completions logprobs object of `prompt`'s tokens followed by `more`'s.
nlohmann::json ConcatLogprobs(nlohmann::json prompt, const nlohmann::json& more);

struct Choice {
  std::string text;
  FinishReason finish = FinishReason::kLength;
  nlohmann::json logprobs = nullptr;  // LogprobsJson, or null
};
// The whole (non-streaming) response: choices[i] has index i.
nlohmann::json FullResponse(const ResponseMeta& meta, const std::vector<Choice>& choices,
                            const TokenUsage& usage);
nlohmann::json FullResponse(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                            const TokenUsage& usage);
// One stream chunk of choice `index`: text (chat: the delta's content; `role`
// adds the assistant role) or, with `finish`, the last chunk of the choice;
// `logprobs`: those of the chunk's tokens (LogprobsJson) or null.
nlohmann::json StreamChunk(const ResponseMeta& meta, std::string_view text, bool role,
                           std::optional<FinishReason> finish, int index = 0,
                           nlohmann::json logprobs = nullptr);
// The stream_options.include_usage chunk: no choices, only usage.
nlohmann::json UsageChunk(const ResponseMeta& meta, const TokenUsage& usage);

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string Dump(const nlohmann::json& j);

}  // namespace rotor::serve
