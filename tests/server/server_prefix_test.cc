// The prefix cache through the server, as an OpenAI client sees it:
// usage.prompt_tokens_details.cached_tokens on a repeated request and on a
// chat that resends its history turn by turn, 0 with cache_prompt: false,
// the same text either way, the pool's figures in /metrics, and a request no
// --kv-memory budget can hold refused with a 400 that names the numbers.
#include <gtest/gtest.h>

#include <string>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

class ServerPrefix : public SharedServerTest<ServerPrefix> {
 public:
  static ServeOptions Options() { return TestOptions(4, 8); }
};

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with "
    "her red ball. One day she saw a big dog under a tree, and the dog wanted to play too. ";

int64_t Cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"]; }

TEST_F(ServerPrefix, ASecondIdenticalRequestComesFromTheCache) {
  const json body = {
      {"prompt", std::string(kStory) + "The sun"}, {"max_tokens", 16}, {"temperature", 0}};
  int status = 0;
  const json first = Post("/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << first.dump();
  const json second = Post("/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << second.dump();
  const int64_t n = first["usage"]["prompt_tokens"];
  EXPECT_EQ(Cached(first), 0);
  EXPECT_EQ(Cached(second), (n - 1) / 16 * 16);  // whole blocks; the last token runs
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  // Streamed: the usage chunk reports it too.
  json streamed = body;
  streamed["stream_options"] = {{"include_usage", true}};
  const StreamResult s = PostStream(server_->port(), "/v1/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.text, first["choices"][0]["text"]);
  EXPECT_EQ(s.usage["prompt_tokens_details"]["cached_tokens"], Cached(second));
  // cache_prompt: false neither takes nor leaves, and gives the same text.
  json off = body;
  off["cache_prompt"] = false;
  const json third = Post("/v1/completions", off, &status);
  ASSERT_EQ(status, 200) << third.dump();
  EXPECT_EQ(Cached(third), 0);
  EXPECT_EQ(third["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST_F(ServerPrefix, AChatResendingItsHistoryIsCachedMoreEachTurn) {
  json messages = json::array({{{"role", "system"}, {"content", kStory}}});
  const char* turns[] = {"Tell me about the dog.", "What did Lily do next?",
                         "And then what happened?", "How did the day end?"};
  int64_t last = -1, last_prompt = 0;
  int turn = 0;
  for (const char* user : turns) {
    messages.push_back({{"role", "user"}, {"content", user}});
    int status = 0;
    const json r = Post("/v1/chat/completions",
                        {{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    const int64_t cached = Cached(r);
    if (turn++ > 0) {
      EXPECT_GT(cached, last) << "turn " << turn;
      // At least the whole blocks of the previous turn's prompt come back (the
      // reply re-rendered as text may tokenize differently from its tokens).
      EXPECT_GE(cached, last_prompt / 16 * 16) << "turn " << turn;
    }
    last = cached;
    last_prompt = r["usage"]["prompt_tokens"];
    messages.push_back({{"role", "assistant"}, {"content", r["choices"][0]["message"]["content"]}});
  }
  // The engine thread publishes its figures after the step that ended the
  // last request, which may be after its response arrived.
  ASSERT_TRUE(WaitFor([&] { return ScrapeMetrics(server_->port())["rotor_kv_blocks_used"] == 0; }));
  const std::map<std::string, double> m = ScrapeMetrics(server_->port());
  EXPECT_GT(m.at("rotor_prefix_cache_hit_tokens_total"), 0);
  EXPECT_GE(m.at("rotor_prefix_cache_query_tokens_total"),
            m.at("rotor_prefix_cache_hit_tokens_total"));
  EXPECT_GT(m.at("rotor_kv_blocks_cached"), 0);
  EXPECT_EQ(m.at("rotor_kv_blocks_used"), 0);
  EXPECT_GT(m.at("rotor_kv_memory_budget_bytes"), 0);
  EXPECT_EQ(m.at("rotor_kv_block_tokens"), 16);
  EXPECT_LE(m.at("rotor_kv_memory_bytes"), m.at("rotor_kv_memory_budget_bytes"));
}

TEST(ServerKvMemory, ARequestTheBudgetCannotHoldIsA400WithTheNumbers) {
  ServeOptions o = TestOptions(2, 4);
  o.engine.kv_memory_bytes = 1 << 20;  // 1 MiB: 102 blocks of 16 tokens of f16 K/V
  o.engine.n_ctx = 2048;               // the context would take the prompt
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  std::string prompt;
  for (int i = 0; i < 30; ++i) prompt += kStory;
  auto res = server.Client()->Post(
      "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(res->body.find("K/V budget: 1.00 MiB, 102 blocks (--kv-memory)"), std::string::npos)
      << res->body;
  // A short one still runs.
  res = server.Client()->Post("/v1/completions",
                              json{{"prompt", "Once upon a time"}, {"max_tokens", 4}}.dump(),
                              "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

}  // namespace
}  // namespace rotor::serve::testing
