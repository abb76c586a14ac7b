#include "server/server.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <algorithm>
#include <new>
#include <thread>

#include "server/tool_calls.h"
#include "server/web.h"

namespace rotor::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(Endpoint endpoint) {
  static const uint64_t salt = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{:012x}{:06x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                     salt & 0xFFFFFFFFFFFF, counter.fetch_add(1) & 0xFFFFFF);
}

// Validation messages name command-line flags; a request names fields.
ApiError FromEvent(const StreamEvent& e) {
  ApiError err;
  err.status = e.status;
  err.message = e.text;
  if (e.status >= 500) err.type = "server_error";
  return err;
}

}  // namespace

const char* ServerStateName(ServerState state) {
  switch (state) {
    case ServerState::kLoading:
      return "loading";
    case ServerState::kReady:
      return "ok";
    case ServerState::kDraining:
      return "draining";
  }
  return "unknown";
}

Result<std::unique_ptr<Server>> Server::Bind(const ServeOptions& options) {
  if (options.parallel < 1) return Errorf("serve: --parallel {} must be >= 1", options.parallel);
  if (options.max_queue < 0) return Errorf("serve: --max-queue {} must be >= 0", options.max_queue);
  if (options.max_body == 0) return Status::Error("serve: --max-body must be positive");
  if (options.prefill_step < 0)
    return Errorf("serve: --prefill-step {} must be >= 0", options.prefill_step);
  for (const char c : options.replica_id)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return Status::Error("serve: --replica-id must not hold control characters");
  if (!options.slot_save_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.slot_save_path, ec);
    if (!std::filesystem::is_directory(options.slot_save_path))
      return Errorf("serve: --slot-save-path {} is not a directory{}", options.slot_save_path,
                    ec ? ": " + ec.message() : "");
  }
  for (const auto& [name, v] :
       {std::pair<const char*, double>{"--max-connections", options.max_connections},
        {"--max-connections-per-client", options.max_connections_per_client},
        {"--max-headers", options.max_headers},
        {"--keep-alive-requests", options.keep_alive_requests},
        {"--header-timeout", options.header_timeout_s},
        {"--body-timeout", options.body_timeout_s},
        {"--keep-alive-timeout", options.keep_alive_timeout_s}})
    if (v < 0 || (v == 0 && std::string_view(name) != "--max-connections-per-client"))
      return Errorf("serve: {} {} must be positive", name, v);
  if (!options.pooling.empty()) {
    const Result<Pooling> pooling = ParsePooling(options.pooling);
    if (!pooling.ok()) return pooling.status().WithContext("serve: --pooling");
    if (*pooling == Pooling::kNone)
      return Status::Error(
          "serve: --pooling none gives a vector per token, which /v1/embeddings cannot return; "
          "choose mean, cls or last");
  }
  if (options.max_header_bytes < 64)
    return Errorf("serve: --max-header-bytes {} must be at least 64", options.max_header_bytes);
  std::unique_ptr<Server> s(new Server());
  s->options_ = options;
  s->started_ = UnixNow();
  auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  HttpServerOptions ho;
  ho.host = options.host;
  ho.port = options.port;
  ho.limits = HttpLimits{options.max_header_bytes, options.max_headers, options.max_body};
  ho.max_connections = options.max_connections;
  ho.max_connections_per_client = options.max_connections_per_client;
  ho.header_timeout = ms(options.header_timeout_s);
  ho.body_timeout = ms(options.body_timeout_s);
  ho.keep_alive_timeout = ms(options.keep_alive_timeout_s);
  ho.keep_alive_requests = options.keep_alive_requests;
  Server* self = s.get();
  ASSIGN_OR_RETURN(
      s->http_,
      HttpServer::Bind(
          ho, [self](std::shared_ptr<HttpExchange> ex) { self->Dispatch(std::move(ex)); },
          [self](int status, const std::string& message, const HttpRequest* req) {
            return self->ErrorPage(status, message, req);
          }));
  s->port_ = s->http_->port();
  s->replica_id_ = options.replica_id.empty() ? fmt::format("{}:{}", options.host, s->port_)
                                              : options.replica_id;
  s->http_->set_default_headers({{"X-Rotor-Replica", s->replica_id_}});
  s->workers_ = std::make_unique<WorkerPool>(options.http_threads > 0 ? options.http_threads
                                                                      : kDefaultWorkers);
  return s;
}

