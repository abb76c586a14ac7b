// `rotor serve`: an OpenAI-compatible HTTP server over one Engine.
//
//   POST /v1/completions, POST /v1/chat/completions (stream or not),
//   GET /v1/models, GET /health, GET /metrics (Prometheus),
//   POST /slots/{id}?action=save|restore|erase (with --slot-save-path;
//   slots.cc), POST /tokenize, POST /detokenize, GET /props,
//   GET /v1/models/{id} (extra_endpoints.cc), POST /v1/embeddings (with
//   --embeddings; embeddings.cc).
//
// Life of a replica (behind a load balancer, deploy/): Bind() takes the port
// and answers at once, /health 503 {"status":"loading"} until Load() has the
// model (then 200 {"status":"ok"}); Drain() stops taking work (generation
// requests 503 with Retry-After, /health 503 {"status":"draining"}) and waits
// for the requests in flight, streams included, to be answered. Every
// response carries X-Rotor-Replica: the replica's id (--replica-id).
//
// Threads: one event-loop thread (http_server.h) holds every connection and
// answers what is quick (/health, /metrics, /v1/models, errors); a bounded
// WorkerPool parses, checks and tokenizes generation requests and runs slot
// actions; the Batcher's engine thread runs the Scheduler. A generation
// request is submitted (503 with Retry-After when parallel + max_queue
// requests are in flight) and then holds no thread: what its sequence produces
// is formatted on the engine thread as it is pushed and handed to the loop,
// which writes it. When the client goes away (the loop sees the connection
// close) the sequence is cancelled and its KV cache freed at the next engine
// step; this holds for non-streaming requests too.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "server/api.h"
#include "server/http_server.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/worker_pool.h"
#include "tokenizer/chat_template.h"

namespace rotor::serve {

struct ServeOptions {
  EngineOptions engine;
  GenerateOptions defaults;                // what a request does not say
  int prefill_step = kDefaultPrefillStep;  // prompt tokens per forward pass (the runner's)
  std::string host = "127.0.0.1";
  int port = 8080;             // 0 = any free port (see Server::port())
  int parallel = 4;            // sequences decoding at once
  int max_queue = 64;          // requests waiting beyond those
  std::string chat_template;   // a ChatTemplate name; "" = the model's
  int http_threads = 0;        // worker threads at most (0 = kDefaultWorkers)
  // What one client may cost (http_server.h): defaults for a server on its
  // own; behind a load balancer, every connection comes from its address
  // (max_connections_per_client 0 turns that limit off).
  size_t max_body = 4 << 20;  // bytes, chunked or not
  size_t max_header_bytes = 16 << 10;
  int max_headers = 64;
  int max_connections = 1024;
  int max_connections_per_client = 256;
  double header_timeout_s = 10;  // from a request's first byte to its header's end
  double body_timeout_s = 30;    // from the header's end to the body's end
  double keep_alive_timeout_s = 5;
  int keep_alive_requests = 100;
  // Pages of any origin may call the API from a browser (CORS: preflights
  // answered, a request's Origin allowed on its response), as llama-server.
  bool cors = true;
  bool web_page = true;  // GET / serves the chat page (llama-server's --no-webui turns it off)
  std::string slot_save_path;  // where slot files go; "" = no slot actions
  std::string replica_id;      // X-Rotor-Replica; "" = host:port
  std::string model_alias;     // the model's id in /v1/models and responses; "" = file stem
  bool embeddings = false;     // POST /v1/embeddings answers (else 501)
  std::string pooling;         // of embeddings: mean|cls|last; "" = the model's (ModelPooling)
};

enum class ServerState { kLoading, kReady, kDraining };
const char* ServerStateName(ServerState state);

// Why `name` cannot name a file in --slot-save-path ("" when it can): it must
// be a plain file name, nothing that leaves the directory.
std::string SlotFilenameError(std::string_view name);

// extra_endpoints.cc. Parses a JSON object body whose fields are all among
// `fields` (a 400 names the first other, as fields.h FindUnknownField).
std::optional<ApiError> ParseJsonObject(std::string_view body,
                                        std::initializer_list<std::string_view> fields,
                                        nlohmann::json* out);
// An array of token ids in [0, n_vocab); a 400 names `param` and the value.
std::optional<ApiError> ParseTokenIds(const nlohmann::json& j, const char* param, int32_t n_vocab,
                                      std::vector<int32_t>* out);

class Server {
 public:
  static constexpr int kDefaultWorkers = 4;

