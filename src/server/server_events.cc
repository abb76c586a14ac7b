// The event writer of a generation request: what its streams hold, written
// as SSE chunks or, at the end, as one response (the engine thread, as it
// pushes; Server::HandleGenerate makes the call ready).
#include <algorithm>
#include <new>

#include "server/server_internal.h"
#include "server/tool_calls.h"

namespace rotor::serve {
namespace {

using nlohmann::json;

// Validation messages name command-line flags; a request names fields.
ApiError FromEvent(const StreamEvent& e) {
  ApiError err;
  err.status = e.status;
  err.message = e.text;
  if (e.status >= 500) err.type = "server_error";
  return err;
}

}  // namespace

void Server::WriteEvents(Call& call) {
  std::lock_guard<std::mutex> lock(call.mu);
  if (!call.ready || call.finished) return;
  try {
    WriteEventsLocked(call);
  } catch (const std::bad_alloc&) {
    // The text so far could not grow: the request ends, the server goes on.
    call.finished = true;
    for (const auto& stream : call.streams) batcher_->Cancel(stream);
    const ApiError e{503, "out of memory while writing the response; retry later",
                     "server_error", "", "out_of_memory"};
    if (call.streaming) {
      call.ex->Write("data: " + Dump(ErrorBody(e)) + "\n\n");
      call.ex->End();
    } else {
      call.ex->Respond(HttpResponse{503, kJson, Dump(ErrorBody(e)), {{"Retry-After", "1"}}});
    }
    metrics_.CountRequest(call.path, 503);
  }
}

TokenLogprob Server::ToTokenLogprob(const StreamEvent& e) const {
  const Tokenizer& tok = engine_->tokenizer();
  TokenLogprob t{tok.TokenToPiece(e.token, /*special=*/true), e.logprobs->logprob, {}};
  for (const auto& [id, lp] : e.logprobs->top)
    t.top.emplace_back(tok.TokenToPiece(id, /*special=*/true), lp);
  return t;
}

void Server::WriteEventsLocked(Call& call) {
  HttpExchange& ex = *call.ex;
  const ResponseMeta& meta = call.meta;
  auto send_json = [&](const json& j) { ex.Write("data: " + Dump(j) + "\n\n"); };
  // Usage: each prompt counted once (the numbers of its choice that computed
  // the most of it), the completions of every choice.
  auto usage = [&] {
    TokenUsage u;
    for (size_t i = 0; i < call.choices.size(); ++i) {
      const Call::ChoiceState& c = call.choices[i];
      u.completion += c.completion;
      if (i % call.n != 0) continue;
      int64_t cached = c.cached;
      for (int j = 1; j < call.n; ++j) cached = std::min(cached, call.choices[i + j].cached);
      u.prompt += c.prompt;
      u.cached += cached;
    }
    return u;
  };
  auto fail = [&](const StreamEvent& e) {
    for (const auto& stream : call.streams) batcher_->Cancel(stream);
    call.finished = true;
    if (!call.streaming) {
      ex.Respond(HttpResponse{e.status, kJson, Dump(ErrorBody(FromEvent(e))), {}});
      metrics_.CountRequest(call.path, e.status);
      return;
    }
    send_json(ErrorBody(FromEvent(e)));
    ex.Write("data: [DONE]\n\n");
    ex.End();
    metrics_.CountRequest(call.path, ex.gone() ? 499 : 200);
  };
  if (call.tools_offered) {
    for (StreamEvent& e : call.streams[0]->Take()) {
      if (e.kind == StreamEvent::Kind::kError) return fail(e);
      if (e.kind == StreamEvent::Kind::kText) {
        call.choices[0].text += e.text;
        continue;
      }
      return WriteToolReply(call, e);
    }
    return;
  }
  for (size_t i = 0; i < call.streams.size(); ++i) {
    Call::ChoiceState& choice = call.choices[i];
    const int index = static_cast<int>(i);
    for (StreamEvent& e : call.streams[i]->Take()) {
      if (e.kind == StreamEvent::Kind::kError) return fail(e);
      if (e.kind == StreamEvent::Kind::kText) {
        if (!call.streaming) {
          choice.text += e.text;
          if (e.logprobs) choice.logprobs.push_back(ToTokenLogprob(e));
        } else if (!e.logprobs) {
          // One chunk per event: the engine releases whole UTF-8 characters only.
          send_json(StreamChunk(meta, e.text, false, std::nullopt, index));
        } else {
          TokenLogprob t = ToTokenLogprob(e);
          const int64_t offset = choice.offset;
          choice.offset += std::ssize(t.token);
          send_json(StreamChunk(meta, e.text, false, std::nullopt, index,
                                LogprobsJson(meta.endpoint, {std::move(t)}, offset)));
        }
        continue;
      }
      // kDone
      choice.done = true;
      choice.finish = e.finish;
      choice.prompt = e.prompt_tokens;
      choice.completion = e.completion_tokens;
      choice.cached = e.cached_tokens;
      --call.remaining;
      if (call.streaming) send_json(StreamChunk(meta, "", false, e.finish, index));
    }
  }
  if (call.remaining > 0) return;
  call.finished = true;
  if (!call.streaming) {
    std::vector<Choice> choices;
    for (Call::ChoiceState& c : call.choices) {
      json logprobs = nullptr;
      if (call.logprobs >= 0)
        logprobs = LogprobsJson(meta.endpoint, c.logprobs, std::ssize(c.echo));
      if (!call.prompt_logprobs.empty())
        logprobs = ConcatLogprobs(call.prompt_logprobs[choices.size() / call.n], logprobs);
      choices.push_back(Choice{c.echo + c.text, c.finish, std::move(logprobs)});
    }
    ex.Respond(HttpResponse{200, kJson, Dump(FullResponse(meta, choices, usage())), {}});
    metrics_.CountRequest(call.path, 200);
    return;
  }
  if (call.include_usage) send_json(UsageChunk(meta, usage()));
  ex.Write("data: [DONE]\n\n");
  ex.End();
  metrics_.CountRequest(call.path, ex.gone() ? 499 : 200);
}

// The whole reply has arrived (kDone): its calls parsed out, as one response
// or as the stream's chunks.
void Server::WriteToolReply(Call& call, const StreamEvent& e) {
  HttpExchange& ex = *call.ex;
  const ToolReply reply =
      ParseToolReply(call.choices[0].text, chat_template_.format(), call.tools);
  const TokenUsage usage{e.prompt_tokens, e.completion_tokens, e.cached_tokens};
  call.finished = true;
  if (!call.streaming) {
    ex.Respond(HttpResponse{200, kJson, Dump(FullToolResponse(call.meta, reply, e.finish, usage)),
                            {}});
    metrics_.CountRequest(call.path, 200);
    return;
  }
  for (const json& chunk : ToolStreamChunks(call.meta, reply, e.finish))
    ex.Write("data: " + Dump(chunk) + "\n\n");
  if (call.include_usage) ex.Write("data: " + Dump(UsageChunk(call.meta, usage)) + "\n\n");
  ex.Write("data: [DONE]\n\n");
  ex.End();
  metrics_.CountRequest(call.path, ex.gone() ? 499 : 200);
}

}  // namespace rotor::serve