Result<std::unique_ptr<Server>> Server::Create(const ServeOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Server> s, Bind(options));
  RETURN_IF_ERROR(s->Load());
  return s;
}

Status Server::Load() {
  if (state_.load() != ServerState::kLoading) return Status::Error("serve: loaded already");
  EngineOptions eo = options_.engine;
  eo.max_seqs = options_.parallel;
  ASSIGN_OR_RETURN(engine_, Engine::Create(eo));
  RETURN_IF_ERROR(
      engine_->Validate(options_.defaults).status().WithContext("serve: default options"));
  if (!options_.chat_template.empty()) {
    ASSIGN_OR_RETURN(chat_template_, ChatTemplate::FromName(options_.chat_template));
  } else {
    Result<std::string> jinja = engine_->model().file().GetStringOr("tokenizer.chat_template", "");
    Result<ChatTemplate> t =
        jinja.ok() ? ChatTemplate::Detect(*jinja) : Result<ChatTemplate>(jinja.status());
    if (t.ok()) {
      chat_template_ = *t;
    } else {
      std::fprintf(stderr, "rotor serve: %s; using 'plain' (choose with --chat-template)\n",
                   t.message().c_str());
    }
  }
  RETURN_IF_ERROR(CheckChatTemplateTokens(chat_template_, engine_->tokenizer()));
  if (options_.embeddings) {
    ASSIGN_OR_RETURN(pooling_, options_.pooling.empty() ? ModelPooling(engine_->model())
                                                        : ParsePooling(options_.pooling));
    if (pooling_ == Pooling::kNone)
      return Status::Error(
          "serve: the model's pooling is 'none' (a vector per token), which /v1/embeddings "
          "cannot return; choose --pooling mean, cls or last");
  }
  model_id_ = std::filesystem::path(options_.engine.model_path).stem().string();
  batcher_ =
      std::make_unique<Batcher>(*engine_, Batcher::Options{.parallel = options_.parallel,
                                                           .max_queue = options_.max_queue,
                                                           .prefill_step = options_.prefill_step});
  batcher_->Start();
  // Handlers read engine_, batcher_, model_id_ and chat_template_ only after
  // seeing kReady (the atomic orders these writes before).
  ServerState loading = ServerState::kLoading;
  state_.compare_exchange_strong(loading, ServerState::kReady);
  return Status::Ok();
}

Server::~Server() {
  if (batcher_) batcher_->Stop();
  if (http_) http_->Stop();
  workers_.reset();  // before the batcher and the engine its tasks use
}

Status Server::Run() {
  http_->Run();
  // While kLoading, Load() may be writing batcher_ (the destructor stops it).
  if (state_.load() != ServerState::kLoading) batcher_->Stop();
  return Status::Ok();
}

