// Request parsing and response shapes of rotor serve, without a server.
#include "server/api.h"
#include "server/fields.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace rotor::serve {
namespace {

using nlohmann::json;

GenerateOptions Defaults() {
  GenerateOptions d;
  d.n_predict = 100;
  d.sampling.temperature = 0.5f;
  d.stop = {"\n\n"};
  d.kv.policy = "sink";
  d.kv.size = 128;
  d.kv.keep = 8;
  d.kv.rope_k = RopeK::kDeferred;
  d.kv.types = KvTypes{KvType::kF16, KvType::kF16};
  return d;
}

TEST(ServeApiTest, CompletionFieldsOverrideDefaults) {
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "hi", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
      "top_k": 3, "min_p": 0.1, "seed": 42, "stop": ["a", "b"], "stream": true,
      "stream_options": {"include_usage": true}, "kv_keep": 2, "ignore_eos": true,
      "user": "ignored", "presence_penalty": 0})",
                        Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.options.n_predict, 7);
  EXPECT_EQ(r.options.sampling.temperature, 0.0f);
  EXPECT_EQ(r.options.sampling.top_p, 0.5f);
  EXPECT_EQ(r.options.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.options.sampling.min_p, 0.1f);
  EXPECT_EQ(r.options.sampling.seed, 42u);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.options.ignore_eos);
  EXPECT_EQ(r.options.kv.policy, "sink");
  EXPECT_EQ(r.options.kv.size, 128);
  EXPECT_EQ(r.options.kv.keep, 2);
}

TEST(ServeApiTest, PresenceAndFrequencyPenalties) {
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "hi", "presence_penalty": 0.5, "frequency_penalty": -0.25})",
                        Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_FLOAT_EQ(r.options.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.options.sampling.frequency_penalty, -0.25f);
}

TEST(ServeApiTest, AbsentAndNullFieldsKeepDefaults) {
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "hi", "max_tokens": null, "stop": null, "seed": -1})",
                        Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.options.n_predict, 100);
  EXPECT_EQ(r.options.sampling.temperature, 0.5f);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"\n\n"}));
  EXPECT_EQ(r.options.sampling.seed, kRandomSeed);
  EXPECT_FALSE(r.stream);
}

TEST(ServeApiTest, AnotherKvPolicyStartsFromItsDefaults) {
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "hi", "kv": "window", "kv_size": 32})",
                        Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.options.kv.policy, "window");
  EXPECT_EQ(r.options.kv.size, 32);
  EXPECT_EQ(r.options.kv.keep, KvConfig{}.keep);
  EXPECT_EQ(r.options.kv.rope_k, RopeK::kDeferred);  // the server's
  EXPECT_EQ(r.options.kv.types, (KvTypes{KvType::kF16, KvType::kF16}));         // the server's
  e = ParseRequest(R"({"prompt": "hi", "kv": "h2o", "kv_recent": 9, "rope_k": "cached",
      "kv_positions": "compact", "kv_type": "f32"})",
                   Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.options.kv.policy, "h2o");
  EXPECT_EQ(r.options.kv.recent, 9);
  EXPECT_EQ(r.options.kv.rope_k, RopeK::kCached);
  EXPECT_EQ(r.options.kv.positions, KvPositions::kCompact);
  EXPECT_EQ(r.options.kv.types, (KvTypes{KvType::kF32, KvType::kF32}));
}

TEST(ServeApiTest, PromptForms) {
  ApiRequest r;
  ASSERT_FALSE(ParseRequest(R"({"prompt": ["one"]})", Endpoint::kCompletions, Defaults(), &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "one");
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": [1, 5, 9]})", Endpoint::kCompletions, Defaults(), &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 5, 9}));
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": [[1, 2]]})", Endpoint::kCompletions, Defaults(), &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 2}));
  // Arrays of prompts: one choice each.
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": ["a", "b"]})", Endpoint::kCompletions, Defaults(), &r));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].text, "b");
  r = ApiRequest();
  ASSERT_FALSE(
      ParseRequest(R"({"prompt": [[1, 2], [3]]})", Endpoint::kCompletions, Defaults(), &r));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{3}));
  for (const char* body : {R"({"prompt": []})", R"({"prompt": ["a", 3]})",
                           R"({"prompt": [1, "a"]})", R"({"prompt": [[1], []]})",
                           R"({"prompt": [[1], [-2]]})"}) {
    r = ApiRequest();
    auto e = ParseRequest(body, Endpoint::kCompletions, Defaults(), &r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, "prompt") << body;
  }
}

