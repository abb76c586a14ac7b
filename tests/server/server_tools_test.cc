// Tool calls in /v1/chat/completions (server/tool_calls.h): request parsing
// and its 400s, the reply parser, and end to end with tool_choice "required":
// for many seeds at temperature 1 every reply's calls parse and validate
// against the tool's parameters schema.
//
// The bundled model's vocabulary has no chatml or llama3 markup, so the
// end-to-end tests use a copy of it with those control tokens (ToolModel(),
// server_tools_util.h). Mistral's end-to-end tests: server_tools_mistral_test.cc.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/tool_calls.h"
#include "server_test_util.h"
#include "server_tools_util.h"

namespace rotor::serve::testing {
namespace {

std::optional<ApiError> Parse(const json& body, ApiRequest* out) {
  return ParseRequest(body.dump(), Endpoint::kChat, GenerateOptions{}, out);
}

TEST(ToolParseTest, ToolsChoiceAndMessages) {
  json body = ToolRequest(1);
  body["messages"].push_back({{"role", "assistant"},
                              {"content", nullptr},
                              {"tool_calls",
                               {{{"id", "call_1"},
                                 {"type", "function"},
                                 {"function", {{"name", "get_time"}, {"arguments", "{}"}}}}}}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "noon"}});
  ApiRequest r;
  ASSERT_FALSE(Parse(body, &r));
  ASSERT_EQ(r.tools.tools.size(), 2u);
  EXPECT_EQ(r.tools.tools[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.tools.tools[0].parameters), kWeatherParams);
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.tools.parallel);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_time");
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  ApiRequest named;
  ASSERT_FALSE(Parse(body, &named));
  EXPECT_EQ(named.tools.choice, ToolChoice::kFunction);
  EXPECT_EQ(named.tools.function, "get_time");
  ApiRequest plain;  // no tools: auto, nothing offered
  ASSERT_FALSE(Parse({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, &plain));
  EXPECT_FALSE(plain.tools.offered());
}

TEST(ToolParseTest, BadFieldsAre400sNamingTheField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"tools not an array", [](json& b) { b["tools"] = "x"; }, "tools"},
      {"no name", [](json& b) { b["tools"][1]["function"].erase("name"); },
       "tools[1].function.name"},
      {"bad name", [](json& b) { b["tools"][1]["function"]["name"] = "a b"; },
       "tools[1].function.name"},
      {"duplicate name", [](json& b) { b["tools"][1]["function"]["name"] = "get_weather"; },
       "tools[1].function.name"},
      {"type", [](json& b) { b["tools"][0]["type"] = "retrieval"; }, "tools[0].type"},
      {"no function", [](json& b) { b["tools"][0].erase("function"); }, "tools[0].function"},
      {"schema", [](json& b) { b["tools"][0]["function"]["parameters"]["pattern"] = "x"; },
       "tools[0].function.parameters"},
      {"parameters not an object", [](json& b) { b["tools"][0]["function"]["parameters"] = 3; },
       "tools[0].function.parameters"},
      {"choice", [](json& b) { b["tool_choice"] = "always"; }, "tool_choice"},
      {"choice object",
       [](json& b) { b["tool_choice"] = {{"type", "function"}}; }, "tool_choice"},
      {"choice unknown function",
       [](json& b) {
         b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
       },
       "tool_choice.function.name"},
      {"required without tools", [](json& b) { b.erase("tools"); }, "tool_choice"},
      {"parallel", [](json& b) { b["parallel_tool_calls"] = "yes"; }, "parallel_tool_calls"},
      {"tool message without id",
       [](json& b) { b["messages"].push_back({{"role", "tool"}, {"content", "x"}}); },
       "messages[1].tool_call_id"},
      {"tool_calls on a user message",
       [](json& b) { b["messages"][0]["tool_calls"] = json::array(); }, "messages[0].tool_calls"},
      {"tool_calls without a name",
       [](json& b) {
         b["messages"].push_back(
             {{"role", "assistant"}, {"tool_calls", {{{"function", {{"arguments", "{}"}}}}}}});
       },
       "messages[1].tool_calls[0].function.name"},
  };
  for (const Case& c : cases) {
    json body = ToolRequest(1);
    c.edit(body);
    ApiRequest r;
    const std::optional<ApiError> e = Parse(body, &r);
    ASSERT_TRUE(e) << c.what;
    EXPECT_EQ(e->status, 400) << c.what;
    EXPECT_EQ(e->param, c.param) << c.what << ": " << e->message;
  }
}