int64_t Server::Drain(std::chrono::milliseconds timeout) {
  // A request counts itself in flight before it reads the state, and Drain
  // sets the state before it reads the count: no request slips between.
  state_.store(ServerState::kDraining);
  const auto deadline = Clock::now() + timeout;
  while (in_flight_.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return in_flight_.load();
}

void Server::Stop() {
  if (state_.load() != ServerState::kLoading && batcher_) batcher_->Stop();
  if (http_) http_->Stop();
}

std::optional<ApiError> Server::Unavailable() const {
  const ServerState state = state_.load();
  if (state == ServerState::kReady) return std::nullopt;
  if (state == ServerState::kLoading)
    return ApiError{503, "the model is loading; retry later", "unavailable_error", "", "loading"};
  return ApiError{503, "this replica is shutting down (draining); send the request to another",
                  "unavailable_error", "", "draining"};
}

void Server::Respond(HttpExchange& ex, const ApiError& e, HttpHeaders headers) {
  if (e.status == 503) headers.emplace_back("Retry-After", "1");
  ex.Respond(HttpResponse{e.status, kJson, Dump(ErrorBody(e)), std::move(headers)});
  metrics_.CountRequest(ex.request().path, e.status);
}

HttpResponse Server::ErrorPage(int status, const std::string& message, const HttpRequest* req) {
  ApiError e = ErrorForStatus(status, req ? req->method : "", req ? req->path : "");
  e.message = message;
  metrics_.CountRequest(req && !req->path.empty() ? req->path : "-", status);
  return HttpResponse{status, kJson, Dump(ErrorBody(e)), {}};
}

void Server::OutOfMemory(HttpExchange& ex) {
  try {
    Respond(ex, ApiError{503, "out of memory while handling the request; retry later",
                         "server_error", "", "out_of_memory"});
  } catch (const std::bad_alloc&) {
    // Not even the answer fits: the client waits until it gives up.
  }
}

// One generation request from its dispatch to its last byte: the exchange,
// the sequence's stream, and (engine thread, under mu) the text so far.
struct Server::Call {
  std::shared_ptr<HttpExchange> ex;
  Endpoint endpoint = Endpoint::kCompletions;
  std::shared_ptr<void> token;  // in flight until the exchange ends
  std::mutex mu;
  std::shared_ptr<RequestStream> stream;  // once submitted
  ResponseMeta meta;
  bool streaming = false, include_usage = false;
  bool ready = false;     // events may be written
  bool finished = false;  // the last event was written
  bool gone = false;      // the client went away
  std::string text;       // not streaming (or tools offered): what arrived so far
  // Tools offered: the reply is held until its end and its calls parsed out.
  bool tools_offered = false;
  std::vector<ChatTool> tools;
  std::string path;
};

void Server::Dispatch(std::shared_ptr<HttpExchange> ex) {
  const HttpRequest& req = ex->request();
  const std::string& path = req.path;
  const std::string& method = req.method;
  static constexpr std::string_view kMethods[] = {"GET", "POST", "PUT", "PATCH",
                                                  "DELETE", "HEAD", "OPTIONS"};
  if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods))
    return Respond(*ex, ApiError{400, fmt::format("method '{}' is not supported", method),
                                 "invalid_request_error", "", ""});
  auto not_allowed = [&](const char* allow) {
    Respond(*ex, ErrorForStatus(405, method, path), {{"Allow", allow}});
  };
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (method != "POST") return not_allowed("POST");
    auto call = std::make_shared<Call>();
    call->ex = ex;
    call->endpoint = path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat;
    call->path = path;
    // Counted in flight before the state is read (see Drain); uncounted when
    // the exchange ends, after its last byte or when the client goes.
    in_flight_.fetch_add(1);
    call->token = std::shared_ptr<void>(nullptr, [this](void*) { in_flight_.fetch_sub(1); });
    ex->OnDone([this, call](bool completed) {
      std::shared_ptr<RequestStream> stream;
      {
        std::lock_guard<std::mutex> lock(call->mu);
        call->gone = !completed;
        if (!completed && !call->finished) {
          call->finished = true;
          stream = call->stream;
          // nginx's "client closed request"; nobody reads it.
          metrics_.CountRequest(call->path, 499);
        }
        call->token.reset();
        if (call->stream) call->stream->SetNotify(nullptr);
      }
      if (stream) batcher_->Cancel(stream);
    });
    if (auto e = Unavailable()) return Respond(*ex, *e);
    if (!workers_->Run([this, call] {
          try {
            HandleGenerate(call);
          } catch (const std::bad_alloc&) {
            OutOfMemory(*call->ex);
          }
        }))
      Respond(*ex, ApiError{503, "no thread to handle the request (out of memory or threads); "
                                 "retry later", "server_error", "", "out_of_memory"});
    return;
  }
  if (path.starts_with("/slots/")) {
    if (method != "POST") return Respond(*ex, ErrorForStatus(404, method, path));
    if (!workers_->Run([this, ex] {
          try {
            HandleSlots(ex);
          } catch (const std::bad_alloc&) {
            OutOfMemory(*ex);
          }
        }))
      Respond(*ex, ApiError{503, "no thread to handle the request (out of memory or threads); "
                                 "retry later", "server_error", "", "out_of_memory"});
    return;
  }
  if (DispatchExtra(ex)) return;
  if (const StaticFile* file = FindStaticFile(path)) {
    // The chat page (web/, embedded at build time; not counted in /metrics).
    if (method != "GET") return not_allowed("GET");
    return ex->Respond(HttpResponse{200, std::string(file->content_type), std::string(file->body),
                                    {{"Cache-Control", "no-cache"}}});
  }
  if (path != "/v1/models" && path != "/health" && path != "/metrics")
    return Respond(*ex, ErrorForStatus(404, method, path));
  if (method != "GET") return not_allowed("GET");
  if (path == "/health") {
    // 200 while the replica takes work, 503 while it loads or drains (a load
    // balancer's health check and a readiness probe read the status; the body
    // says why).
    const ServerState state = state_.load();
    json body = {{"status", ServerStateName(state)}, {"replica", replica_id_}};
    if (state == ServerState::kDraining) body["in_flight"] = in_flight_.load();
    const int status = state == ServerState::kReady ? 200 : 503;
    HttpHeaders headers;
    if (status != 200) headers.emplace_back("Retry-After", "1");
    ex->Respond(HttpResponse{status, kJson, Dump(body), std::move(headers)});
    metrics_.CountRequest(path, status);
    return;
  }
  if (path == "/metrics") {
    metrics_.CountRequest(path, 200);
    const ServerState state = state_.load();
    Metrics::Info info;
    info.max_sequences = options_.parallel;
    info.state = ServerStateName(state);
    info.in_flight = in_flight_.load();
    std::optional<Batcher::Stats> stats;
    if (state != ServerState::kLoading) {
      stats = batcher_->stats();
      info.model_name = model_id_;
      const KvBlockPool& pool = engine_->kv_pool();
      info.kv_capacity_blocks =
          pool.budget_bytes() / std::max<int64_t>(1, pool.BlockBytes(options_.defaults.kv.types));
    }
    ex->Respond(HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                             metrics_.Render(stats ? &*stats : nullptr, info), {}});
    return;
  }
  // /v1/models
  if (auto e = Unavailable()) return Respond(*ex, *e);
  ex->Respond(HttpResponse{
      200, kJson, Dump({{"object", "list"}, {"data", json::array({ModelObject()})}}), {}});
  metrics_.CountRequest(path, 200);
}