  // Checks the options and binds the port (so port() is known before Run());
  // the server is kLoading until Load().
  static Result<std::unique_ptr<Server>> Bind(const ServeOptions& options);
  // Bind and Load.
  static Result<std::unique_ptr<Server>> Create(const ServeOptions& options);
  ~Server();

  // Loads the model and starts the engine thread (kLoading -> kReady); once,
  // before or while Run() serves.
  Status Load();
  // Serves until Stop(); returns once no handler runs any more.
  Status Run();
  // From any thread, once loaded: stops taking requests (kDraining), waits up to
  // `timeout` for those in flight to be answered and returns how many still are
  // (0: drained). Stop() ends them.
  int64_t Drain(std::chrono::milliseconds timeout);
  // From any thread: ends requests in flight (503), then stops listening.
  void Stop();

  int port() const { return port_; }
  const std::string& replica_id() const { return replica_id_; }
  ServerState state() const { return state_.load(); }
  // Generation requests accepted and not yet answered (streams until their
  // last byte is written).
  int64_t in_flight() const { return in_flight_.load(); }
  // After Load():
  const std::string& model_id() const { return model_id_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  const Engine& engine() const { return *engine_; }

 private:
  struct Call;
  Server() = default;
  // Loop thread: routes a request, answering at once or handing it to workers_.
  void Dispatch(std::shared_ptr<HttpExchange> ex);
  void Preflight(HttpExchange& ex);
  // Workers.
  void HandleGenerate(std::shared_ptr<Call> call);
  // Writes what the call's stream holds (the engine thread, as it pushes;
  // server_events.cc).
  void WriteEvents(Call& call);
  void WriteEventsLocked(Call& call);  // call.mu held
  void WriteToolReply(Call& call, const StreamEvent& done);  // call.mu held
  void HandleSlots(const std::shared_ptr<HttpExchange>& ex);
  // Loop thread: routes /tokenize, /detokenize, /props, /v1/models/{id} and
  // the embeddings endpoints; false when `ex` is for none of them.
  bool DispatchExtra(const std::shared_ptr<HttpExchange>& ex);
  void HandleTokenize(HttpExchange& ex);    // workers
  void HandleDetokenize(HttpExchange& ex);  // workers
  void HandleApplyTemplate(HttpExchange& ex);  // workers
  void HandleEmbeddings(HttpExchange& ex);  // workers (embeddings.cc)
  nlohmann::json ModelObject() const;       // an entry of /v1/models
  nlohmann::json Props() const;             // GET /props
  // An error for a request that needs the model when the server is not
  // kReady (503; Respond adds Retry-After).
  std::optional<ApiError> Unavailable() const;
  // Turns a parsed request into the scheduler's; an error for bad input.
  // One sequence per choice (prompt i, choice j at i * n + j); `echoes`: the
  // prompts' texts when the request echoes them.
  std::optional<ApiError> Prepare(const ApiRequest& api, std::vector<SeqRequest>* seqs,
                                  std::vector<std::string>* echoes) const;
  // Completions with echo and logprobs: each prompt's logprobs entries
  // (PromptLogprobsJson), one per prompt of `seqs` (n choices each), scored on
  // the engine thread between scheduler steps (echo_logprobs.cc). Returns
  // early, with `out` short, when the client has gone.
  std::optional<ApiError> ScorePrompts(HttpExchange& ex, const ApiRequest& api,
                                       const std::vector<SeqRequest>& seqs,
                                       const std::vector<std::string>& echoes,
                                       std::vector<nlohmann::json>* out);
  // A kText event's token and log-probabilities, as text.
  TokenLogprob ToTokenLogprob(const StreamEvent& e) const;
  void Respond(HttpExchange& ex, const ApiError& e, HttpHeaders headers = {});
  // A 503 naming memory, if even that can be allocated.
  void OutOfMemory(HttpExchange& ex);
  HttpResponse ErrorPage(int status, const std::string& message, const HttpRequest* req);

  ServeOptions options_;
  std::unique_ptr<Engine> engine_;
  ChatTemplate chat_template_;
  std::string model_id_;
  Pooling pooling_ = Pooling::kMean;  // of embeddings
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<WorkerPool> workers_;
  int64_t started_ = 0;  // unix seconds
  Metrics metrics_;
  int port_ = 0;
  std::string replica_id_;
  std::atomic<ServerState> state_{ServerState::kLoading};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace rotor::serve
