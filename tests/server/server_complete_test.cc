// OpenAI request completeness through the server: logit_bias, logprobs
// (chat and completions, streamed too), echo (with logprobs: the prompt's
// own, scored apart), n > 1 (its choices share the
// prompt's K/V through the prefix cache), prompt arrays, and unknown fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

class ServerComplete : public SharedServerTest<ServerComplete> {
 public:
  static ServeOptions Options() { return TestOptions(4, 16); }

 protected:
  json Ok(const std::string& path, const json& body) {
    int status = 0;
    json r = Post(path, body, &status);
    EXPECT_EQ(status, 200) << r.dump();
    return r;
  }
  // A streamed request's data events (JSON), without [DONE].
  std::vector<json> Events(const std::string& path, json body) {
    body["stream"] = true;
    auto res = server_->Client()->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    std::vector<json> out;
    if (!res) return out;
    EXPECT_EQ(res->status, 200) << res->body;
    size_t pos = 0;
    while ((pos = res->body.find("data: ", pos)) != std::string::npos) {
      const size_t end = res->body.find("\n\n", pos);
      const std::string data = res->body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data != "[DONE]") out.push_back(json::parse(data));
    }
    return out;
  }
};

const json kUser = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});

TEST_F(ServerComplete, LogitBiasBansAndForcesTokens) {
  const std::string prompt = "Once upon a time";
  Result<GenerateResult> base = [&] {
    GenerateOptions o = Greedy(12);
    o.prompt = prompt;
    return ReferenceEngine().Generate(o, nullptr);
  }();
  ASSERT_TRUE(base.ok());
  ASSERT_FALSE(base->tokens.empty());
  // Ban every token greedy chose: none of them appears, and the server gives
  // what the engine gives with the same bias.
  json bias = json::object();
  GenerateOptions banned = Greedy(12);
  for (int32_t t : base->tokens) {
    bias[std::to_string(t)] = -100;
    banned.sampling.logit_bias.emplace_back(t, -100.0f);
  }
  banned.prompt = prompt;
  Result<GenerateResult> ref = ReferenceEngine().Generate(banned, nullptr);
  ASSERT_TRUE(ref.ok());
  for (int32_t t : ref->tokens)
    EXPECT_EQ(std::count(base->tokens.begin(), base->tokens.end(), t), 0) << t;
  const json r = Ok("/v1/completions", {{"prompt", prompt},
                                        {"max_tokens", 12},
                                        {"temperature", 0},
                                        {"logit_bias", bias}});
  EXPECT_EQ(r["choices"][0]["text"], ref->text);
  EXPECT_NE(r["choices"][0]["text"], base->text);
  // Sampled (several seeds): a banned token never comes either.
  const Tokenizer& tok = ReferenceEngine().tokenizer();
  const int32_t common = base->tokens[0];
  for (uint64_t seed : {1, 2, 3}) {
    GenerateOptions o;
    o.prompt = prompt;
    o.n_predict = 24;
    o.sampling.temperature = 1.5f;
    o.sampling.seed = seed;
    o.sampling.logit_bias = {{common, -100.0f}};
    Result<GenerateResult> g = ReferenceEngine().Generate(o, nullptr);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(std::count(g->tokens.begin(), g->tokens.end(), common), 0);
  }
  // +100 forces a token, greedy or sampled: every generated token is it.
  const int32_t forced = tok.Encode(" dog", false).back();
  for (double temperature : {0.0, 1.0}) {
    const json f = Ok("/v1/completions", {{"prompt", prompt},
                                          {"max_tokens", 6},
                                          {"temperature", temperature},
                                          {"seed", 5},
                                          {"logprobs", 0},
                                          {"logit_bias", {{std::to_string(forced), 100}}}});
    const json& tokens = f["choices"][0]["logprobs"]["tokens"];
    ASSERT_EQ(tokens.size(), 6u) << f.dump();
    for (const json& t : tokens) EXPECT_EQ(t, tok.TokenToPiece(forced, true)) << f.dump();
  }
  // Ids outside the vocabulary: a 400 naming the field and the id.
  int status = 0;
  const json bad = Post("/v1/chat/completions",
                        {{"messages", kUser}, {"logit_bias", {{"999999", 1}}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "logit_bias");
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("999999"), std::string::npos);
}

void CheckTop(const json& top, const json& chosen_logprob) {
  double prev = 0;
  double mass = 0;
  for (const json& t : top) {
    const double lp = t["logprob"];
    EXPECT_LE(lp, prev);  // sorted, and <= 0
    prev = lp;
    mass += std::exp(lp);
  }
  EXPECT_LE(mass, 1.0 + 1e-4);
  (void)chosen_logprob;
}

TEST_F(ServerComplete, ChatLogprobs) {
  const json r = Ok("/v1/chat/completions", {{"messages", kUser},
                                             {"max_tokens", 10},
                                             {"temperature", 0},
                                             {"logprobs", true},
                                             {"top_logprobs", 5}});
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_TRUE(lp["content"].is_array()) << r.dump();
  EXPECT_EQ(lp["content"].size(), r["usage"]["completion_tokens"].get<size_t>());
  for (const json& c : lp["content"]) {
    EXPECT_LE(c["logprob"].get<double>(), 0.0);
    ASSERT_EQ(c["top_logprobs"].size(), 5u);
    CheckTop(c["top_logprobs"], c["logprob"]);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(c["token"], c["top_logprobs"][0]["token"]);
    EXPECT_FLOAT_EQ(c["logprob"].get<float>(), c["top_logprobs"][0]["logprob"].get<float>());
    std::string bytes;
    for (const json& b : c["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
    EXPECT_EQ(bytes, c["token"].get<std::string>());
  }
  // Without logprobs: null, as before.
  const json plain = Ok("/v1/chat/completions", {{"messages", kUser}, {"max_tokens", 10},
                                                 {"temperature", 0}});
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(plain["choices"][0]["message"], r["choices"][0]["message"]);
  // Streamed: each chunk carries its tokens' logprobs; together the same.
  json streamed = json::array();
  for (const json& e : Events("/v1/chat/completions", {{"messages", kUser},
                                                       {"max_tokens", 10},
                                                       {"temperature", 0},
                                                       {"logprobs", true},
                                                       {"top_logprobs", 5}}))
    if (!e["choices"].empty() && e["choices"][0]["logprobs"].is_object())
      for (const json& c : e["choices"][0]["logprobs"]["content"]) streamed.push_back(c);
  EXPECT_EQ(streamed, lp["content"]);
  // top_logprobs without logprobs, or beyond 20: 400.
  int status = 0;
  json bad = Post("/v1/chat/completions", {{"messages", kUser}, {"top_logprobs", 2}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "top_logprobs");
  bad = Post("/v1/chat/completions",
             {{"messages", kUser}, {"logprobs", true}, {"top_logprobs", 21}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "top_logprobs");
}

TEST_F(ServerComplete, CompletionLogprobsAndEcho) {
  const std::string prompt = "Once upon a time";
  const json r = Ok("/v1/completions",
                    {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", 3}});
  const json& lp = r["choices"][0]["logprobs"];
  const size_t n = r["usage"]["completion_tokens"];
  ASSERT_EQ(lp["tokens"].size(), n) << r.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    const json& top = lp["top_logprobs"][i];
    EXPECT_LE(top.size(), 3u);
    // Greedy: the chosen token has the best logprob of its alternatives.
    double best = -1e30;
    for (const auto& [text, v] : top.items()) best = std::max(best, v.get<double>());
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), static_cast<float>(best));
    EXPECT_TRUE(top.contains(lp["tokens"][i].get<std::string>()));
  }
  EXPECT_EQ(joined, r["choices"][0]["text"]);

  // echo: the prompt starts the text; the rest is unchanged.
  const json e = Ok("/v1/completions",
                    {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(e["choices"][0]["text"], prompt + r["choices"][0]["text"].get<std::string>());
  std::string streamed;
  for (const json& ev : Events("/v1/completions", {{"prompt", prompt},
                                                   {"max_tokens", 10},
                                                   {"temperature", 0},
                                                   {"echo", true}}))
    if (!ev["choices"].empty()) streamed += ev["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, e["choices"][0]["text"]);
}

constexpr const char* kLogprobsKeys[] = {"tokens", "token_logprobs", "top_logprobs",
                                         "text_offset"};

// The first n entries of a completions logprobs object.
json Head(json lp, size_t n) {
  for (const char* key : kLogprobsKeys) {
    json& arr = lp[key];
    if (arr.size() > n) arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(n), arr.end());
  }
  return lp;
}

// The logprobs arrays of a completions choice concatenated over stream events.
json StreamedLogprobs(const std::vector<json>& events, int index = 0) {
  json all = json::object();
  for (const char* key : kLogprobsKeys) all[key] = json::array();
  for (const json& e : events)
    if (!e["choices"].empty() && e["choices"][0]["index"] == index &&
        e["choices"][0]["logprobs"].is_object())
      for (const char* key : kLogprobsKeys)
        for (const json& v : e["choices"][0]["logprobs"][key]) all[key].push_back(v);
  return all;
}

// Same tokens and offsets; numbers within 1e-4 (a prompt computed in other
// chunks may differ in the last bits); nulls where nulls are.
void ExpectSameLogprobs(const json& a, const json& b) {
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["text_offset"], b["text_offset"]);
  ASSERT_EQ(a["token_logprobs"].size(), b["token_logprobs"].size());
  for (size_t i = 0; i < a["token_logprobs"].size(); ++i) {
    const json &x = a["token_logprobs"][i], &y = b["token_logprobs"][i];
    ASSERT_EQ(x.is_null(), y.is_null()) << i;
    if (!x.is_null()) {
      EXPECT_NEAR(x.get<double>(), y.get<double>(), 1e-4) << i;
    }
    const json &tx = a["top_logprobs"][i], &ty = b["top_logprobs"][i];
    ASSERT_EQ(tx.is_null(), ty.is_null()) << i;
    if (tx.is_null()) continue;
    ASSERT_EQ(tx.size(), ty.size()) << i;
    for (const auto& [text, v] : tx.items()) {
      ASSERT_TRUE(ty.contains(text)) << i << " " << text;
      EXPECT_NEAR(v.get<double>(), ty[text].get<double>(), 1e-4) << i << " " << text;
    }
  }
}

TEST_F(ServerComplete, EchoWithLogprobsScoresThePrompt) {
  const std::string prompt = "Once upon a time there was a big";
  const Tokenizer& tok = ReferenceEngine().tokenizer();
  const std::vector<int32_t> ids = tok.Encode(prompt, true);
  const size_t n_prompt = ids.size();
  ASSERT_GT(n_prompt, 4u);
  const json body = {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true},
                     {"logprobs", 2}};
  const json r = Ok("/v1/completions", body);
  const json& lp = r["choices"][0]["logprobs"];
  const size_t n_completion = r["usage"]["completion_tokens"];
  ASSERT_EQ(r["usage"]["prompt_tokens"], n_prompt);
  ASSERT_EQ(lp["tokens"].size(), n_prompt + n_completion) << r.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), n_prompt + n_completion);
  ASSERT_EQ(lp["top_logprobs"].size(), n_prompt + n_completion);
  ASSERT_EQ(lp["text_offset"].size(), n_prompt + n_completion);
  // The first token has nothing before it.
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 0; i < n_prompt; ++i) {
    EXPECT_EQ(lp["tokens"][i], tok.TokenToPiece(ids[i], true)) << i;
    // Where the token's text starts in the echoed prompt.
    EXPECT_EQ(lp["text_offset"][i], tok.Decode(std::span(ids).first(i)).size()) << i;
  }
  // Token i's logprob is that of token i generated after ids[0..i): forced by
  // logit_bias, which logprobs do not see (they are the raw logits').
  for (size_t i = 1; i < n_prompt; ++i) {
    const json one = Ok("/v1/completions",
                        {{"prompt", std::vector<int32_t>(ids.begin(), ids.begin() + i)},
                         {"max_tokens", 1},
                         {"temperature", 0},
                         {"logprobs", 2},
                         {"logit_bias", {{std::to_string(ids[i]), 100}}}});
    const json& g = one["choices"][0]["logprobs"];
    ASSERT_EQ(g["tokens"].size(), 1u) << one.dump();
    EXPECT_EQ(g["tokens"][0], lp["tokens"][i]);
    EXPECT_NEAR(g["token_logprobs"][0].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4)
        << i;
    ASSERT_EQ(g["top_logprobs"][0].size(), lp["top_logprobs"][i].size()) << i;
    for (const auto& [text, v] : g["top_logprobs"][0].items())
      EXPECT_NEAR(v.get<double>(), lp["top_logprobs"][i][text].get<double>(), 1e-4) << i << text;
  }
  // The generated part is what logprobs without echo give, after the echo.
  json plain_body = body;
  plain_body.erase("echo");
  const json plain = Ok("/v1/completions", plain_body);
  const json& p = plain["choices"][0]["logprobs"];
  EXPECT_EQ(r["choices"][0]["text"], prompt + plain["choices"][0]["text"].get<std::string>());
  for (size_t k = 0; k < n_completion; ++k) {
    EXPECT_EQ(lp["tokens"][n_prompt + k], p["tokens"][k]);
    EXPECT_EQ(lp["text_offset"][n_prompt + k], prompt.size() + p["text_offset"][k].get<size_t>());
    EXPECT_NEAR(lp["token_logprobs"][n_prompt + k].get<double>(),
                p["token_logprobs"][k].get<double>(), 1e-4);
  }
  // Streamed: the echo chunk carries the prompt's entries; all together the same.
  const std::vector<json> events = Events("/v1/completions", body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["choices"][0]["text"], prompt);
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["tokens"].size(), n_prompt);
  ExpectSameLogprobs(StreamedLogprobs(events), lp);

  // max_tokens 0 scores the text: the prompt's entries alone, finish "length".
  json score = body;
  score["max_tokens"] = 0;
  const json s = Ok("/v1/completions", score);
  EXPECT_EQ(s["choices"][0]["text"], prompt);
  EXPECT_EQ(s["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(s["usage"]["completion_tokens"], 0);
  const json prompt_part = Head(lp, n_prompt);
  ExpectSameLogprobs(s["choices"][0]["logprobs"], prompt_part);
  const std::vector<json> score_events = Events("/v1/completions", score);
  ExpectSameLogprobs(StreamedLogprobs(score_events), prompt_part);
  EXPECT_EQ(score_events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerComplete, EchoWithLogprobsForPromptArraysAndChoices) {
  const Tokenizer& tok = ReferenceEngine().tokenizer();
  const std::vector<std::string> prompts = {"The little dog", "A girl named Lily"};
  // Token ids without BOS: the first of them has no logprob either.
  const std::vector<int32_t> ids = tok.Encode("Tom and his cat", false);
  const json r = Ok("/v1/completions", {{"prompt", prompts},
                                        {"max_tokens", 3},
                                        {"temperature", 1.0},
                                        {"seed", 5},
                                        {"n", 2},
                                        {"echo", true},
                                        {"logprobs", 1}});
  ASSERT_EQ(r["choices"].size(), 4u) << r.dump();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json alone = Ok("/v1/completions", {{"prompt", prompts[i]},
                                              {"max_tokens", 0},
                                              {"echo", true},
                                              {"logprobs", 1}});
    const json& expected = alone["choices"][0]["logprobs"];
    const size_t n_prompt = expected["tokens"].size();
    for (int j = 0; j < 2; ++j) {
      const json& c = r["choices"][i * 2 + j];
      EXPECT_EQ(c["text"].get<std::string>().rfind(prompts[i], 0), 0u) << c.dump();
      ASSERT_GE(c["logprobs"]["tokens"].size(), n_prompt);
      ExpectSameLogprobs(Head(c["logprobs"], n_prompt), expected);
    }
  }
  const json t = Ok("/v1/completions",
                    {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
  const json& lp = t["choices"][0]["logprobs"];
  EXPECT_EQ(t["choices"][0]["text"], tok.Decode(ids));
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_TRUE(lp["top_logprobs"][i].empty());  // logprobs 0: no alternatives
  }
  // A prompt beyond the context is refused before any scoring.
  int status = 0;
  const json bad = Post("/v1/completions", {{"prompt", std::vector<int32_t>(5000, 7)},
                                            {"echo", true},
                                            {"logprobs", 1}},
                        &status);
  EXPECT_EQ(status, 400) << bad.dump();
  EXPECT_EQ(bad["error"]["code"], "context_length_exceeded");
}

TEST_F(ServerComplete, SeveralChoicesShareThePrompt) {
  // A prompt no other test sends, long enough for several K/V blocks.
  const std::string prompt =
      "Tom had a small red boat. Every morning he sailed it across the pond to see the ducks, "
      "and every evening he told his sister about the fish he had seen.";
  const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 11},
                     {"n", 3}};
  const json r = Ok("/v1/completions", body);
  ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
  const int64_t n_prompt = r["usage"]["prompt_tokens"];
  int64_t completion = 0;
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(r["choices"][j]["index"], j);
    // Choice j samples as the request with seed + j alone.
    json one = body;
    one["n"] = 1;
    one["seed"] = 11 + j;
    const json alone = Ok("/v1/completions", one);
    EXPECT_EQ(r["choices"][j]["text"], alone["choices"][0]["text"]) << j;
    EXPECT_EQ(alone["usage"]["prompt_tokens"], n_prompt);
    completion += alone["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], completion);
  // The prompt counts once; the choice that computed it took nothing from the cache.
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // Chat, streamed: chunks carry their index; each index's text is its choice's.
  const json chat = {{"messages", kUser}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 3},
                     {"n", 2}};
  const json full = Ok("/v1/chat/completions", chat);
  ASSERT_EQ(full["choices"].size(), 2u);
  std::map<int, std::string> texts;
  std::map<int, int> finishes;
  for (const json& e : Events("/v1/chat/completions", chat)) {
    ASSERT_EQ(e["choices"].size(), 1u);
    const int index = e["choices"][0]["index"];
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) texts[index] += delta["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(texts[j], full["choices"][j]["message"]["content"]) << j;
    EXPECT_EQ(finishes[j], 1);
  }
  // n beyond --parallel (4): 400; so are more choices than --parallel + --max-queue (20).
  int status = 0;
  json bad = Post("/v1/completions", {{"prompt", "a"}, {"n", 5}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "n");
  bad = Post("/v1/completions",
             {{"prompt", std::vector<std::string>(6, "a")}, {"n", 4}, {"max_tokens", 1}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "n");
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("24 choices"), std::string::npos);
}

TEST_F(ServerComplete, TheChoicesComputeThePromptOnce) {
  const std::string prompt =
      "Anna found a blue stone by the river. It was smooth and cold, and when she held it up "
      "to the sun it shone like the sky on a summer day.";
  const double before = ScrapeMetrics(server_->port())["rotor_prefix_cache_hit_tokens_total"];
  const json r = Ok("/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}, {"n", 4}});
  const int64_t n_prompt = r["usage"]["prompt_tokens"];
  ASSERT_GT(n_prompt, 32);
  const double after = ScrapeMetrics(server_->port())["rotor_prefix_cache_hit_tokens_total"];
  // Three of the four choices took the prompt's whole blocks from the first.
  EXPECT_GE(after - before, 3 * ((n_prompt - 1) / 16 * 16));
}

TEST_F(ServerComplete, PromptArraysGiveAChoiceEach) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog"};
  const json r = Ok("/v1/completions", {{"prompt", prompts},
                                        {"max_tokens", 6},
                                        {"temperature", 1.0},
                                        {"seed", 7},
                                        {"n", 2}});
  ASSERT_EQ(r["choices"].size(), 4u) << r.dump();
  int64_t n_prompt = 0;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int j = 0; j < 2; ++j) {
      const json alone = Ok("/v1/completions", {{"prompt", prompts[i]},
                                                {"max_tokens", 6},
                                                {"temperature", 1.0},
                                                {"seed", 7 + j}});
      EXPECT_EQ(r["choices"][i * 2 + j]["index"], i * 2 + j);
      EXPECT_EQ(r["choices"][i * 2 + j]["text"], alone["choices"][0]["text"]) << i << " " << j;
      if (j == 0) n_prompt += alone["usage"]["prompt_tokens"].get<int64_t>();
    }
  EXPECT_EQ(r["usage"]["prompt_tokens"], n_prompt);
  // Token-id arrays too.
  const Tokenizer& tok = ReferenceEngine().tokenizer();
  const json ids = Ok("/v1/completions", {{"prompt", {tok.Encode(prompts[0], true),
                                                      tok.Encode(prompts[1], true)}},
                                          {"max_tokens", 6},
                                          {"temperature", 0}});
  ASSERT_EQ(ids["choices"].size(), 2u);
  EXPECT_EQ(ids["choices"][1]["text"], Reference(prompts[1], Greedy(6)));
}

TEST_F(ServerComplete, UnknownFieldsAre400s) {
  int status = 0;
  const json r = Post("/v1/completions", {{"prompt", "a"}, {"max_tokenz", 3}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "max_tokenz");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("did you mean 'max_tokens'"),
            std::string::npos);
  // Ignored OpenAI fields are accepted.
  Ok("/v1/chat/completions", {{"messages", kUser},
                              {"max_tokens", 2},
                              {"user", "me"},
                              {"store", false},
                              {"metadata", json::object()},
                              {"tools", json::array()}});
}

}  // namespace
}  // namespace rotor::serve::testing
