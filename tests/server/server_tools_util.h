// Helpers for the tool-call tests (server_tools_test.cc,
// server_tools_mistral_test.cc): a copy of the bundled model whose vocabulary
// has the chat formats' markup as control tokens, a request offering two tools
// with JSON Schema parameters, and the check that a reply's calls validate
// against those schemas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server_test_util.h"

namespace rotor::serve::testing {

// The bundled model with chatml's and llama3's markup as control tokens: its
// unused byte tokens <0x01>..<0x05> become "<|im_start|>", "<|im_end|>",
// "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>" (the weights are
// the bundled ones; grammars make every reply valid whatever the model
// prefers). "" if it could not be written. Removed at exit.
const std::string& ToolModel();

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

}  // namespace rotor::serve::testing
