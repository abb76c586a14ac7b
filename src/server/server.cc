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

#include "server/server_internal.h"
#include "server/tool_calls.h"
#include "server/web.h"

namespace rotor::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

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
  ho.cors = options.cors;
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
  model_id_ = options_.model_alias.empty()
                  ? std::filesystem::path(options_.engine.model_path).stem().string()
                  : options_.model_alias;
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

// OPTIONS on any path (200, no body): the methods the server answers, and
// for a browser's CORS preflight (an Origin) what a page may send: the
// methods, the headers it asked for (Authorization, Content-Type, ...), for
// a day. The exchange adds the Origin's Access-Control-Allow-Origin
// (http_server.h).
void Server::Preflight(HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  HttpHeaders headers = {{"Allow", "GET, HEAD, POST, OPTIONS"}};
  if (options_.cors && req.Header("origin")) {
    headers.emplace_back("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    const std::string* asked = req.Header("access-control-request-headers");
    headers.emplace_back("Access-Control-Allow-Headers", asked ? *asked : "*");
    headers.emplace_back("Access-Control-Max-Age", "86400");
  }
  ex.Respond(HttpResponse{200, "", "", std::move(headers)});
  metrics_.CountRequest(req.path, 200);
}

void Server::Dispatch(std::shared_ptr<HttpExchange> ex) {
  // llama-server's other names of the same routes (a client whose base URL
  // lacks /v1 works there).
  static constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
      {"/chat/completions", "/v1/chat/completions"},
      {"/models", "/v1/models"},
      {"/v1/health", "/health"}};
  for (const auto& [alias, route] : kAliases)
    if (ex->request().path == alias) ex->request().path = route;
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
  if (method == "OPTIONS") return Preflight(*ex);
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
      std::vector<std::shared_ptr<RequestStream>> streams;
      {
        std::lock_guard<std::mutex> lock(call->mu);
        call->gone = !completed;
        if (!completed && !call->finished) {
          call->finished = true;
          streams = call->streams;
          // nginx's "client closed request"; nobody reads it.
          metrics_.CountRequest(call->path, 499);
        }
        call->token.reset();
        for (const auto& stream : call->streams) stream->SetNotify(nullptr);
      }
      for (const auto& stream : streams) batcher_->Cancel(stream);
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
  if (const StaticFile* file = options_.web_page ? FindStaticFile(path) : nullptr) {
    // The chat page (web/, embedded at build time; not counted in /metrics).
    if (method != "GET") return not_allowed("GET, HEAD");
    return ex->Respond(HttpResponse{200, std::string(file->content_type), std::string(file->body),
                                    {{"Cache-Control", "no-cache"}}});
  }
  if (path != "/v1/models" && path != "/health" && path != "/metrics")
    return Respond(*ex, ErrorForStatus(404, method, path));
  if (method != "GET") return not_allowed("GET, HEAD");
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

std::optional<ApiError> Server::Prepare(const ApiRequest& api, std::vector<SeqRequest>* seqs,
                                        std::vector<std::string>* echoes) const {
  const Tokenizer& tok = engine_->tokenizer();
  const char* param = api.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (api.n > options_.parallel)
    return BadRequest(fmt::format("'n' {} is more than the server decodes at once (--parallel {})",
                                  api.n, options_.parallel),
                      "n");
  for (const auto& [id, bias] : api.options.sampling.logit_bias)
    if (id >= tok.n_vocab())
      return BadRequest(fmt::format("'logit_bias': token id {} is out of the vocabulary [0, {})",
                                    id, tok.n_vocab()),
                        "logit_bias");
  SeqRequest seq;
  seq.options = api.options;
  seq.spelling = KvSpelling::kField;
  std::vector<std::vector<int32_t>> prompts;
  if (api.endpoint == Endpoint::kChat) {
    if (api.tools.offered() && (api.n > 1 || api.logprobs >= 0))
      return BadRequest(
          "tools are offered to one choice without logprobs: 'n' must be 1 and 'logprobs' off",
          api.n > 1 ? "n" : "logprobs");
    if (auto e = PrepareTools(api, chat_template_, engine_->tokenizer(), options_.defaults,
                              &seq.options))
      return e;
    // Message content cannot inject control tokens ("<|im_end|>" in a
    // message is plain text).
    const std::vector<ChatSegment> segments =
        chat_template_.Render(api.messages, /*add_generation_prompt=*/true,
                              api.tools.offered() ? api.tools.tools : std::vector<ChatTool>{});
    std::vector<int32_t>& tokens = prompts.emplace_back();
    if (seq.options.add_bos && tok.add_bos() && tok.bos() >= 0) tokens.push_back(tok.bos());
    EncodeChatSegments(tok, segments, /*after_special=*/true, &tokens);
    seq.options.trim_leading_space = true;  // as rotor chat: the reply starts at its first word
  } else {
    for (const ApiPrompt& p : api.prompts) {
      if (!p.tokens.empty()) {
        for (int32_t t : p.tokens)
          if (t >= tok.n_vocab())
            return BadRequest(fmt::format("token id {} is out of range [0, {})", t, tok.n_vocab()),
                              param);
        prompts.push_back(p.tokens);
      } else {
        // Control-token text ("<|im_start|>", "</s>") is those tokens, as
        // llama-server reads a completion prompt: a client that renders its
        // own chat template sends them as text. (Chat messages stay text.)
        prompts.push_back(tok.Encode(p.text, seq.options.add_bos, /*parse_special=*/true));
      }
      if (api.echo) echoes->push_back(p.tokens.empty() ? p.text : tok.Decode(p.tokens));
    }
  }
  const int64_t n_choices = static_cast<int64_t>(prompts.size()) * api.n;
  if (n_choices > options_.parallel + options_.max_queue)
    return BadRequest(
        fmt::format("{} prompts x n {} = {} choices: more than the server holds at once "
                    "(--parallel {} + --max-queue {})",
                    prompts.size(), api.n, n_choices, options_.parallel, options_.max_queue),
        api.n > 1 ? "n" : "prompt");
  const KvShape shape = engine_->model().kv_shape(engine_->n_ctx());
  Result<KvConfig> kv = engine_->Validate(seq.options, KvSpelling::kField);
  if (!kv.ok()) return BadRequest(kv.message(), "kv");
  for (std::vector<int32_t>& tokens : prompts) {
    if (tokens.empty()) return BadRequest("the prompt is empty", param);
    if (Status fits = FitsNewCache(*kv, shape, std::ssize(tokens)); !fits.ok())
      return BadRequest(fits.message(), param, "context_length_exceeded");
    // Each choice samples on its own: seed + j (a random seed stays random).
    for (int j = 0; j < api.n; ++j) {
      SeqRequest& r = seqs->emplace_back(seq);
      r.tokens = tokens;
      if (r.options.sampling.seed != kRandomSeed && j > 0) {
        r.options.sampling.seed += static_cast<uint64_t>(j);
        if (r.options.sampling.seed == kRandomSeed) ++r.options.sampling.seed;
      }
    }
  }
  return std::nullopt;
}

void Server::HandleGenerate(std::shared_ptr<Call> call) {
  HttpExchange& ex = *call->ex;
  if (ex.gone()) return;
  const Endpoint endpoint = call->endpoint;
  ApiRequest api;
  std::vector<SeqRequest> seqs;
  std::vector<std::string> echoes;
  std::vector<json> prompt_logprobs;
  try {
    std::string body = std::move(ex.request().body);
    if (auto e = ParseRequest(body, endpoint, options_.defaults, &api)) return Respond(ex, *e);
    body = std::string();
    if (auto e = Prepare(api, &seqs, &echoes)) return Respond(ex, *e);
    if (api.echo && api.logprobs >= 0) {
      if (auto e = ScorePrompts(ex, api, seqs, echoes, &prompt_logprobs)) return Respond(ex, *e);
      if (ex.gone()) return;
    }
  } catch (const std::bad_alloc&) {
    return Respond(ex, ApiError{503, "out of memory while reading the request; retry later",
                                "server_error", "", "out_of_memory"});
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < seqs.size(); ++i) streams.push_back(std::make_shared<RequestStream>());
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->gone) return;
    call->streams = streams;
    call->meta = ResponseMeta{endpoint, NewId(endpoint), UnixNow(), model_id_};
    call->streaming = api.stream;
    call->include_usage = api.include_usage;
    call->tools_offered = api.tools.offered();
    if (call->tools_offered) call->tools = std::move(api.tools.tools);
    call->n = api.n;
    call->logprobs = api.logprobs;
    call->choices.resize(seqs.size());
    call->prompt_logprobs = std::move(prompt_logprobs);
    call->remaining = static_cast<int>(seqs.size());
    if (!echoes.empty())
      for (size_t i = 0; i < seqs.size(); ++i) {
        call->choices[i].echo = echoes[i / api.n];
        call->choices[i].offset = std::ssize(call->choices[i].echo);
      }
  }
  // Events are written from the thread that pushes them (the engine's), once
  // the call is ready; those pushed before wait in the stream.
  std::weak_ptr<Call> weak = call;
  for (const auto& stream : streams)
    stream->SetNotify([this, weak] {
      if (std::shared_ptr<Call> c = weak.lock()) WriteEvents(*c);
    });
  const size_t n_seqs = seqs.size();
  if (!batcher_->Submit(std::move(seqs), streams)) {
    for (const auto& stream : streams) stream->SetNotify(nullptr);
    return Respond(
        ex, ApiError{503,
                     fmt::format("the server is busy ({} requests decoding, {} queued at most{}); "
                                 "retry later",
                                 options_.parallel, options_.max_queue,
                                 n_seqs > 1 ? fmt::format(", this one needs {}", n_seqs) : ""),
                     "server_error", "", "server_busy"});
  }
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->gone) {
      for (const auto& stream : streams) batcher_->Cancel(stream);
      return;
    }
    if (call->streaming) {
      ex.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"},
                                                {"X-Accel-Buffering", "no"}});
      for (size_t i = 0; i < call->choices.size(); ++i) {
        const int index = static_cast<int>(i);
        if (endpoint == Endpoint::kChat)
          ex.Write("data: " + Dump(StreamChunk(call->meta, "", true, std::nullopt, index)) +
                   "\n\n");
        else if (!call->choices[i].echo.empty() || !call->prompt_logprobs.empty())
          ex.Write("data: " +
                   Dump(StreamChunk(call->meta, call->choices[i].echo, false, std::nullopt, index,
                                    call->prompt_logprobs.empty()
                                        ? json(nullptr)
                                        : call->prompt_logprobs[i / call->n])) +
                   "\n\n");
      }
    }
    call->ready = true;
  }
  WriteEvents(*call);
}

}  // namespace rotor::serve
