// What clients written for llama-server and browsers expect of the server:
// CORS (preflights, the Origin allowed on plain and streamed answers), the
// llama.cpp web page's request body, samplers rotor does not have refused
// unless off, and a request without max_tokens bounded by the context size
// whatever the KV policy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

using ::testing::HasSubstr;

class HabitsTest : public ::testing::Test {
 protected:
  static ServeOptions Options(bool cors = true) {
    ServeOptions o = TestOptions(2, 8);
    o.engine.n_ctx = 48;
    o.defaults.n_predict = -1;  // rotor serve's default (cmd_serve.cc)
    o.defaults.stop_at_context = true;
    o.cors = cors;
    return o;
  }
  void SetUp() override { ASSERT_TRUE(server_.ok()) << server_.error(); }
  TestServer server_{Options()};
};

constexpr char kOrigin[] = "http://localhost:5173";

// A browser's preflight before a JSON POST from another origin: 200, the
// methods, the headers it asked for, the origin allowed.
TEST_F(HabitsTest, PreflightAllowsTheOriginAndItsHeaders) {
  auto res = server_.Client()->Options(
      "/v1/chat/completions", {{"Origin", kOrigin},
                               {"Access-Control-Request-Method", "POST"},
                               {"Access-Control-Request-Headers", "authorization,content-type"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Credentials"), "true");
  EXPECT_THAT(res->get_header_value("Access-Control-Allow-Methods"), HasSubstr("POST"));
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");
  EXPECT_TRUE(res->body.empty());
  // Any path, as llama-server: the preflight does not know the routes.
  auto other = server_.Client()->Options("/health", {{"Origin", kOrigin}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->get_header_value("Access-Control-Allow-Headers"), "*");
  // Without an Origin: the methods, nothing for browsers.
  auto plain = server_.Client()->Options("/v1/models");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  EXPECT_THAT(plain->get_header_value("Allow"), HasSubstr("POST"));
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
}

// The answers themselves carry the origin: whole, streamed, and errors.
TEST_F(HabitsTest, AnswersAllowTheOrigin) {
  const httplib::Headers from = {{"Origin", kOrigin}};
  auto cli = server_.Client();
  auto whole = cli->Post("/v1/completions", from, R"({"prompt": "Once", "max_tokens": 2})",
                         "application/json");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(whole->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  auto streamed = cli->Post("/v1/chat/completions", from,
                            R"({"messages": [{"role": "user", "content": "Hi"}],
                                "max_tokens": 2, "stream": true})",
                            "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_THAT(streamed->body, HasSubstr("data: [DONE]"));
  EXPECT_EQ(streamed->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  auto bad = cli->Post("/v1/completions", from, "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  auto health = cli->Get("/health", from);
  ASSERT_TRUE(health);
  EXPECT_EQ(health->get_header_value("Access-Control-Allow-Origin"), kOrigin);
  auto none = cli->Get("/health");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_header("Access-Control-Allow-Origin"));
}

TEST(HabitsOff, NoCorsAllowsNoOrigin) {
  ServeOptions o = TestOptions(1, 4);
  o.cors = false;
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  auto pre = server.Client()->Options("/v1/completions", {{"Origin", kOrigin}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Methods"));
  auto res = server.Client()->Post("/v1/completions", {{"Origin", kOrigin}},
                                   R"({"prompt": "Once", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
}

// The body llama.cpp's web page sends (tools/server/webui, chat.ts): its
// samplers at their off values, max_tokens -1, and its extras.
TEST_F(HabitsTest, TheLlamaCppWebPagesBodyIsAccepted) {
  const json body = json::parse(R"({
    "messages": [{"role": "user", "content": "Hi"}], "stream": false, "return_progress": true,
    "reasoning_format": "auto", "temperature": 0, "max_tokens": -1, "dynatemp_range": 0,
    "dynatemp_exponent": 1, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "xtc_probability": 0,
    "xtc_threshold": 0.1, "typ_p": 1, "repeat_last_n": 64, "repeat_penalty": 1,
    "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0, "dry_base": 1.75,
    "dry_allowed_length": 2, "dry_penalty_last_n": -1,
    "samplers": ["top_k", "typ_p", "top_p", "min_p", "temperature"],
    "timings_per_token": false, "id_slot": 0, "n_probs": 0, "mirostat": 0.0,
    "verbosity": "low", "prompt_cache_key": "k", "safety_identifier": "s"})");
  int status = 0;
  const json r = PostJson(server_, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// A sampler rotor does not have, asked for: a 400 naming the field and its
// off value, not a reply sampled some other way.
TEST_F(HabitsTest, SamplersRotorLacksAreRefusedUnlessOff) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"mirostat", 2},
                                                 {"typ_p", 0.9},
                                                 {"typical_p", 0.5},
                                                 {"xtc_probability", 0.5},
                                                 {"dry_multiplier", 0.8},
                                                 {"dynatemp_range", 0.5},
                                                 {"top_n_sigma", 1.0},
                                                 {"n_probs", 5},
                                                 {"post_sampling_probs", true},
                                                 {"suffix", "}\n"}}) {
    int status = 0;
    const json r = PostJson(server_, "/v1/completions",
                            {{"prompt", "Once"}, {"max_tokens", 1}, {field, value}}, &status);
    EXPECT_EQ(status, 400) << field;
    EXPECT_EQ(r["error"]["param"], field) << r.dump();
    EXPECT_THAT(r["error"]["message"].get<std::string>(), HasSubstr("only ")) << r.dump();
  }
}

// A completion prompt's control-token text is those tokens (llama-server's
// parse_special): a client rendering its own chat template sends them so.
TEST_F(HabitsTest, CompletionPromptsReadControlTokens) {
  const Tokenizer& tok = server_.server().engine().tokenizer();
  const std::string prompt = "Once</s><s> upon";
  const std::vector<int32_t> parsed = tok.Encode(prompt, true, /*parse_special=*/true);
  ASSERT_NE(parsed.size(), tok.Encode(prompt, true, /*parse_special=*/false).size());
  int status = 0;
  const json r = PostJson(server_, "/v1/completions",
                          {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], static_cast<int64_t>(parsed.size()));
}

// llama-server's route names without /v1 (a base URL without it).
TEST_F(HabitsTest, RoutesWithoutV1) {
  int status = 0;
  const json chat =
      PostJson(server_, "/chat/completions",
               {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  auto models = server_.Client()->Get("/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["object"], "list");
  auto health = server_.Client()->Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// No max_tokens (or -1): until end of text, or until prompt and reply fill
// the context size (48 here), under the full policy and under one that
// evicts and so never fills its cache.
TEST_F(HabitsTest, NoBudgetStopsAtTheContextSize) {
  for (const json& extra :
       {json::object(), json{{"max_tokens", -1}}, json{{"kv", "sink"}, {"kv_size", 24}},
        json{{"kv", "window"}, {"kv_size", 16}, {"max_tokens", -1}}}) {
    json body = {{"prompt", "Once upon a time"}, {"ignore_eos", true}, {"temperature", 0}};
    body.update(extra);
    int status = 0;
    const json r = PostJson(server_, "/v1/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << extra.dump();
    EXPECT_EQ(r["usage"]["total_tokens"], 48) << extra.dump() << " " << r["usage"].dump();
  }
  // A prompt longer than the context size (a policy that evicts takes it):
  // a reply of up to the context size.
  std::string story;
  for (int i = 0; i < 8; ++i) story += "Once upon a time there was a little girl named Lily. ";
  int long_status = 0;
  const json long_r = PostJson(
      server_, "/v1/completions",
      {{"prompt", story}, {"ignore_eos", true}, {"kv", "sink"}, {"kv_size", 24}}, &long_status);
  ASSERT_EQ(long_status, 200) << long_r.dump();
  EXPECT_GT(long_r["usage"]["prompt_tokens"], 48);
  EXPECT_EQ(long_r["usage"]["completion_tokens"], 48) << long_r["usage"].dump();
  // A budget of its own still counts.
  int status = 0;
  const json r = PostJson(server_, "/v1/completions",
                          {{"prompt", "Once"}, {"ignore_eos", true}, {"max_tokens", 5}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 5);
}

}  // namespace
}  // namespace rotor::serve::testing
