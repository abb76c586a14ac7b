// Helpers for the rotor serve tests: an in-process server on a free loopback
// port (and a fixture sharing one across a suite), a streaming (server-sent
// events) client, /metrics scraping, the official openai npm client, and the
// reference text Engine::Generate gives for a request.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../cli/run_cli.h"
#include "engine/engine.h"
#include "server/server.h"

namespace rotor::serve::testing {

using nlohmann::json;

std::string BundledModel();

// How long the tests' clients wait for a reply: a hang is ctest's timeout to
// catch, and under the sanitizers one grammar-constrained reply can take over
// 30 s on the shared 2-core machine.
inline constexpr std::chrono::seconds kClientTimeout{300};

// The bundled model, one engine thread (the machine is shared), any free port.
ServeOptions TestOptions(int parallel = 8, int max_queue = 40);

class TestServer {
 public:
  explicit TestServer(const ServeOptions& options);
  ~TestServer();
  bool ok() const { return server_ != nullptr; }
  const std::string& error() const { return error_; }
  int port() const { return server_->port(); }
  Server& server() { return *server_; }
  // A client with generous timeouts.
  std::unique_ptr<httplib::Client> Client() const;

 private:
  std::unique_ptr<Server> server_;
  std::string error_;
  std::thread thread_;
};

struct StreamResult {
  int status = 0;         // HTTP status (0: no response)
  std::string transport;  // httplib's error when there was no response
  std::string body;       // the body when status != 200
  std::string text;       // the concatenated text / delta content
  std::string finish_reason;
  std::string role;     // chat: the first delta's role
  std::string object;   // of the chunks
  int chunks = 0;       // data events with JSON
  bool done = false;    // saw "data: [DONE]"
  bool utf8_ok = true;  // every chunk's text is whole, valid UTF-8
  json usage;           // stream_options.include_usage
  json error;           // an error event
};

// POSTs `body` (stream: true is added) and reads the events. `keep_reading`,
// called with the text so far after each event, may return false to close the
// connection mid-stream.
StreamResult PostStream(int port, const std::string& path, json body,
                        const std::function<bool(const std::string&)>& keep_reading = nullptr);

// POSTs a JSON body; the parsed response (discarded on a parse error), its
// status in *status. A transport failure fails the test.
json PostJson(const TestServer& server, const std::string& path, const json& body,
              int* status = nullptr);

// A server shared by a suite's tests: started before the first with
// `Suite::Options()` (TestOptions() if the suite does not say), stopped after
// the last.
//   class ServerPrefix : public SharedServerTest<ServerPrefix> {
//    public:
//     static ServeOptions Options() { return TestOptions(4, 8); }
//   };
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 public:
  static ServeOptions Options() { return TestOptions(); }

 protected:
  static void SetUpTestSuite() { server_ = new TestServer(Suite::Options()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->error(); }
  int port() const { return server_->port(); }
  json Post(const std::string& path, const json& body, int* status = nullptr) {
    return PostJson(*server_, path, body, status);
  }
  static inline TestServer* server_ = nullptr;
};

// GET /metrics as name (with labels) -> value.
std::map<std::string, double> ScrapeMetrics(int port);

// Polls `cond` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& cond,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

// The bundled model loaded once, for reference generations.
Engine& ReferenceEngine();
// A file's bytes ("" when it cannot be read).
std::string Slurp(const std::filesystem::path& p);

// A fresh directory under the system's temporary one (tests/cli/run_cli.h).
using rotor::testing::TempDir;

// The official `openai` npm package, installed in a TempDir, for client
// scripts run with node against a server. Construct it in the test body: it
// skips the test (with the reason) when node or npm is missing or the package
// cannot be installed (offline), and ok() is false then.
class OpenAiNpm {
 public:
  OpenAiNpm();
  bool ok() const { return ok_; }
  // Runs `script`, an ES module, between a prologue and an epilogue:
  //   import OpenAI from 'openai';
  //   const client = new OpenAI({baseURL: process.argv[2], ...});  // http://127.0.0.1:port/v1
  //   const out = {};
  //   <script>  (`args` are process.argv[3...])
  //   console.log(JSON.stringify(out));
  // Returns `out`; null, the test failed with node's stderr, when node fails
  // (or runs past `timeout`) or prints no JSON object.
  json Run(int port, std::string_view script, const std::vector<std::string>& args = {},
           std::chrono::seconds timeout = std::chrono::seconds(60)) const;

 private:
  void Install();  // GTEST_SKIP needs a function returning void

  TempDir dir_;
  bool ok_ = false;
};

// Greedy decoding (temperature 0) of `n_predict` tokens.
GenerateOptions Greedy(int n_predict);
// Engine::Generate's text for the same prompt and options.
std::string Reference(const std::string& prompt, const GenerateOptions& options);

}  // namespace rotor::serve::testing