TEST(ServeApiTest, ChoicesEchoAndLogprobs) {
  ApiRequest r;
  ASSERT_FALSE(ParseRequest(R"({"prompt": "a", "n": 3, "best_of": 3, "echo": true})",
                            Endpoint::kCompletions, Defaults(), &r));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.options.logprobs, -1);
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": "a", "logprobs": 5})", Endpoint::kCompletions,
                            Defaults(), &r));
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_EQ(r.options.logprobs, 5);
  r = ApiRequest();
  // echo with logprobs (the prompt's own, scored by the server), max_tokens 0 too.
  ASSERT_FALSE(ParseRequest(R"({"prompt": "a", "echo": true, "logprobs": 2, "max_tokens": 0})",
                            Endpoint::kCompletions, Defaults(), &r));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.options.n_predict, 0);
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": "a", "logprobs": false})", Endpoint::kCompletions,
                            Defaults(), &r));
  EXPECT_EQ(r.logprobs, -1);
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true,
      "top_logprobs": 4})",
                            Endpoint::kChat, Defaults(), &r));
  EXPECT_EQ(r.logprobs, 4);
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true})",
                            Endpoint::kChat, Defaults(), &r));
  EXPECT_EQ(r.logprobs, 0);
  r = ApiRequest();
  ASSERT_FALSE(ParseRequest(R"({"prompt": "a", "logit_bias": {"5": -100, "7": 2.5}})",
                            Endpoint::kCompletions, Defaults(), &r));
  EXPECT_EQ(r.options.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
}

TEST(ServeApiTest, UnknownFieldsAreErrors) {
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "a", "max_tokenz": 3})", Endpoint::kCompletions, Defaults(),
                        &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "max_tokenz");
  EXPECT_NE(e->message.find("unknown field 'max_tokenz'"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("did you mean 'max_tokens'"), std::string::npos) << e->message;
  e = ParseRequest(R"({"prompt": "a", "zzzzzzzzzzzz": 3})", Endpoint::kCompletions, Defaults(), &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message.find("did you mean"), std::string::npos) << e->message;
  // A field of the other endpoint.
  e = ParseRequest(R"({"messages": [{"role": "user", "content": "a"}], "echo": true})",
                   Endpoint::kChat, Defaults(), &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "echo");
  // Documented as ignored: accepted.
  for (const char* body :
       {R"({"prompt": "a", "user": "u", "metadata": {}, "store": false, "service_tier": "auto",
            "suffix": null})",
        R"({"messages": [{"role": "user", "content": "a"}], "tools": [], "tool_choice": "none",
            "parallel_tool_calls": false, "reasoning_effort": "low", "modalities": ["text"]})"}) {
    r = ApiRequest();
    const bool chat = std::string_view(body).find("messages") != std::string_view::npos;
    auto ok = ParseRequest(body, chat ? Endpoint::kChat : Endpoint::kCompletions, Defaults(), &r);
    EXPECT_FALSE(ok) << body << ": " << ok->message;
  }
  // Every table entry is either used or ignored for some set; KV fields are known.
  EXPECT_FALSE(FindUnknownField(json{{"kv_size", 3}}, kPromptsFileFields));
  EXPECT_TRUE(FindUnknownField(json{{"stream", true}}, kPromptsFileFields));
  // A list of names (the utility endpoints): no KV fields, the same message.
  constexpr std::string_view kNames[] = {"content", "with_pieces"};
  EXPECT_FALSE(FindUnknownField(json{{"content", "x"}}, kNames));
  EXPECT_EQ(FindUnknownField(json{{"kv_size", 3}}, kNames)->name, "kv_size");
  EXPECT_EQ(FindUnknownField(json{{"content", "x"}, {"with_piece", true}}, kNames)->message,
            "unknown field 'with_piece' (did you mean 'with_pieces'?)");
}

TEST(ServeApiTest, ChatMessages) {
  ApiRequest r;
  auto e = ParseRequest(R"({"messages": [
      {"role": "developer", "content": "Be nice."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}],
      "max_completion_tokens": 5})",
                        Endpoint::kChat, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.options.n_predict, 5);
}

