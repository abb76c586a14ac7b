// Server::Call, shared by server.cc (Dispatch, HandleGenerate) and the event
// writer (server_events.cc).
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/server.h"

namespace rotor::serve {

// One generation request from its dispatch to its last byte: the exchange,
// the sequence's stream, and (engine thread, under mu) the text so far.
struct Server::Call {
  std::shared_ptr<HttpExchange> ex;
  Endpoint endpoint = Endpoint::kCompletions;
  std::shared_ptr<void> token;  // in flight until the exchange ends
  std::mutex mu;
  // Once submitted: one stream per choice (prompt i, choice j at i * n + j).
  std::vector<std::shared_ptr<RequestStream>> streams;
  ResponseMeta meta;
  bool streaming = false, include_usage = false;
  bool ready = false;     // events may be written
  bool finished = false;  // the last event was written
  bool gone = false;      // the client went away
  // Tools offered: the reply is held until its end and its calls parsed out
  // (one choice: n > 1 and logprobs are refused with tools).
  bool tools_offered = false;
  std::vector<ChatTool> tools;
  std::string path;
  int n = 1;          // choices per prompt
  int logprobs = -1;  // ApiRequest::logprobs
  struct ChoiceState {
    std::string echo;  // completions with echo: the prompt's text
    std::string text;  // not streaming: what arrived so far (after the echo)
    std::vector<TokenLogprob> logprobs;  // not streaming, with logprobs
    bool done = false;
    FinishReason finish = FinishReason::kLength;
    int64_t prompt = 0, completion = 0, cached = 0;
    int64_t offset = 0;  // streaming completions with logprobs: text_offset of the next token
  };
  std::vector<ChoiceState> choices;
  // Echo with logprobs: each prompt's entries, before its choices' own.
  std::vector<nlohmann::json> prompt_logprobs;
  int remaining = 0;  // choices not done
};

}  // namespace rotor::serve
