// rotor serve: the OpenAI-compatible HTTP server (see src/server/server.h).
#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "server/server.h"

namespace rotor::cli {
namespace {

struct ServeArgs {
  serve::ServeOptions serve;
  double drain_timeout_s = 30;
};

// Signals, on a thread of our own (sigwait): the first SIGTERM or SIGINT
// drains the server (no new work; what is in flight is answered, for at most
// --drain-timeout) and stops it; a second SIGINT exits at once (llama-server's
// second Ctrl-C). A signal while the model loads stops the server at once:
// nothing is in flight.
class SignalThread {
 public:
  SignalThread(serve::Server& server, const sigset_t& signals, double drain_timeout_s)
      : server_(server), signals_(signals), drain_timeout_s_(drain_timeout_s) {
    thread_ = std::thread([this] { Loop(); });
  }
  // Once Run() has returned.
  ~SignalThread() {
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
    thread_.join();
    if (drainer_.joinable()) drainer_.join();
  }

 private:
  void Loop() {
    bool draining = false;
    for (;;) {
      int sig = 0;
      if (sigwait(&signals_, &sig) != 0 || done_) return;
      if (draining) {
        if (sig != SIGINT) continue;
        fmt::print(stderr, "rotor serve: second SIGINT, exiting now ({} requests in flight)\n",
                   server_.in_flight());
        std::fflush(stderr);
        std::_Exit(130);
      }
      draining = true;
      if (server_.state() == serve::ServerState::kLoading) {
        fmt::print(stderr, "rotor serve: signal {} while loading, stopping\n", sig);
        server_.Stop();
        continue;
      }
      fmt::print(stderr,
                 "rotor serve: signal {}, draining: {} requests in flight, {} s at most (SIGINT "
                 "again to exit now)\n",
                 sig, server_.in_flight(), drain_timeout_s_);
      std::fflush(stderr);
      drainer_ = std::thread([this] {
        const auto timeout =
            std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s_ * 1000));
        const int64_t left = server_.Drain(timeout);
        if (left > 0)
          fmt::print(stderr, "rotor serve: --drain-timeout passed, ending {} requests\n", left);
        else
          fmt::print(stderr, "rotor serve: drained, shutting down\n");
        std::fflush(stderr);
        server_.Stop();
      });
    }
  }

  serve::Server& server_;
  sigset_t signals_;
  double drain_timeout_s_;
  std::atomic<bool> done_{false};
  std::thread thread_, drainer_;
};

int RunServe(ServeArgs& a) {
  // SIGINT/SIGTERM are taken by a thread of our own (sigwait), so they must be
  // blocked before any other thread (the engine's pool, httplib's) exists.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Every connection is a descriptor: raise the soft limit so that
  // --max-connections, not the default 1024 descriptors, is what binds.
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const rlim_t want = static_cast<rlim_t>(a.serve.max_connections) + 64;
    if (nofile.rlim_cur < want && nofile.rlim_cur != RLIM_INFINITY) {
      nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY ? want : std::min(want, nofile.rlim_max);
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
  }

  // The port answers from here on: /health says 503 "loading" until the
  // model is in.
  Result<std::unique_ptr<serve::Server>> server = serve::Server::Bind(a.serve);
  if (!server.ok()) return Fail(server.status());
  serve::Server& s = **server;
  Status status = Status::Ok();
  {
    std::thread http([&] { status = s.Run(); });
    SignalThread signal_thread(s, signals, a.drain_timeout_s);
    const Status loaded = s.Load();
    if (loaded.ok()) {
      fmt::print(stderr,
                 "rotor serve: listening on http://{}:{} | replica {} | model {} | context {} | "
                 "parallel {} | queue {} | chat template {}\n",
                 a.serve.host, s.port(), s.replica_id(), s.model_id(), s.engine().n_ctx(),
                 a.serve.parallel, a.serve.max_queue, s.chat_template().name());
      fmt::print(stderr, "rotor serve: K/V memory {} | prefix cache {}\n",
                 s.engine().DescribeKvMemory(), s.engine().prefix_cache() ? "on" : "off");
      std::fflush(stderr);
    } else {
      s.Stop();
    }
    http.join();
    if (!loaded.ok()) status = loaded;
  }
  if (!status.ok()) return Fail(status);
  return 0;
}

}  // namespace

