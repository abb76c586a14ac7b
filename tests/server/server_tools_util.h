// Helpers for the tool-call tests (server_tools_test.cc,
// server_tools_mistral_test.cc): a copy of the bundled model whose vocabulary
// has the chat formats' markup as control tokens, a request offering two tools
// with JSON Schema parameters, and the check that a reply's calls validate
// against those schemas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "sanitizers/sweep.h"
#include "server_test_util.h"

namespace rotor::serve::testing {

// The bundled model with chatml's and llama3's markup as control tokens: its
// unused byte tokens <0x01>..<0x05> become "<|im_start|>", "<|im_end|>",
// "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>" (the weights are
// the bundled ones; grammars make every reply valid whatever the model
// prefers). "" if it could not be written. Removed at exit.
// Also "<tool_call>" as a user-defined token (text, as in Qwen2.5's
// vocabulary) and "[TOOL_CALLS]" as a control token (as in Mistral v0.3's:
// the server preserves it) at these ids (<0x06>, <0x07> in the bundled
// model), for tests that bias the model towards starting a call.
const std::string& ToolModel();
// Seeds of the "validate for many seeds" tests: 50, and 10 under the
// sanitizers, where a grammar-constrained reply costs about 30 times as much
// and what the seeds add is the same code run again.
inline constexpr int kRequiredCallSeeds = ::rotor::testing::kSanitized ? 10 : 50;
// Seeds of the tool_choice "auto" tests (PostAutoCalls: up to 1000 tokens
// each) and of the parallel / named tests (two replies of up to 1200 tokens
// each), fewer under the sanitizers for the same reason.
inline constexpr int kAutoCallSeeds = ::rotor::testing::kSanitized ? 8 : 20;
inline constexpr int kParallelCallSeeds = ::rotor::testing::kSanitized ? 6 : 10;
inline constexpr int kToolCallToken = 9;
inline constexpr int kMistralToolCallsToken = 10;

// TestOptions with ToolModel(), `chat_template` and a context long enough for
// tool definitions.
ServeOptions ToolOptions(const std::string& chat_template);

// get_weather's parameters (required city, days, unit, alerts; optional hours,
// score) and get_time's (zone only).
extern const json kWeatherParams;
extern const json kTimeParams;

// {"type": "function", "function": {name, description, parameters}}.
json Tool(const std::string& name, const json& params);

// A chat request offering get_weather and get_time with tool_choice
// "required", no parallel calls, temperature 1 and `seed`.
json ToolRequest(uint64_t seed);

// Each call has an id "call_...", names one of ToolRequest's tools, and its
// arguments (a JSON string) validate against that tool's schema.
void ExpectValidCalls(const json& calls, const std::string& context);

// A streamed chat request's tool calls (delta.tool_calls, each chunk's index
// checked and removed), its finish_reason, whether it ended with [DONE] and
// had a usage chunk.
struct StreamedCalls {
  json calls = json::array();
  std::string finish;
  bool done = false;
  bool usage = false;
};
// POSTs `body` with stream and include_usage on; failures fail the test.
StreamedCalls PostStreamedCalls(const TestServer& server, json body);

// The checks every tool format's server passes (`label` prefixes failures):
// tool_choice "required" for seeds 1..n_seeds: one valid call per reply,
// content null, finish "tool_calls" (`parallel` sets parallel_tool_calls;
// llama3 makes one call per turn either way).
void ExpectRequiredCalls(const TestServer& server, const std::string& label, int n_seeds,
                         bool parallel);
// parallel_tool_calls and then a named function (get_time only), 10 seeds;
// returns how many replies made more than one call.
int ExpectParallelAndNamedCalls(const TestServer& server, const std::string& label);
// Streamed "required" replies (10 seeds): [DONE], usage, one valid call.
void ExpectStreamedCalls(const TestServer& server, const std::string& label);
// "auto" and "none" answer 200, and "none" renders no tools (its prompt is
// over 50 tokens shorter).
void ExpectAutoAndNone(const TestServer& server);

// tool_choice "auto" with the model biased (logit_bias `bias`) towards
// `token`, the text `marker` that starts a call, for seeds 1..n_seeds: each
// reply is checked (calls valid, finish "tool_calls"; a reply not cut by
// max_tokens holds no `marker` as text, so no call started and broke off)
// and counted, and the counts printed.
struct AutoCalls {
  int with_calls = 0;  // replies with calls
  int text_first = 0;  // of those, replies with text before the calls
  int text_only = 0;
};
AutoCalls PostAutoCalls(const TestServer& server, int token, float bias, int n_seeds,
                        const std::string& marker);

}  // namespace rotor::serve::testing