TEST(ServeApiTest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "temperature": "x"})", "temperature"},
      {R"({"prompt": "a", "max_tokens": 1048577})", "max_tokens"},
      {R"({"prompt": "a", "top_k": -1})", "top_k"},
      {R"({"prompt": "a", "presence_penalty": "x"})", "presence_penalty"},
      {R"({"prompt": "a", "frequency_penalty": 1e9})", "frequency_penalty"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "stream_options": 3})", "stream_options"},
      {R"({"prompt": "a", "rope_k": "sideways"})", "rope_k"},
      {R"({"prompt": "a", "kv_type": "q4_1"})", "kv_type"},
      {R"({"prompt": "a", "kv_size": -4})", "kv_size"},
      {R"({"prompt": "a", "kv_size": 1.5})", "kv_size"},
      {R"({"prompt": "a", "kv_keep": "4"})", "kv_keep"},
      {R"({"prompt": "a", "kv_window": 0})", "kv_window"},
      {R"({"prompt": "a", "kv_recent": 0})", "kv_recent"},
      {R"({"prompt": "a", "kv": 3})", "kv"},
      {R"({"prompt": "a", "kv_positions": "sideways"})", "kv_positions"},
      {R"({"prompt": "a", "model": 3})", "model"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "a", "logprobs": true})", "logprobs"},
      {R"({"prompt": "a", "n": 0})", "n"},
      {R"({"prompt": "a", "n": 17})", "n"},
      {R"({"prompt": "a", "n": 2, "best_of": 3})", "best_of"},
      {R"({"prompt": "a", "logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"-3": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"3": 101}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"3": "1"}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": [1]})", "logit_bias"},
  };
  for (const Case& c : cases) {
    ApiRequest r;
    auto e = ParseRequest(c.body, Endpoint::kCompletions, Defaults(), &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param) << c.body << ": " << e->message;
    EXPECT_NE(e->message.find(c.param), std::string::npos) << e->message;
  }
}

// The messages say what is wrong with the value: 1e12 for max_tokens is out
// of range (it said "not a non-integer number"), and a body that is not JSON
// says where and why (a temperature of 1e309 overflows a double).
TEST(ServeApiTest, MessagesSayWhatIsWrongWithTheValue) {
  struct Case {
    const char* body;
    const char* message;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "max_tokens": 1e12})",
       "'max_tokens' 1000000000000.0 is out of range [-1, 1048576]"},
      {R"({"prompt": "a", "max_tokens": 5.0})",
       "'max_tokens' must be an integer, not 5.0 (write it without a decimal point"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "'max_tokens' must be an integer, not 2.5"},
      // The seed rule is the one of -s and of --prompts lines (server/fields.h ReadSeed).
      {R"({"prompt": "a", "seed": -2})",
       "'seed' must be an integer in [0, 2^64 - 1], or -1 for a random seed, not -2"},
      {R"({"prompt": "a", "temperature": 1e309})",
       "not valid JSON: number overflow parsing '1e309'"},
      {R"({"prompt": "a",)", "not valid JSON: parse error at line 1, column 16"},
      // A JSON Schema const nested 100,000 deep (200 KB) crashed the server
      // when the schema was written back as text (one recursion a level).
      {nullptr, "not valid JSON: arrays and objects nested 100002 deep, more than the 256"},
  };
  const std::string deep = R"({"prompt": "a", "json_schema": {"const": )" +
                           std::string(100000, '[') + std::string(100000, ']') + "}}";
  for (const Case& c : cases) {
    ApiRequest r;
    const std::string body = c.body != nullptr ? c.body : deep;
    auto e = ParseRequest(body, Endpoint::kCompletions, Defaults(), &r);
    ASSERT_TRUE(e) << body.substr(0, 100);
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(c.message), std::string::npos) << body.substr(0, 100) << ": "
                                                              << e->message;
  }
}

// A schema's properties are written in the order its client gave them (as
// llama-server and OpenAI's structured outputs do), wherever the schema is:
// nlohmann::json sorts keys, so the request's schemas are read in order.
TEST(ServeApiTest, SchemasKeepTheirPropertiesOrder) {
  const std::string schema =
      R"({"type": "object", "properties": {"zeta": {"type": "integer"}, )"
      R"("alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]})";
  auto accepts = [](const ApiRequest& r, const std::string& text) {
    grammar::Matcher m(r.options.sampling.grammar);
    return m.Accept(text) && m.CanEnd();
  };
  for (const std::string& field :
       {R"("response_format": {"type": "json_schema", "json_schema": {"schema": )" + schema + "}}",
        R"("response_format": {"type": "json_schema", "schema": )" + schema + "}",
        R"("response_format": {"type": "json_object", "schema": )" + schema + "}",
        R"("json_schema": )" + schema}) {
    const std::string body = R"({"prompt": "a", )" + field + "}";
    ApiRequest r;
    auto e = ParseRequest(body, Endpoint::kCompletions, Defaults(), &r);
    ASSERT_FALSE(e) << body << ": " << e->message;
    ASSERT_NE(r.options.sampling.grammar, nullptr) << body;
    EXPECT_TRUE(accepts(r, R"({"zeta": 1, "alpha": 2})")) << body;
    EXPECT_FALSE(accepts(r, R"({"alpha": 2, "zeta": 1})")) << body;
  }
  // A tool's parameters: the grammar of its calls and the text the chat
  // template shows the model.
  const std::string body =
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", )"
      R"("function": {"name": "f", "parameters": )" + schema + "}}]}";
  ApiRequest r;
  auto e = ParseRequest(body, Endpoint::kChat, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.tools.tools.size(), 1u);
  const std::string& p = r.tools.tools[0].parameters;
  EXPECT_LT(p.find("\"type\""), p.find("\"properties\"")) << p;
  EXPECT_LT(p.find("\"zeta\""), p.find("\"alpha\"")) << p;
  EXPECT_LT(p.find("\"properties\""), p.find("\"required\"")) << p;
}