Runner RegisterServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  serve::ServeOptions& o = a->serve;
  CLI::App* sub = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /metrics)");
  AddEngineOptions(sub, &o.engine);
  AddSamplingOptions(sub, &o.defaults.sampling);
  AddKvOptions(sub, &o.defaults.kv);
  sub->add_option("--host", o.host, "address to listen on")->capture_default_str();
  sub->add_option("--port", o.port, "port (0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--parallel", o.parallel, "sequences decoded at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--max-queue", o.max_queue,
                  "requests waiting beyond --parallel; more get 503 with Retry-After")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--max-body", o.max_body,
                  "largest request body in bytes, chunked or not (413 beyond, counted as it "
                  "arrives)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 34))
      ->capture_default_str();
  sub->add_option("--max-header-bytes", o.max_header_bytes,
                  "largest request header (request line and fields) in bytes (431 beyond)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 24))
      ->capture_default_str();
  sub->add_option("--max-headers", o.max_headers, "most header fields in a request (431 beyond)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--max-connections", o.max_connections,
                  "connections open at once; more are answered 503 and closed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--max-connections-per-client", o.max_connections_per_client,
                  "connections open at once from one client address (429 beyond; 0 = no limit, "
                  "e.g. behind a load balancer)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--header-timeout", o.header_timeout_s,
                  "seconds from a request's first byte to the end of its header (408 beyond)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  sub->add_option("--body-timeout", o.body_timeout_s,
                  "seconds from the end of a request's header to the end of its body (408 "
                  "beyond)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  sub->add_option("--keep-alive-timeout", o.keep_alive_timeout_s,
                  "seconds an idle connection stays open for its next request")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  sub->add_option("--keep-alive-requests", o.keep_alive_requests,
                  "requests one connection may send before the server closes it")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--chat-template", o.chat_template,
                  "plain|llama2|llama3|chatml|mistral|phi3|gemma|zephyr (default: recognised "
                  "from the model's tokenizer.chat_template, else plain)");
  sub->add_option("--http-threads,--threads-http", o.http_threads,
                  "threads that parse and tokenize requests, at most, started as needed (0 = 4); "
                  "connections themselves cost no thread")
      ->check(CLI::Range(0, 1 << 16));
  o.defaults.n_predict = -1;
  o.defaults.stop_at_context = true;
  sub->add_option(
         "-n,--n-predict", o.defaults.n_predict,
         "max_tokens of requests that give none (-1, as llama-server: until end of "
         "text, or prompt and reply fill the context size -c, whatever the KV policy; after a "
         "prompt longer than -c, -c tokens)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--stop,-r,--reverse-prompt", o.defaults.stop,
                  "stop string of requests that give none (repeatable; llama-server's -r)");
  sub->add_flag("--ignore-eos", o.defaults.ignore_eos, "keep generating past end-of-sequence");
  sub->add_flag_callback(
      "--no-webui", [&o] { o.web_page = false; },
      "do not serve the chat page at / (llama-server's; the API is unchanged)");
  sub->add_flag_callback(
      "--no-cors", [&o] { o.cors = false; },
      "no CORS: browsers keep pages of other origins from reading the answers (by default any "
      "origin may, as with llama-server)");
  AddPrefillStepOptions(sub, &o.prefill_step);
  sub->add_flag_callback("--no-bos", [&o] { o.defaults.add_bos = false; },
                         "do not add the BOS token");
  sub->add_option("-a,--alias", o.model_alias,
                  "the model's id in /v1/models and in responses (default: the file's name "
                  "without .gguf)");
  // llama-server's switches for what rotor serve always does.
  sub->add_flag("--metrics")->description("llama-server's: GET /metrics (Prometheus) is always on");
  sub->add_flag("--cont-batching")
      ->description("llama-server's -cb: rotor serve always batches continuously");
  sub->add_flag("--jinja")->description(
      "llama-server's: the chat template comes from the GGUF (see --chat-template)");
  sub->add_flag("--no-context-shift")
      ->description(
          "llama-server's: accepted; rotor never shifts the context (a reply that fills it ends "
          "with \"length\"; the sink and window policies evict instead, by their rules)");
  sub->add_option("--replica-id", o.replica_id,
                  "this replica's name in the X-Rotor-Replica header of every response "
                  "(default: host:port)");
  sub->add_option("--drain-timeout", a->drain_timeout_s,
                  "seconds a SIGTERM (or first SIGINT) waits for the requests in flight before "
                  "the server stops")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  sub->add_option("--slot-save-path", o.slot_save_path,
                  "directory of slot KV files: enables POST /slots/{id}?action=save|restore|erase");
  sub->add_flag("--embeddings", o.embeddings,
                "enable POST /v1/embeddings: pooled final hidden states, unit length");
  sub->add_option("--pooling", o.pooling,
                  "pooling of embeddings: mean|cls|last (default: the model's "
                  "{arch}.pooling_type, else mean)");
  return [a] { return RunServe(*a); };
}

}  // namespace rotor::cli
