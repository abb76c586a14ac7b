// `rotor serve`: an OpenAI-compatible HTTP server over one Engine.
//
//   POST /v1/completions, POST /v1/chat/completions (stream or not),
//   GET /v1/models, GET /health, GET /metrics (Prometheus),
//   POST /slots/{id}?action=save|restore|erase (with --slot-save-path;
//   slots.cc).
//
// Life of a replica (behind a load balancer, deploy/): Bind() takes the port
// and answers at once, /health 503 {"status":"loading"} until Load() has the
// model (then 200 {"status":"ok"}); Drain() stops taking work (generation
// requests 503 with Retry-After, /health 503 {"status":"draining"}) and waits
// for the requests in flight, streams included, to be answered. Every
// response carries X-Rotor-Replica: the replica's id (--replica-id).
//
// Threads: cpp-httplib's worker threads run the handlers (one per connection);
// the Batcher's engine thread runs the Scheduler. A handler validates and
// tokenizes its request, submits it (503 with Retry-After when parallel +
// max_queue requests are in flight) and then waits on its RequestStream,
// writing stream chunks as text arrives. When the client goes away (a failed
// write, or the ClientProbe seeing the connection closed, checked at least
// every kPollInterval) the sequence is cancelled and its KV cache freed at
// the next engine step; this holds for non-streaming requests too.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/engine.h"
#include "server/api.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace rotor::serve {

struct ServeOptions {
  EngineOptions engine;
  GenerateOptions defaults;                // what a request does not say
  int prefill_step = kDefaultPrefillStep;  // prompt tokens per forward pass (the runner's)
  std::string host = "127.0.0.1";
  int port = 8080;             // 0 = any free port (see Server::port())
  int parallel = 4;            // sequences decoding at once
  int max_queue = 64;          // requests waiting beyond those
  size_t max_body = 4 << 20;   // bytes
  std::string chat_template;   // a ChatTemplate name; "" = the model's
  int http_threads = 0;        // 0 = parallel + max_queue + 16
  std::string slot_save_path;  // where slot files go; "" = no slot actions
  std::string replica_id;      // X-Rotor-Replica; "" = host:port
};

enum class ServerState { kLoading, kReady, kDraining };
const char* ServerStateName(ServerState state);

// Why `name` cannot name a file in --slot-save-path ("" when it can): it must
// be a plain file name, nothing that leaves the directory.
std::string SlotFilenameError(std::string_view name);

class Server {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{50};

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
  Server() = default;
  void Routes();
  // An error for a request that needs the model when the server is not
  // kReady (503 with Retry-After set on `res`).
  std::optional<ApiError> Unavailable(httplib::Response& res) const;
  void HandleGenerate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void HandleSlots(const httplib::Request& req, httplib::Response& res);
  // Turns a parsed request into the scheduler's; an error for bad input.
  std::optional<ApiError> Prepare(const ApiRequest& api, SeqRequest* seq) const;
  void RespondWhole(const httplib::Request& req, httplib::Response& res, const ResponseMeta& meta,
                    std::shared_ptr<RequestStream> stream);
  // `token` counts the request in flight until the stream's last byte.
  void RespondStream(const httplib::Request& req, httplib::Response& res, ResponseMeta meta,
                     bool include_usage, std::shared_ptr<RequestStream> stream,
                     std::shared_ptr<void> token);

  ServeOptions options_;
  std::unique_ptr<Engine> engine_;
  ChatTemplate chat_template_;
  std::string model_id_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  int port_ = 0;
  std::string replica_id_;
  std::atomic<ServerState> state_{ServerState::kLoading};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace rotor::serve
