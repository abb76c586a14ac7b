// What a replica behind a load balancer needs, in process on 127.0.0.1:
// /health 503 while loading and draining, 200 between; a drain answers the
// requests in flight (streams included) and refuses new ones with 503 and
// Retry-After; X-Rotor-Replica on every response; vLLM's metric names.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "sanitizers/sweep.h"
#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

// A server that is bound and serving but not loaded until the test says.
class BoundServer {
 public:
  explicit BoundServer(const ServeOptions& options) {
    Result<std::unique_ptr<Server>> s = Server::Bind(options);
    if (!s.ok()) {
      error_ = s.message();
      return;
    }
    server_ = std::move(*s);
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
  }
  ~BoundServer() {
    if (!server_) return;
    server_->Stop();
    thread_.join();
  }
  Server* get() { return server_.get(); }
  const std::string& error() const { return error_; }

 private:
  std::unique_ptr<Server> server_;
  std::string error_;
  std::thread thread_;
};

httplib::Client Client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(30));
  return c;
}

TEST(ServerReplica, HealthIs503WhileLoadingThen200) {
  BoundServer bound(TestOptions(2, 4));
  Server* s = bound.get();
  ASSERT_NE(s, nullptr) << bound.error();
  httplib::Client cli = Client(s->port());
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(json::parse(health->body)["status"], "loading");
  EXPECT_EQ(health->get_header_value("Retry-After"), "1");
  auto gen =
      cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(gen);
  EXPECT_EQ(gen->status, 503);
  EXPECT_EQ(json::parse(gen->body)["error"]["code"], "loading");
  EXPECT_EQ(gen->get_header_value("Retry-After"), "1");
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 503);
  const std::map<std::string, double> loading = ScrapeMetrics(s->port());
  EXPECT_EQ(loading.at(R"(rotor_server_state{state="loading"})"), 1);
  EXPECT_EQ(loading.count("rotor_running_sequences"), 0u);  // no engine yet

  ASSERT_TRUE(s->Load().ok());
  health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  gen = cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(gen);
  EXPECT_EQ(gen->status, 200) << gen->body;
  EXPECT_EQ(ScrapeMetrics(s->port()).at(R"(rotor_server_state{state="ok"})"), 1);
}

TEST(ServerReplica, EveryResponseNamesTheReplica) {
  ServeOptions o = TestOptions(2, 4);
  o.replica_id = "replica-7";
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  auto cli = server.Client();
  for (const char* path : {"/health", "/metrics", "/v1/models", "/no/such/path"}) {
    auto res = cli->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->get_header_value("X-Rotor-Replica"), "replica-7") << path;
  }
  for (const char* body : {R"({"prompt": "Once", "max_tokens": 4})", R"({"prompt": 7})", "{"}) {
    auto res = cli->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->get_header_value("X-Rotor-Replica"), "replica-7") << body;
  }
  // A stream's headers too.
  httplib::Headers headers;
  auto res = cli->Post("/v1/chat/completions",
                       R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                           "stream": true})",
                       "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("X-Rotor-Replica"), "replica-7");

  // The default is host:port.
  TestServer unnamed(TestOptions(1, 1));
  ASSERT_TRUE(unnamed.ok()) << unnamed.error();
  auto health = unnamed.Client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->get_header_value("X-Rotor-Replica"),
            "127.0.0.1:" + std::to_string(unnamed.port()));
  EXPECT_EQ(json::parse(health->body)["replica"], "127.0.0.1:" + std::to_string(unnamed.port()));
}