TEST(ServeApiTest, ConstrainedOutputFields) {
  const char* ok[] = {
      R"({"prompt": "a", "response_format": {"type": "json_object"}})",
      R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema":
          {"name": "x", "strict": true, "schema": {"type": "object", "properties":
          {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}}}})",
      R"({"prompt": "a", "response_format": {"type": "json_object", "schema": {"enum": [1]}}})",
      R"({"prompt": "a", "json_schema": {"type": "string"}})",
      R"({"prompt": "a", "grammar": "root ::= \"x\""})",
  };
  for (const char* body : ok) {
    ApiRequest r;
    auto e = ParseRequest(body, Endpoint::kCompletions, Defaults(), &r);
    ASSERT_FALSE(e) << body << ": " << e->message;
    EXPECT_NE(r.options.sampling.grammar, nullptr) << body;
  }
  ApiRequest r;
  auto e = ParseRequest(R"({"prompt": "a", "response_format": {"type": "text"}, "grammar": ""})",
                        Endpoint::kCompletions, Defaults(), &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.options.sampling.grammar, nullptr);

  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case bad[] = {
      {R"({"prompt": "a", "response_format": "json"})", "response_format", "string 'type'"},
      {R"({"prompt": "a", "response_format": {"type": "xml"}})", "response_format",
       "unknown response_format type 'xml'"},
      {R"({"prompt": "a", "response_format": {"type": "json_schema"}})", "response_format",
       "json_schema.schema' is required"},
      {R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema":
          {"schema": {"type": "string", "pattern": "a"}}}})",
       "response_format", "at #: unsupported keyword 'pattern'"},
      {R"({"prompt": "a", "json_schema": 3})", "json_schema", "must be a JSON Schema object"},
      {R"({"prompt": "a", "grammar": "root ::= x"})", "grammar", "undefined rule 'x'"},
      {R"({"prompt": "a", "grammar": 3})", "grammar", "must be a string"},
      {R"({"prompt": "a", "grammar": "root ::= \"x\"", "json_schema": {}})", "grammar",
       "'json_schema' and 'grammar' both constrain"},
  };
  for (const Case& c : bad) {
    ApiRequest req;
    auto err = ParseRequest(c.body, Endpoint::kCompletions, Defaults(), &req);
    ASSERT_TRUE(err) << c.body;
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, c.param) << c.body << ": " << err->message;
    EXPECT_NE(err->message.find(c.message), std::string::npos) << err->message;
  }
}

TEST(ServeApiTest, ResponseShapes) {
  const ResponseMeta chat{Endpoint::kChat, "chatcmpl-1", 1700000000, "m"};
  const ResponseMeta text{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  EXPECT_EQ(FullResponse(chat, "hi", FinishReason::kEos, TokenUsage{3, 2, 1}),
            json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
      "model": "m", "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
      "message": {"role": "assistant", "content": "hi"}}],
      "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                 "prompt_tokens_details": {"cached_tokens": 1}}})"));
  EXPECT_EQ(
      FullResponse(text, "hi", FinishReason::kContext, TokenUsage{3, 2})["choices"][0],
      json::parse(R"({"index": 0, "logprobs": null, "finish_reason": "length", "text": "hi"})"));
  EXPECT_EQ(StreamChunk(chat, "", true, std::nullopt)["choices"][0]["delta"],
            json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(StreamChunk(chat, "x", false, std::nullopt)["choices"][0]["delta"],
            json::parse(R"({"content": "x"})"));
  const json last = StreamChunk(chat, "", false, FinishReason::kLength);
  EXPECT_EQ(last["object"], "chat.completion.chunk");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(StreamChunk(text, "x", false, std::nullopt)["choices"][0]["text"], "x");
  EXPECT_TRUE(UsageChunk(text, TokenUsage{1, 2})["choices"].empty());
  EXPECT_EQ(ErrorBody(ApiError{400, "bad", "invalid_request_error", "", "c"}),
            json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error",
      "param": null, "code": "c"}})"));
  // Invalid UTF-8 never throws.
  EXPECT_EQ(Dump(json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace rotor::serve
