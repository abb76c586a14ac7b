// rotor serve: the OpenAI-compatible HTTP server (see serve_server.h).
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "serve_server.h"

namespace rotor::cli {
namespace {

struct ServeArgs {
  serve::ServeOptions serve;
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

  Result<std::unique_ptr<serve::Server>> server = serve::Server::Create(a.serve);
  if (!server.ok()) return Fail(server.status());
  serve::Server& s = **server;
  fmt::print(stderr,
             "rotor serve: listening on http://{}:{} | model {} | context {} | parallel {} | "
             "queue {} | chat template {}\n",
             a.serve.host, s.port(), s.model_id(), s.engine().n_ctx(), a.serve.parallel,
             a.serve.max_queue, s.chat_template().name());
  fmt::print(stderr, "rotor serve: K/V memory {} | prefix cache {}\n",
             s.engine().DescribeKvMemory(), s.engine().prefix_cache() ? "on" : "off");
  std::fflush(stderr);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    fmt::print(stderr, "rotor serve: signal {}, shutting down\n", sig);
    s.Stop();
  });
  const Status status = s.Run();
  // Run also returns when listening fails: wake the waiter with a signal it takes.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
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
  sub->add_option("--max-body", o.max_body, "largest request body in bytes (413 beyond)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 34))
      ->capture_default_str();
  sub->add_option("--chat-template", o.chat_template,
                  "plain|llama2|llama3|chatml|mistral|phi3|gemma|zephyr (default: recognised "
                  "from the model's tokenizer.chat_template, else plain)");
  sub->add_option("--http-threads", o.http_threads,
                  "HTTP worker threads (0 = parallel + max-queue + 16)")
      ->check(CLI::Range(0, 1 << 16));
  o.defaults.n_predict = 256;
  sub->add_option("-n,--n-predict", o.defaults.n_predict,
                  "max_tokens of requests that give none (-1 = until end of text or a full "
                  "context)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--stop", o.defaults.stop, "stop string of requests that give none (repeatable)");
  sub->add_flag("--ignore-eos", o.defaults.ignore_eos, "keep generating past end-of-sequence");
  sub->add_option("--prefill-step", o.prefill_step,
                  "prompt tokens per forward pass (0 = the whole prompt)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub->add_flag_callback("--no-bos", [a] { a->serve.defaults.add_bos = false; },
                         "do not add the BOS token");
  sub->add_option("--slot-save-path", o.slot_save_path,
                  "directory of slot KV files: enables POST /slots/{id}?action=save|restore|erase");
  return [a] { return RunServe(*a); };
}

}  // namespace rotor::cli