TEST(ServerReplica, ReplicaIdsWithControlCharactersAreRefused) {
  ServeOptions o = TestOptions(1, 1);
  o.replica_id = "a\r\nX-Evil: 1";
  Result<std::unique_ptr<Server>> s = Server::Bind(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--replica-id"), std::string::npos) << s.message();
}

// The names the Gateway API Inference Extension's endpoint picker and vLLM's
// routers read, with vLLM's model_name label, agreeing with rotor's own.
TEST(ServerReplica, MetricsHaveVllmNames) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  const json body = {{"prompt", std::string(200, 'a')}, {"max_tokens", 2}};
  for (int i = 0; i < 2; ++i) PostJson(server, "/v1/completions", body);
  std::map<std::string, double> m;
  const std::string label = R"({model_name="stories260K"})";
  // The engine thread publishes its figures after the step that ended the
  // request; the response may arrive first.
  ASSERT_TRUE(WaitFor([&] {
    m = ScrapeMetrics(server.port());
    return m["vllm:prefix_cache_hits_total" + label] > 0 &&
           m["vllm:num_requests_running" + label] == 0;
  }));
  EXPECT_EQ(m.at("vllm:prefix_cache_hits_total" + label),
            m.at("rotor_prefix_cache_hit_tokens_total"));
  EXPECT_EQ(m.at("vllm:prefix_cache_queries_total" + label),
            m.at("rotor_prefix_cache_query_tokens_total"));
  EXPECT_EQ(m.at("vllm:gpu_prefix_cache_hits_total" + label),
            m.at("rotor_prefix_cache_hit_tokens_total"));
  EXPECT_EQ(m.at("vllm:num_requests_waiting" + label), 0);
  EXPECT_EQ(m.at("vllm:kv_cache_usage_perc" + label), 0);  // nothing running
  EXPECT_EQ(m.at("vllm:gpu_cache_usage_perc" + label), 0);
  bool config = false;
  for (const auto& [name, value] : m)
    if (name.rfind("vllm:cache_config_info{block_size=\"16\"", 0) == 0) config = value == 1;
  EXPECT_TRUE(config);
  auto res = server.Client()->Get("/metrics");
  ASSERT_TRUE(res);
  for (const char* line :
       {"# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_waiting gauge",
        "# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:prefix_cache_queries_total counter",
        "# TYPE vllm:prefix_cache_hits_total counter"})
    EXPECT_NE(res->body.find(line), std::string::npos) << line;
}

// llama-server's metric names (its dashboards' and alerts'), agreeing with
// rotor's own figures.
TEST(ServerReplica, MetricsHaveLlamaServersNames) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  PostJson(server, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 3}});
  std::map<std::string, double> m;
  ASSERT_TRUE(WaitFor([&] {
    m = ScrapeMetrics(server.port());
    return m["llamacpp:tokens_predicted_total"] > 0 && m["llamacpp:requests_processing"] == 0;
  }));
  EXPECT_EQ(m.at("llamacpp:prompt_tokens_total"), m.at("rotor_prompt_tokens_total"));
  EXPECT_GT(m.at("llamacpp:prompt_tokens_total"), 0);
  EXPECT_EQ(m.at("llamacpp:tokens_predicted_total"), m.at("rotor_generated_tokens_total"));
  EXPECT_EQ(m.at("llamacpp:requests_deferred"), m.at("rotor_queue_length"));
  EXPECT_EQ(m.at("llamacpp:kv_cache_tokens"), m.at("rotor_kv_cells_used"));
  EXPECT_EQ(m.at("llamacpp:kv_cache_usage_ratio"),
            m.at(R"(vllm:kv_cache_usage_perc{model_name="stories260K"})"));
  EXPECT_GE(m.at("llamacpp:prompt_tokens_seconds"), 0);
  EXPECT_GE(m.at("llamacpp:predicted_tokens_seconds"), 0);
  auto res = server.Client()->Get("/metrics");
  ASSERT_TRUE(res);
  for (const char* line : {"# TYPE llamacpp:prompt_tokens_total counter",
                           "# TYPE llamacpp:tokens_predicted_total counter",
                           "# TYPE llamacpp:requests_processing gauge"})
    EXPECT_NE(res->body.find(line), std::string::npos) << line;
}