std::optional<ApiError> Server::Prepare(const ApiRequest& api, SeqRequest* seq) const {
  const Tokenizer& tok = engine_->tokenizer();
  const char* param = api.endpoint == Endpoint::kChat ? "messages" : "prompt";
  seq->options = api.options;
  seq->spelling = KvSpelling::kField;
  if (api.endpoint == Endpoint::kChat) {
    if (auto e = PrepareTools(api, chat_template_, options_.defaults, &seq->options)) return e;
    // Message content cannot inject control tokens ("<|im_end|>" in a
    // message is plain text).
    const std::vector<ChatSegment> segments = chat_template_.Render(
        api.messages, /*add_generation_prompt=*/true,
        api.tools.offered() ? api.tools.tools : std::vector<ChatTool>{});
    seq->tokens.clear();
    if (seq->options.add_bos && tok.add_bos() && tok.bos() >= 0) seq->tokens.push_back(tok.bos());
    EncodeChatSegments(tok, segments, /*after_special=*/true, &seq->tokens);
    seq->options.trim_leading_space = true;  // as rotor chat: the reply starts at its first word
  } else if (!api.prompt_tokens.empty()) {
    for (int32_t t : api.prompt_tokens)
      if (t >= tok.n_vocab())
        return ApiError{400, fmt::format("token id {} is out of range [0, {})", t, tok.n_vocab()),
                        "invalid_request_error", param, ""};
    seq->tokens = api.prompt_tokens;
  } else {
    seq->tokens = tok.Encode(api.prompt, seq->options.add_bos);
  }
  if (seq->tokens.empty())
    return ApiError{400, "the prompt is empty", "invalid_request_error", param, ""};
  const KvShape shape = engine_->model().config().kv_shape(engine_->n_ctx());
  Result<KvConfig> kv = engine_->Validate(seq->options, KvSpelling::kField);
  if (!kv.ok()) return ApiError{400, kv.message(), "invalid_request_error", "kv", ""};
  if (Status fits = FitsNewCache(*kv, shape, std::ssize(seq->tokens)); !fits.ok())
    return ApiError{400, fits.message(), "invalid_request_error", param, "context_length_exceeded"};
  return std::nullopt;
}

