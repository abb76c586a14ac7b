#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "server/socket.h"

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
  std::unique_ptr<Server> s(new Server());
  s->options_ = options;
  s->http_ = std::make_unique<httplib::Server>();
  // Every in-flight request holds a worker thread for its whole life; the rest
  // answer /health, /metrics and the 503s while the server is full.
  const int threads =
      options.http_threads > 0 ? options.http_threads : options.parallel + options.max_queue + 16;
  s->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s->http_->set_payload_max_length(options.max_body);
  s->http_->set_keep_alive_max_count(1000);
  // SO_REUSEADDR but not httplib's default SO_REUSEPORT, which would let a
  // second server bind the same port; and the socket, to widen the backlog.
  auto listen_fd = std::make_shared<int>(-1);
  s->http_->set_socket_options([listen_fd](int fd) {
    *listen_fd = fd;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (options.port == 0) {
    s->port_ = s->http_->bind_to_any_port(options.host);
    if (s->port_ < 0) s->port_ = 0;
  } else if (s->http_->bind_to_port(options.host, options.port)) {
    s->port_ = options.port;
  }
  if (s->port_ <= 0)
    return Errorf("serve: cannot listen on {}:{}: {}", options.host, options.port,
                  std::strerror(errno));
  // httplib 0.11 listens with a backlog of 5: a burst of clients would
  // overflow it and some connections be reset. listen() again only resizes it.
  if (*listen_fd >= 0) listen(*listen_fd, SOMAXCONN);
  s->replica_id_ = options.replica_id.empty() ? fmt::format("{}:{}", options.host, s->port_)
                                              : options.replica_id;
  s->http_->set_default_headers({{"X-Rotor-Replica", s->replica_id_}});
  s->Routes();
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
  if (http_) http_->stop();
}

Status Server::Run() {
  const bool ok = http_->listen_after_bind();
  // While kLoading, Load() may be writing batcher_ (the destructor stops it).
  if (state_.load() != ServerState::kLoading) batcher_->Stop();
  return ok ? Status::Ok() : Errorf("serve: the HTTP server on {}:{} failed", options_.host, port_);
}

int64_t Server::Drain(std::chrono::milliseconds timeout) {
  // A handler counts itself in flight before it reads the state, and Drain
  // sets the state before it reads the count: no request slips between.
  state_.store(ServerState::kDraining);
  const auto deadline = Clock::now() + timeout;
  while (in_flight_.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return in_flight_.load();
}

void Server::Stop() {
  if (state_.load() != ServerState::kLoading && batcher_) batcher_->Stop();
  if (http_) http_->stop();
}

std::optional<ApiError> Server::Unavailable(httplib::Response& res) const {
  const ServerState state = state_.load();
  if (state == ServerState::kReady) return std::nullopt;
  res.set_header("Retry-After", "1");
  if (state == ServerState::kLoading)
    return ApiError{503, "the model is loading; retry later", "unavailable_error", "", "loading"};
  return ApiError{503, "this replica is shutting down (draining); send the request to another",
                  "unavailable_error", "", "draining"};
}

namespace {

void SetError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(Dump(ErrorBody(e)), kJson);
}

}  // namespace

void Server::Routes() {
  httplib::Server& h = *http_;
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(req, res, Endpoint::kCompletions);
  });
  h.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(req, res, Endpoint::kChat);
  });
  h.Post(R"(/slots/([^/]*))",
         [this](const httplib::Request& req, httplib::Response& res) { HandleSlots(req, res); });
  const int64_t started = UnixNow();
  h.Get("/v1/models", [this, started](const httplib::Request& req, httplib::Response& res) {
    if (auto e = Unavailable(res)) {
      SetError(res, *e);
      metrics_.CountRequest(req.path, e->status);
      return;
    }
    json model = {{"id", model_id_},
                  {"object", "model"},
                  {"created", started},
                  {"owned_by", "rotor"},
                  {"meta",
                   {{"n_ctx", engine_->n_ctx()},
                    {"n_vocab", engine_->model().config().n_vocab},
                    {"chat_template", chat_template_.name()},
                    {"parallel", options_.parallel}}}};
    res.set_content(Dump({{"object", "list"}, {"data", json::array({model})}}), kJson);
    metrics_.CountRequest(req.path, 200);
  });
  // 200 while the replica takes work, 503 while it loads or drains (a load
  // balancer's health check and a readiness probe read the status; the body
  // says why).
  h.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    const ServerState state = state_.load();
    json body = {{"status", ServerStateName(state)}, {"replica", replica_id_}};
    if (state == ServerState::kDraining) body["in_flight"] = in_flight_.load();
    res.status = state == ServerState::kReady ? 200 : 503;
    if (state != ServerState::kReady) res.set_header("Retry-After", "1");
    res.set_content(Dump(body), kJson);
    metrics_.CountRequest(req.path, res.status);
  });
  h.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    metrics_.CountRequest(req.path, 200);
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
    res.set_content(metrics_.Render(stats ? &*stats : nullptr, info),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  // Known paths with the wrong method: 405 and the method that is allowed.
  auto not_allowed = [this](const char* allow) {
    return [this, allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      SetError(res, ErrorForStatus(405, req.method, req.path));
      metrics_.CountRequest(req.path, 405);
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    h.Get(path, not_allowed("POST"));
    h.Put(path, not_allowed("POST"));
    h.Patch(path, not_allowed("POST"));
    h.Delete(path, not_allowed("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    h.Post(path, not_allowed("GET"));
    h.Put(path, not_allowed("GET"));
    h.Patch(path, not_allowed("GET"));
    h.Delete(path, not_allowed("GET"));
  }
  // httplib's own answers (404, 413 over --max-body, 400 for broken HTTP) get
  // an error object too; handlers' errors already have one.
  h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    SetError(res, ErrorForStatus(res.status, req.method, req.path));
    metrics_.CountRequest(req.path, res.status);
  });
  h.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SetError(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
        metrics_.CountRequest(req.path, 500);
      });
}