TEST(ToolReplyTest, ChatMlCallsAndText) {
  const std::vector<ChatTool> tools = {{"f", "", ""}, {"g", "", ""}};
  ToolReply r = ParseToolReply(
      "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}</tool_call>",
      ChatFormat::kChatMl, tools);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(r.calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.calls[1].arguments, R"({"b":2})");  // arguments given as a JSON string
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  r = ParseToolReply(R"(<tool_call>{"name": "f", "arguments": {"z": 1, "a": 2}}</tool_call>)",
                     ChatFormat::kChatMl, tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"z":1,"a":2})");  // the model's key order
  // Unknown tools and broken JSON stay text.
  r = ParseToolReply("<tool_call>{\"name\": \"h\", \"arguments\": {}}</tool_call> and "
                     "<tool_call>{\"name\": \"f\"",
                     ChatFormat::kChatMl, tools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content,
            "<tool_call>{\"name\": \"h\", \"arguments\": {}}</tool_call> and <tool_call>{\"name\": "
            "\"f\"");
  r = ParseToolReply("<tool_call>{\"name\": \"f\", \"arguments\": {}}", ChatFormat::kChatMl, tools);
  ASSERT_EQ(r.calls.size(), 1u);  // cut before its end tag (a stop string)
}

TEST(ToolReplyTest, Llama3JsonObject) {
  const std::vector<ChatTool> tools = {{"f", "", ""}};
  ToolReply r = ParseToolReply(" {\"name\": \"f\", \"parameters\": {\"x\": [1]}} ",
                               ChatFormat::kLlama3, tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x":[1]})");
  EXPECT_EQ(r.content, "");
  r = ParseToolReply("{\"name\": \"f\", \"parameters\": {}}\n{\"name\": \"f\", \"parameters\": {}}",
                     ChatFormat::kLlama3, tools);
  EXPECT_EQ(r.calls.size(), 2u);
  r = ParseToolReply("It is {\"name\": \"f\"} ", ChatFormat::kLlama3, tools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "It is {\"name\": \"f\"} ");  // no calls: the text as it came
}

TEST(ToolGrammarTest, ParsesForEveryFormat) {
  const std::vector<ChatTool> tools = {{"get_weather", "", kWeatherParams.dump()},
                                       {"get_time", "", kTimeParams.dump()},
                                       {"now", "", ""},
                                       {"defs", "",
                                        R"({"type":"object","properties":{"p":{"$ref":"#/$defs/P"}},
                                            "$defs":{"P":{"type":"integer"}}})"}};
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral}) {
    for (bool parallel : {false, true}) {
      Result<std::string> g = ToolCallGrammar(f, tools, parallel);
      ASSERT_TRUE(g.ok()) << g.message();
      EXPECT_TRUE(grammar::ParseGrammar(*g).ok()) << *g;
    }
  }
}

class ToolServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(ToolModel().empty()) << "could not write the test model";
    chatml_ = new TestServer(ToolOptions("chatml"));
    llama3_ = new TestServer(ToolOptions("llama3"));
  }
  static void TearDownTestSuite() {
    delete chatml_;
    delete llama3_;
    chatml_ = llama3_ = nullptr;
  }
  static TestServer* chatml_;
  static TestServer* llama3_;
};
TestServer* ToolServerTest::chatml_ = nullptr;
TestServer* ToolServerTest::llama3_ = nullptr;

TEST_F(ToolServerTest, RequiredCallsValidateForManySeeds) {
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  ExpectRequiredCalls(*chatml_, "chatml", kRequiredCallSeeds, false);
}

TEST_F(ToolServerTest, ParallelCallsAndANamedFunction) {
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  EXPECT_GT(ExpectParallelAndNamedCalls(*chatml_, "chatml"), 0)
      << "no reply made parallel calls: the later calls are untested";
}

TEST_F(ToolServerTest, Llama3RequiredCallsValidate) {
  ASSERT_TRUE(llama3_->ok()) << llama3_->error();
  ExpectRequiredCalls(*llama3_, "llama3", kRequiredCallSeeds, true);  // one call per turn anyway
}

TEST_F(ToolServerTest, StreamedCalls) {
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  ExpectStreamedCalls(*chatml_, "chatml");
}

TEST_F(ToolServerTest, AutoAndNone) {
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  ExpectAutoAndNone(*chatml_);
}

// tool_choice "auto": the model writes freely, and a call it starts is held
// to the tools' grammar (a lazy grammar). A logit bias makes this model start
// calls at random places; every reply is then text or text and valid calls,
// never a broken call left as text.
TEST_F(ToolServerTest, AutoCallsThatStartAreWellFormed) {
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  const AutoCalls a = PostAutoCalls(*chatml_, kToolCallToken, 16, kAutoCallSeeds, "<tool_call>");
  EXPECT_GE(a.with_calls, ::rotor::testing::kSanitized ? 1 : 4);
  EXPECT_GE(a.text_first, ::rotor::testing::kSanitized ? 1 : 2);
}