void Server::HandleGenerate(std::shared_ptr<Call> call) {
  HttpExchange& ex = *call->ex;
  if (ex.gone()) return;
  const Endpoint endpoint = call->endpoint;
  ApiRequest api;
  SeqRequest seq;
  try {
    std::string body = std::move(ex.request().body);
    if (auto e = ParseRequest(body, endpoint, options_.defaults, &api)) return Respond(ex, *e);
    body = std::string();
    if (auto e = Prepare(api, &seq)) return Respond(ex, *e);
  } catch (const std::bad_alloc&) {
    return Respond(ex, ApiError{503, "out of memory while reading the request; retry later",
                                "server_error", "", "out_of_memory"});
  }
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->gone) return;
    call->stream = stream;
    call->meta = ResponseMeta{endpoint, NewId(endpoint), UnixNow(), model_id_};
    call->streaming = api.stream;
    call->include_usage = api.include_usage;
    call->tools_offered = api.tools.offered();
    if (call->tools_offered) call->tools = std::move(api.tools.tools);
  }
  // Events are written from the thread that pushes them (the engine's), once
  // the call is ready; those pushed before wait in the stream.
  std::weak_ptr<Call> weak = call;
  stream->SetNotify([this, weak] {
    if (std::shared_ptr<Call> c = weak.lock()) WriteEvents(*c);
  });
  if (!batcher_->Submit(std::move(seq), stream)) {
    stream->SetNotify(nullptr);
    return Respond(
        ex, ApiError{503,
                     fmt::format("the server is busy ({} requests decoding, {} queued at most); "
                                 "retry later",
                                 options_.parallel, options_.max_queue),
                     "server_error", "", "server_busy"});
  }
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->gone) {
      batcher_->Cancel(stream);
      return;
    }
    if (call->streaming) {
      ex.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"},
                                                {"X-Accel-Buffering", "no"}});
      if (endpoint == Endpoint::kChat)
        ex.Write("data: " + Dump(StreamChunk(call->meta, "", true, std::nullopt)) + "\n\n");
    }
    call->ready = true;
  }
  WriteEvents(*call);
}

void Server::WriteEvents(Call& call) {
  std::lock_guard<std::mutex> lock(call.mu);
  if (!call.ready || call.finished) return;
  try {
    WriteEventsLocked(call);
  } catch (const std::bad_alloc&) {
    // The text so far could not grow: the request ends, the server goes on.
    call.finished = true;
    batcher_->Cancel(call.stream);
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

void Server::WriteEventsLocked(Call& call) {
  HttpExchange& ex = *call.ex;
  const ResponseMeta& meta = call.meta;
  for (StreamEvent& e : call.stream->Take()) {
    if (call.tools_offered && e.kind != StreamEvent::Kind::kError) {
      if (e.kind == StreamEvent::Kind::kText) {
        call.text += e.text;
        continue;
      }
      return WriteToolReply(call, e);
    }
    if (!call.streaming) {
      switch (e.kind) {
        case StreamEvent::Kind::kText:
          call.text += e.text;
          break;
        case StreamEvent::Kind::kDone:
          ex.Respond(HttpResponse{
              200, kJson,
              Dump(FullResponse(meta, call.text, e.finish,
                                TokenUsage{e.prompt_tokens, e.completion_tokens, e.cached_tokens})),
              {}});
          metrics_.CountRequest(call.path, 200);
          call.finished = true;
          return;
        case StreamEvent::Kind::kError:
          ex.Respond(HttpResponse{e.status, kJson, Dump(ErrorBody(FromEvent(e))), {}});
          metrics_.CountRequest(call.path, e.status);
          call.finished = true;
          return;
      }
      continue;
    }
    auto send_json = [&](const json& j) { ex.Write("data: " + Dump(j) + "\n\n"); };
    if (e.kind == StreamEvent::Kind::kText) {
      // One chunk per event: the engine releases whole UTF-8 characters only.
      send_json(StreamChunk(meta, e.text, false, std::nullopt));
      continue;
    }
    if (e.kind == StreamEvent::Kind::kDone) {
      send_json(StreamChunk(meta, "", false, e.finish));
      if (call.include_usage)
        send_json(
            UsageChunk(meta, TokenUsage{e.prompt_tokens, e.completion_tokens, e.cached_tokens}));
    } else {
      send_json(ErrorBody(FromEvent(e)));
    }
    ex.Write("data: [DONE]\n\n");
    ex.End();
    metrics_.CountRequest(call.path, ex.gone() ? 499 : 200);
    call.finished = true;
    return;
  }
}

// The whole reply has arrived (kDone): its calls parsed out, as one response
// or as the stream's chunks.
void Server::WriteToolReply(Call& call, const StreamEvent& e) {
  HttpExchange& ex = *call.ex;
  const ToolReply reply = ParseToolReply(call.text, chat_template_.format(), call.tools);
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
