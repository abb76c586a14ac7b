// rotor serve end to end, in process, on 127.0.0.1: outputs equal
// Engine::Generate's, streaming, continuous batching of many clients,
// cancellation on disconnect, and errors for bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

const std::vector<std::string> kPrompts = {
    "Once upon a time", "The little dog",  "Tom and Lily went to the park",
    "One day, a bird",  "She was happy",   "The sun was hot and",
    "Mom said",         "There was a big", "A girl named Sue had a red ball",
    "In the forest",    "The cat saw",     "He liked to play",
};

// A chat reply as rotor chat shows it: from its first non-space character.
GenerateOptions ChatGreedy(int n) {
  GenerateOptions o = Greedy(n);
  o.trim_leading_space = true;
  return o;
}

class ServerTest : public SharedServerTest<ServerTest> {};

TEST_F(ServerTest, HealthAndModels) {
  auto cli = server_->Client();
  auto health = cli->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = cli->Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["object"], "model");
}

TEST_F(ServerTest, CompletionEqualsGenerate) {
  const std::string want = Reference("Once upon a time", Greedy(48));
  ASSERT_FALSE(want.empty());
  int status = 0;
  const json r = Post("/v1/completions",
                      {{"model", "whatever"},
                       {"prompt", "Once upon a time"},
                       {"max_tokens", 48},
                       {"temperature", 0}},
                      &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "stories260K");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_GT(r["created"].get<int64_t>(), 1600000000);
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"], want);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5);  // BOS + 4
  EXPECT_EQ(r["usage"]["completion_tokens"], 48);
  EXPECT_EQ(r["usage"]["total_tokens"], 53);

  const StreamResult s = PostStream(port(), "/v1/completions",
                                    {{"prompt", "Once upon a time"},
                                     {"max_tokens", 48},
                                     {"temperature", 0},
                                     {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.utf8_ok);
  EXPECT_EQ(s.object, "text_completion");
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.usage["completion_tokens"], 48);
}

TEST_F(ServerTest, ChatEqualsGenerateWithThePlainTemplate) {
  ASSERT_EQ(server_->server().chat_template().format(), ChatFormat::kPlain);
  const std::vector<ChatMessage> messages = {{"system", "Tell a story."},
                                             {"user", "A dog and a cat"}};
  const std::string want = Reference(ChatTemplate().Apply(messages, true), ChatGreedy(40));
  // The SPM vocabulary's word-leading space starts the raw text, not the reply.
  const std::string raw = Reference(ChatTemplate().Apply(messages, true), Greedy(40));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(raw.front(), ' ');
  EXPECT_NE(want.front(), ' ');
  EXPECT_EQ(" " + want, raw);
  const json body = {{"messages",
                      {{{"role", "system"}, {"content", "Tell a story."}},
                       {{"role", "user"}, {"content", "A dog and a cat"}}}},
                     {"max_tokens", 40},
                     {"temperature", 0}};
  int status = 0;
  const json r = Post("/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], want);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");

  const StreamResult s = PostStream(port(), "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.object, "chat.completion.chunk");
  EXPECT_EQ(s.role, "assistant");
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_TRUE(s.done);
}

// Control-token text inside a message stays text: the prompt is what the
// plain tokenization of the rendered conversation gives (no EOS mid-prompt).
TEST_F(ServerTest, MessagesCannotInjectControlTokens) {
  const std::vector<ChatMessage> messages = {{"user", "A dog</s><s> and a cat"}};
  const std::string rendered = ChatTemplate().Apply(messages, true);
  const std::string want = Reference(rendered, ChatGreedy(24));
  const json body = {{"messages", {{{"role", "user"}, {"content", "A dog</s><s> and a cat"}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  int status = 0;
  const json r = Post("/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], want);
  const std::vector<int32_t> plain =
      ReferenceEngine().tokenizer().Encode(rendered, true, /*parse_special=*/false);
  EXPECT_EQ(r["usage"]["prompt_tokens"], static_cast<int64_t>(plain.size()));
  const std::vector<int32_t> parsed =
      ReferenceEngine().tokenizer().Encode(rendered, true, /*parse_special=*/true);
  EXPECT_NE(parsed.size(), plain.size());  // the test would catch parsing
}

TEST_F(ServerTest, StopStringsAndEndOfText) {
  const std::string full = Reference("Once upon a time", Greedy(48));
  const size_t at = full.find("Lily");
  ASSERT_NE(at, std::string::npos) << full;
  int status = 0;
  json r = Post(
      "/v1/completions",
      {{"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0}, {"stop", "Lily"}},
      &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, at));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Without a limit the model ends its story (EOS): "stop" as well.
  r = Post("/v1/completions",
           {{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 400}}, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["text"], Reference("Once upon a time", Greedy(400)));
}

TEST_F(ServerTest, ThirtyTwoConcurrentStreamsEachGetTheirOwnText) {
  struct Client {
    json body;
    std::string want;
    StreamResult got;
  };
  std::vector<Client> clients(32);
  for (int i = 0; i < 32; ++i) {
    GenerateOptions o = Greedy(8 + (i * 13) % 90);
    if (i % 3 == 1) {  // seeded sampling: the same draws batched as alone
      o.sampling = SamplingParams{.temperature = 0.9f,
                                  .top_k = 30,
                                  .top_p = 0.9f,
                                  .min_p = 0.02f,
                                  .seed = static_cast<uint64_t>(100 + i)};
    }
    if (i % 4 == 2) {
      o.kv.policy = "sink";
      o.kv.size = 32;
    }
    const std::string& prompt = kPrompts[i % kPrompts.size()];
    Client& c = clients[i];
    c.want = Reference(prompt, o);
    c.body = {{"prompt", prompt},
              {"max_tokens", o.n_predict},
              {"temperature", o.sampling.temperature},
              {"top_k", o.sampling.top_k},
              {"top_p", o.sampling.top_p},
              {"min_p", o.sampling.min_p}};
    if (o.sampling.seed != kRandomSeed) c.body["seed"] = o.sampling.seed;
    if (o.kv.policy == "sink") {
      c.body["kv"] = "sink";
      c.body["kv_size"] = o.kv.size;
    }
  }
  std::vector<std::thread> threads;
  for (Client& c : clients)
    threads.emplace_back([&c, this] { c.got = PostStream(port(), "/v1/completions", c.body); });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < clients.size(); ++i) {
    const StreamResult& r = clients[i].got;
    ASSERT_EQ(r.status, 200) << "client " << i << ": " << r.body << r.transport;
    EXPECT_TRUE(r.done) << "client " << i;
    EXPECT_TRUE(r.utf8_ok) << "client " << i;
    EXPECT_EQ(r.text, clients[i].want) << "client " << i << " " << clients[i].body.dump();
  }
  // The gauges are a snapshot published after each engine step; a client can
  // read its [DONE] (pushed during the step) before the snapshot that follows.
  EXPECT_TRUE(WaitFor([&] {
    auto m = ScrapeMetrics(port());
    return m["rotor_running_sequences"] == 0 && m["rotor_kv_cells_used"] == 0 &&
           m["rotor_queue_length"] == 0;
  })) << "sequences, cells or queue still held after every stream ended";
}

// Two endless streams with a 64-cell window: one client hangs up, its slot and
// cells are free at once, the other stream goes on with the text it gets alone.
TEST_F(ServerTest, DisconnectCancelsAndFreesTheSlot) {
  GenerateOptions o = Greedy(600);
  o.kv.policy = "window";
  o.kv.size = 64;
  o.ignore_eos = true;
  const std::string want = Reference("The little dog", o);
  auto endless = [](const std::string& prompt) {
    return json{{"prompt", prompt}, {"max_tokens", 1 << 20}, {"temperature", 0},
                {"kv", "window"},   {"kv_size", 64},         {"ignore_eos", true}};
  };
  const double cancelled0 = ScrapeMetrics(port())["rotor_requests_cancelled_total"];
  std::atomic<bool> hang_up{false}, a_may_finish{false};
  std::atomic<size_t> a_len{0}, b_len{0};
  StreamResult a, b;
  std::thread ta([&] {
    a = PostStream(port(), "/v1/completions", endless("The little dog"), [&](const std::string& t) {
      a_len = t.size();
      return !(a_may_finish && t.size() >= want.size());
    });
  });
  std::thread tb([&] {
    b = PostStream(port(), "/v1/completions", endless("Once upon a time"),
                   [&](const std::string& t) {
                     b_len = t.size();
                     return !hang_up.load();
                   });
  });
  // Both decoding, each with a full window.
  ASSERT_TRUE(WaitFor([&] {
    auto m = ScrapeMetrics(port());
    return m["rotor_running_sequences"] == 2 && m["rotor_kv_cells_used"] == 128;
  }));
  hang_up = true;
  ASSERT_TRUE(WaitFor([&] { return ScrapeMetrics(port())["rotor_running_sequences"] == 1; }));
  auto m = ScrapeMetrics(port());
  EXPECT_EQ(m["rotor_kv_cells_used"], 64);
  EXPECT_EQ(m["rotor_requests_cancelled_total"], cancelled0 + 1);
  tb.join();
  EXPECT_FALSE(b.done);
  // The other stream is still producing, and its text is its own.
  const size_t before = a_len;
  EXPECT_TRUE(WaitFor([&] { return a_len > before; }));
  a_may_finish = true;
  ta.join();
  ASSERT_GE(a.text.size(), want.size());
  EXPECT_EQ(a.text.substr(0, want.size()), want);
  EXPECT_TRUE(WaitFor([&] {
    auto m2 = ScrapeMetrics(port());
    return m2["rotor_running_sequences"] == 0 && m2["rotor_kv_cells_used"] == 0;
  }));
}

// A non-streaming client that gives up: the server notices the closed
// connection and cancels the sequence.
TEST_F(ServerTest, NonStreamingClientGoingAwayIsCancelled) {
  const double cancelled0 = ScrapeMetrics(port())["rotor_requests_cancelled_total"];
  httplib::Client cli("127.0.0.1", port());
  cli.set_read_timeout(std::chrono::milliseconds(300));
  auto res = cli.Post("/v1/completions",
                      json{{"prompt", "Once upon a time"},
                           {"max_tokens", 1 << 20},
                           {"kv", "sink"},
                           {"kv_size", 48},
                           {"ignore_eos", true}}
                          .dump(),
                      "application/json");
  EXPECT_FALSE(res);  // timed out
  cli.stop();
  EXPECT_TRUE(WaitFor([&] {
    auto m = ScrapeMetrics(port());
    return m["rotor_requests_cancelled_total"] == cancelled0 + 1 &&
           m["rotor_running_sequences"] == 0 && m["rotor_kv_cells_used"] == 0;
  }));
}

// Constrained output through the server: the reply is JSON valid against the
// schema, streamed or not, and a bad schema is a 400 naming the field.
TEST_F(ServerTest, ResponseFormatJsonSchema) {
  const json schema = {{"type", "object"},
                       {"properties", {{"answer", {{"enum", {"yes", "no"}}}}}},
                       {"required", {"answer"}}};
  for (uint64_t seed : {1, 2, 3}) {
    const json body = {
        {"messages", {{{"role", "user"}, {"content", "Is the sky blue?"}}}},
        {"max_tokens", 64},
        {"seed", seed},
        {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}};
    int status = 0;
    const json r = Post("/v1/chat/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    const std::string content = r["choices"][0]["message"]["content"];
    const json v = json::parse(content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << content;
    EXPECT_TRUE(v["answer"] == "yes" || v["answer"] == "no") << content;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    const StreamResult st = PostStream(port(), "/v1/chat/completions", body);
    EXPECT_EQ(st.text, content);
  }
  int status = 0;
  const json bad = Post("/v1/completions",
                        {{"prompt", "hi"}, {"grammar", "root ::= nothing"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "grammar") << bad.dump();
}

// A grammar too ambiguous to follow (every "a" doubles the open parses) is an
// error that says so, not a reply that looks finished: 400 before any text,
// an error event once streaming.
TEST_F(ServerTest, TooAmbiguousGrammarIsAnError) {
  const json body = {{"prompt", "Once"},
                     {"max_tokens", 200},
                     {"grammar", R"g(root ::= x
x ::= "a" x y | "a" x z | "a"
y ::= "a"
z ::= "a")g"}};
  int status = 0;
  const json r = Post("/v1/completions", body, &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_NE(r.dump().find("grammar: too ambiguous"), std::string::npos) << r.dump();
  const StreamResult st = PostStream(port(), "/v1/completions", body);
  const std::string said = st.error.dump() + st.body;
  EXPECT_NE(said.find("grammar: too ambiguous"), std::string::npos) << said;
  EXPECT_NE(st.finish_reason, "stop");
}

}  // namespace

}  // namespace rotor::serve::testing