// llama3 "auto": a reply that opens with "{" is a call, whole.
TEST_F(ToolServerTest, Llama3AutoRepliesOpeningWithABraceAreCalls) {
  ASSERT_TRUE(llama3_->ok()) << llama3_->error();
  const json brace = PostJson(*llama3_, "/tokenize", {{"content", "{"}});
  ASSERT_FALSE(brace["tokens"].empty()) << brace.dump();  // (SPM: "▁" first)
  int calls = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    json body = ToolRequest(seed);
    body["tool_choice"] = "auto";
    body["logit_bias"] = {{std::to_string(brace["tokens"].back().get<int>()), 24}};
    int status = 0;
    const json r = PostJson(*llama3_, "/v1/chat/completions", body, &status);
    const std::string context = "seed " + std::to_string(seed) + ": ";
    ASSERT_EQ(status, 200) << context << r.dump();
    const json& m = r["choices"][0]["message"];
    if (m.contains("tool_calls")) {
      ++calls;
      EXPECT_TRUE(m["content"].is_null()) << context << r.dump();
      ExpectValidCalls(m["tool_calls"], context);
    } else if (r["choices"][0]["finish_reason"] != "length") {
      EXPECT_FALSE(m["content"].get<std::string>().starts_with("{")) << context << r.dump();
    }
  }
  EXPECT_GE(calls, 3);
  std::cout << calls << " of 12 replies are calls\n";
}

TEST_F(ToolServerTest, HistoryWithCallsAndResults) {
  ASSERT_TRUE(llama3_->ok()) << llama3_->error();
  json body = ToolRequest(3);
  body["messages"].push_back(
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_time"}, {"arguments", R"({"zone":"UTC"})"}}}}}}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "noon"}});
  for (TestServer* s : {chatml_, llama3_}) {
    int status = 0;
    const json r = PostJson(*s, "/v1/chat/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    ExpectValidCalls(r["choices"][0]["message"]["tool_calls"], "history: ");
  }
}

TEST_F(ToolServerTest, TemplatesWithoutToolsAndConflictsAre400s) {
  TestServer plain(TestOptions(2, 4));  // the bundled model: plain template
  ASSERT_TRUE(plain.ok()) << plain.error();
  json body = ToolRequest(1);
  int status = 0;
  json r = PostJson(plain, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "tools");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("'plain'"), std::string::npos)
      << r.dump();
  body["tool_choice"] = "auto";
  r = PostJson(plain, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400) << r.dump();
  body["tool_choice"] = "none";  // tools not offered: fine
  body["max_tokens"] = 4;
  r = PostJson(plain, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 200) << r.dump();
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "x"}});
  r = PostJson(plain, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "messages[1]") << r.dump();

  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  body = ToolRequest(1);
  body["response_format"] = {{"type", "json_object"}};
  r = PostJson(*chatml_, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "tool_choice") << r.dump();

  // Tools are offered to one choice without logprobs.
  body = ToolRequest(1);
  body["n"] = 2;
  r = PostJson(*chatml_, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "n") << r.dump();
  body = ToolRequest(1);
  body["logprobs"] = true;
  r = PostJson(*chatml_, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "logprobs") << r.dump();
}

// The official client (as OpenAiNpmTest in server_cli_test.cc): skipped
// without node and npm or when the package cannot be installed (OpenAiNpm).
TEST_F(ToolServerTest, OfficialNpmClientGetsToolCalls) {
  const OpenAiNpm npm;
  if (!npm.ok()) return;
  ASSERT_TRUE(chatml_->ok()) << chatml_->error();
  const json tools = {Tool("get_weather", kWeatherParams), Tool("get_time", kTimeParams)};
  const json out = npm.Run(chatml_->port(), R"JS(
const tools = JSON.parse(process.argv[3]);
const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
out.calls = [];
out.stream_calls = [];
for (let seed = 1; seed <= 3; ++seed) {
  const r = await client.chat.completions.create(
      { model: 'm', messages, tools, tool_choice: 'required', parallel_tool_calls: false,
        temperature: 1, seed, max_tokens: 400 });
  out.finish = r.choices[0].finish_reason;
  out.content = r.choices[0].message.content;
  out.calls.push(...r.choices[0].message.tool_calls);
}
const stream = await client.chat.completions.create(
    { model: 'm', messages, tools, tool_choice: 'required', temperature: 1, seed: 9,
      max_tokens: 1200, stream: true });
for await (const chunk of stream) {
  for (const c of chunk.choices[0]?.delta?.tool_calls ?? []) out.stream_calls.push(c);
  out.stream_finish = chunk.choices[0]?.finish_reason ?? out.stream_finish;
}
)JS",
                           {tools.dump()}, std::chrono::seconds(120));
  if (out.is_null()) return;  // failed, with node's stderr
  EXPECT_EQ(out["finish"], "tool_calls");
  EXPECT_TRUE(out["content"].is_null());
  EXPECT_EQ(out["calls"].size(), 3u);
  ExpectValidCalls(out["calls"], "npm: ");
  EXPECT_EQ(out["stream_finish"], "tool_calls");
  json streamed = out["stream_calls"];
  for (json& c : streamed) c.erase("index");
  ExpectValidCalls(streamed, "npm stream: ");
}

}  // namespace
}  // namespace rotor::serve::testing