// While a sequence runs, the usage fraction is its blocks over the budget's.
TEST(ServerReplica, KvUsageIsAFractionOfTheBudget) {
  ServeOptions o = TestOptions(1, 4);
  o.engine.kv_memory_bytes = 1 << 20;
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  // The poller keeps the first scrape with a block in use; `seen` is read
  // only after the join (the loop below watches `saw`).
  std::map<std::string, double> seen;
  std::atomic<bool> done{false}, saw{false};
  std::thread poll([&] {
    while (!done) {
      auto m = ScrapeMetrics(server.port());
      if (!saw && m["rotor_kv_blocks_used"] > 0) {
        seen = std::move(m);
        saw = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int i = 0; i < 20 && !saw; ++i)
    PostJson(server, "/v1/completions",
             {{"prompt", "Once upon a time " + std::to_string(i)},
              {"max_tokens", 400},
              {"ignore_eos", true}});
  done = true;
  poll.join();
  ASSERT_FALSE(seen.empty()) << "never saw a block in use";
  const std::string label = R"({model_name="stories260K"})";
  const double bytes_per_block = seen["rotor_kv_memory_bytes"] / seen["rotor_kv_blocks"];
  const double capacity = std::floor(seen["rotor_kv_memory_budget_bytes"] / bytes_per_block);
  EXPECT_NEAR(seen.at("vllm:kv_cache_usage_perc" + label), seen["rotor_kv_blocks_used"] / capacity,
              1e-9);
  EXPECT_GT(seen.at("vllm:kv_cache_usage_perc" + label), 0);
  EXPECT_LE(seen.at("vllm:kv_cache_usage_perc" + label), 1);
}

// Drain: the stream in flight is answered to its end; meanwhile /health and
// new requests are 503 with Retry-After.
TEST(ServerReplica, DrainAnswersTheStreamInFlightAndRefusesNewWork) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  const int port = server.port();
  std::future<int64_t> drained;
  bool checked = false;
  const StreamResult r = PostStream(
      port, "/v1/completions",
      // Long enough (a sink cache) that the stream is most likely still being
      // written when its first chunk arrives; short enough to end well within
      // the drain's timeout under the sanitizers.
      {{"prompt", "Once upon a time"},
       {"max_tokens", ::rotor::testing::kSanitized ? 300 : 1000},
       {"ignore_eos", true},
       {"kv", "sink"},
       {"kv_size", 64}},
      [&](const std::string&) {
        if (checked) return true;
        checked = true;
        // 1, or 0 when the server wrote the whole stream into the socket
        // before this client read its first chunk (the exchange has then
        // ended: a 64-token stream did so in about one ctest -j2 run in ten).
        EXPECT_LE(server.server().in_flight(), 1);
        drained = std::async(std::launch::async,
                             [&] { return server.server().Drain(std::chrono::seconds(120)); });
        EXPECT_TRUE(WaitFor([&] { return server.server().state() == ServerState::kDraining; }));
        httplib::Client cli = Client(port);
        auto health = cli.Get("/health");
        EXPECT_TRUE(health);
        if (health) {
          EXPECT_EQ(health->status, 503);
          const json h = json::parse(health->body);
          EXPECT_EQ(h["status"], "draining");
          // 1, or 0 once the server has written the whole stream into the
          // socket (this client reads it only after these checks).
          EXPECT_LE(h.value("in_flight", -1), 1);
          EXPECT_GE(h.value("in_flight", -1), 0);
        }
        auto gen = cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 4})",
                            "application/json");
        EXPECT_TRUE(gen);
        if (gen) {
          EXPECT_EQ(gen->status, 503);
          EXPECT_EQ(gen->get_header_value("Retry-After"), "1");
          EXPECT_EQ(json::parse(gen->body)["error"]["code"], "draining");
        }
        return true;
      });
  ASSERT_TRUE(checked);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.finish_reason, "length");
  ASSERT_TRUE(drained.valid());
  EXPECT_EQ(drained.get(), 0);
  // The refused request's exchange ends just after its client has the 503.
  EXPECT_TRUE(WaitFor([&] { return server.server().in_flight() == 0; }));
}

TEST(ServerReplica, DrainReturnsWhatIsLeftAtTheTimeout) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  int64_t left = -1;
  const StreamResult r =
      PostStream(server.port(), "/v1/completions",
                 // Long enough (a sink cache: any length) that the stream is
                 // surely still running when its first chunk arrives (a tenth
                 // under the sanitizers, where each token costs 10-30 times more).
                 {{"prompt", "Once upon a time"},
                  {"max_tokens", ::rotor::testing::kSanitized ? 2000 : 20000},
                  {"ignore_eos", true},
                  {"kv", "sink"},
                  {"kv_size", 64}},
                 [&](const std::string&) {
                   if (left < 0) left = server.server().Drain(std::chrono::milliseconds(0));
                   return true;
                 });
  EXPECT_EQ(left, 1);
  EXPECT_TRUE(r.done);  // Drain alone ends nothing: Stop() does
}

}  // namespace
}  // namespace rotor::serve::testing