std::optional<ApiError> Server::Prepare(const ApiRequest& api, SeqRequest* seq) const {
  const Tokenizer& tok = engine_->tokenizer();
  const char* param = api.endpoint == Endpoint::kChat ? "messages" : "prompt";
  seq->options = api.options;
  seq->spelling = KvSpelling::kField;
  if (api.endpoint == Endpoint::kChat) {
    // Message content cannot inject control tokens ("<|im_end|>" in a
    // message is plain text).
    const std::vector<ChatSegment> segments =
        chat_template_.Render(api.messages, /*add_generation_prompt=*/true);
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

void Server::HandleGenerate(const httplib::Request& req, httplib::Response& res,
                            Endpoint endpoint) {
  auto fail = [&](const ApiError& e) {
    SetError(res, e);
    metrics_.CountRequest(req.path, e.status);
  };
  // Counted in flight before the state is read (see Drain); uncounted when
  // the last owner of the token (the handler, or a stream's provider) ends.
  in_flight_.fetch_add(1);
  std::shared_ptr<void> token(nullptr, [this](void*) { in_flight_.fetch_sub(1); });
  if (auto e = Unavailable(res)) return fail(*e);
  ApiRequest api;
  if (auto e = ParseRequest(req.body, endpoint, options_.defaults, &api)) return fail(*e);
  SeqRequest seq;
  if (auto e = Prepare(api, &seq)) return fail(*e);
  ResponseMeta meta{endpoint, NewId(endpoint), UnixNow(), model_id_};
  auto stream = std::make_shared<RequestStream>();
  if (!batcher_->Submit(std::move(seq), stream)) {
    res.set_header("Retry-After", "1");
    return fail(
        ApiError{503,
                 fmt::format("the server is busy ({} requests decoding, {} queued at most); "
                             "retry later",
                             options_.parallel, options_.max_queue),
                 "server_error", "", "server_busy"});
  }
  if (api.stream) {
    RespondStream(req, res, std::move(meta), api.include_usage, std::move(stream),
                  std::move(token));
  } else {
    RespondWhole(req, res, meta, std::move(stream));
  }
}

void Server::RespondWhole(const httplib::Request& req, httplib::Response& res,
                          const ResponseMeta& meta, std::shared_ptr<RequestStream> stream) {
  const ClientProbe probe(req);
  std::string text;
  Clock::time_point last_probe = Clock::now();
  for (;;) {
    for (StreamEvent& e : stream->Wait(kPollInterval)) {
      switch (e.kind) {
        case StreamEvent::Kind::kText:
          text += e.text;
          break;
        case StreamEvent::Kind::kDone:
          res.set_content(
              Dump(FullResponse(meta, text, e.finish,
                                TokenUsage{e.prompt_tokens, e.completion_tokens, e.cached_tokens})),
              kJson);
          metrics_.CountRequest(req.path, 200);
          return;
        case StreamEvent::Kind::kError:
          SetError(res, FromEvent(e));
          metrics_.CountRequest(req.path, e.status);
          return;
      }
    }
    if (Clock::now() - last_probe >= kPollInterval) {
      last_probe = Clock::now();
      if (probe.Gone()) {
        batcher_->Cancel(stream);
        // nginx's "client closed request"; nobody reads it.
        SetError(res, ApiError{499, "the client closed the connection", "invalid_request_error", "",
                               "client_closed"});
        metrics_.CountRequest(req.path, 499);
        return;
      }
    }
  }
}

void Server::RespondStream(const httplib::Request& req, httplib::Response& res, ResponseMeta meta,
                           bool include_usage, std::shared_ptr<RequestStream> stream,
                           std::shared_ptr<void> token) {
  struct State {
    explicit State(const httplib::Request& req) : probe(req) {}
    ClientProbe probe;
    Clock::time_point last_probe = Clock::now();
    bool started = false;
    bool finished = false;
  };
  auto state = std::make_shared<State>(req);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto provider = [this, meta, include_usage, stream, state, path = req.path](
                      size_t /*offset*/, httplib::DataSink& sink) -> bool {
    auto send = [&](std::string_view data) { return sink.write(data.data(), data.size()); };
    auto send_json = [&](const json& j) { return send("data: " + Dump(j) + "\n\n"); };
    if (!state->started) {
      state->started = true;
      if (meta.endpoint == Endpoint::kChat && !send_json(StreamChunk(meta, "", true, std::nullopt)))
        return false;
    }
    for (StreamEvent& e : stream->Wait(kPollInterval)) {
      if (e.kind == StreamEvent::Kind::kText) {
        // One chunk per event: the engine releases whole UTF-8 characters only.
        if (!send_json(StreamChunk(meta, e.text, false, std::nullopt))) return false;
        continue;
      }
      bool ok = true;
      if (e.kind == StreamEvent::Kind::kDone) {
        ok = send_json(StreamChunk(meta, "", false, e.finish));
        if (ok && include_usage)
          ok = send_json(
              UsageChunk(meta, TokenUsage{e.prompt_tokens, e.completion_tokens, e.cached_tokens}));
      } else {
        ok = send_json(ErrorBody(FromEvent(e)));
      }
      ok = ok && send("data: [DONE]\n\n");
      state->finished = true;
      metrics_.CountRequest(path, ok ? 200 : 499);
      if (ok) sink.done();
      return ok;
    }
    if (Clock::now() - state->last_probe >= kPollInterval) {
      state->last_probe = Clock::now();
      if (state->probe.Gone() || !sink.is_writable()) return false;
    }
    return true;
  };
  // Runs when the response is done with, whether or not the stream finished.
  auto release = [this, stream, state, token, path = req.path](bool /*success*/) {
    if (state->finished) return;
    state->finished = true;
    batcher_->Cancel(stream);
    metrics_.CountRequest(path, 499);
  };
  res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
}

}  // namespace rotor::serve
