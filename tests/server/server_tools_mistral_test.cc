// Tool calls in Mistral's format (server/tool_calls.h, tokenizer/chat_tools.cc):
// the reply parser, the grammar, and end to end as for chatml and llama3 in
// server_tools_test.cc: with tool_choice "required" every reply's calls parse
// and validate for many seeds at temperature 1, parallel and named calls,
// streamed calls, and a conversation that sends the calls back with results.
//
// The test model (ToolModel()) has no [TOOL_CALLS] token: the markers are
// plain text there, as in Mistral v0.1 vocabularies, and the grammar spells them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"
#include "server_test_util.h"
#include "server_tools_util.h"

namespace rotor::serve::testing {
namespace {

TEST(MistralToolReplyTest, CallListAfterTheMarker) {
  const std::vector<ChatTool> tools = {{"f", "", ""}, {"g", "", ""}};
  ToolReply r = ParseToolReply(
      "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": 2}}, "
      "{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\", \"id\": \"abcDEF123\"}]",
      ChatFormat::kMistral, tools);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(r.calls[0].arguments, R"({"z":1,"a":2})");  // the model's key order
  EXPECT_EQ(r.calls[1].name, "g");
  EXPECT_EQ(r.calls[1].arguments, R"({"b":2})");  // arguments given as a JSON string
  EXPECT_TRUE(r.calls[0].id.starts_with("call_"));
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // One object instead of a list; no text around it.
  r = ParseToolReply("[TOOL_CALLS]{\"name\": \"g\"}", ChatFormat::kMistral, tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.content, "");
  // Without the marker (a control token, not in the reply's text): a reply
  // that is all a list of calls.
  r = ParseToolReply(" [{\"name\": \"f\", \"arguments\": {\"x\": [1]}}] ", ChatFormat::kMistral,
                     tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x":[1]})");
}

TEST(MistralToolReplyTest, WhatDoesNotParseStaysText) {
  const std::vector<ChatTool> tools = {{"f", "", ""}};
  for (const char* text : {
           "[TOOL_CALLS] [{\"name\": \"h\", \"arguments\": {}}]",  // not an offered tool
           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"h\"}]",  // one bad
           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": [1]}]",  // arguments not an object
           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}",    // cut short
           "[TOOL_CALLS] [{\"name\": \"f\"}] and more",             // text after the list
           "[TOOL_CALLS] [{\"arguments\": {}}]",                    // no name
           "The list [1, 2] is not a call",
           "{\"name\": \"f\", \"arguments\": {}}",  // no marker and not a list
           "[{\"name\": \"f\"}] said the model",
       }) {
    const ToolReply r = ParseToolReply(text, ChatFormat::kMistral, tools);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(MistralToolGrammarTest, MarkerThenAListOfCalls) {
  const std::vector<ChatTool> tools = {{"get_weather", "", kWeatherParams.dump()},
                                       {"get_time", "", kTimeParams.dump()}};
  const std::string one = R"([TOOL_CALLS] [{"name": "get_time", "arguments": {"zone": "UTC"}}])";
  const std::string two =
      R"([TOOL_CALLS] [{"name": "get_time", "arguments": {"zone": "UTC"}}, )"
      R"({"name": "get_weather", "arguments": {"alerts": false, "city": "Oslo", "days": 2, )"
      R"("unit": "celsius"}}])";
  auto matches = [](const std::string& g, const std::string& text) {
    Result<std::shared_ptr<const grammar::Grammar>> parsed = grammar::ParseGrammar(g);
    EXPECT_TRUE(parsed.ok()) << parsed.message() << "\n" << g;
    if (!parsed.ok()) return false;
    grammar::Matcher m(*parsed);
    return m.Accept(text) && m.CanEnd();
  };
  Result<std::string> single = ToolCallGrammar(ChatFormat::kMistral, tools, false);
  Result<std::string> parallel = ToolCallGrammar(ChatFormat::kMistral, tools, true);
  ASSERT_TRUE(single.ok()) << single.message();
  ASSERT_TRUE(parallel.ok()) << parallel.message();
  EXPECT_TRUE(matches(*single, one));
  EXPECT_FALSE(matches(*single, two));  // one call without parallel_tool_calls
  EXPECT_TRUE(matches(*parallel, one));
  EXPECT_TRUE(matches(*parallel, two));
  std::string five = "[TOOL_CALLS] [";
  for (int i = 0; i < kMaxParallelCalls + 1; ++i)
    five += std::string(i ? ", " : "") + R"({"name": "get_time", "arguments": {"zone": "UTC"}})";
  EXPECT_FALSE(matches(*parallel, five + "]"));  // at most kMaxParallelCalls
  // The arguments are held to the schema; the marker is required.
  EXPECT_FALSE(matches(*single, R"([TOOL_CALLS] [{"name": "get_time", "arguments": {}}])"));
  EXPECT_FALSE(matches(*single, R"([TOOL_CALLS] [{"name": "now", "arguments": {}}])"));
  EXPECT_FALSE(matches(*single, R"([{"name": "get_time", "arguments": {"zone": "UTC"}}])"));
  // The name comes first, as the template writes calls.
  EXPECT_FALSE(
      matches(*single, R"([TOOL_CALLS] [{"arguments": {"zone": "UTC"}, "name": "get_time"}])"));
}

class MistralToolServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(ToolModel().empty()) << "could not write the test model";
    mistral_ = new TestServer(ToolOptions("mistral"));
  }
  static void TearDownTestSuite() {
    delete mistral_;
    mistral_ = nullptr;
  }
  static TestServer* mistral_;
};
TestServer* MistralToolServerTest::mistral_ = nullptr;

TEST_F(MistralToolServerTest, RequiredCallsValidateForManySeeds) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  ExpectRequiredCalls(*mistral_, "mistral", kRequiredCallSeeds, false);
}

TEST_F(MistralToolServerTest, ParallelCallsAndANamedFunction) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  EXPECT_GT(ExpectParallelAndNamedCalls(*mistral_, "mistral"), 0)
      << "no reply made parallel calls: the list's other calls are untested";
}

TEST_F(MistralToolServerTest, StreamedCalls) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  ExpectStreamedCalls(*mistral_, "mistral");
}

// The calls of one reply go back as the assistant's tool_calls with a result
// per call; the next reply (required again) is valid calls.
TEST_F(MistralToolServerTest, HistoryRoundTrip) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  json body = ToolRequest(5);
  body["parallel_tool_calls"] = true;
  body["max_tokens"] = 1200;
  int status = 0;
  const json first = PostJson(*mistral_, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << first.dump();
  const json calls = first["choices"][0]["message"]["tool_calls"];
  ASSERT_TRUE(calls.is_array() && !calls.empty()) << first.dump();
  ExpectValidCalls(calls, "first: ");
  body["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}});
  for (const json& c : calls)
    body["messages"].push_back(
        {{"role", "tool"}, {"tool_call_id", c["id"]}, {"content", R"({"temp": 3})"}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "abcDEF123"}, {"content", "x"}});
  const json second = PostJson(*mistral_, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << second.dump();
  ExpectValidCalls(second["choices"][0]["message"]["tool_calls"], "second: ");
  // The history is in the prompt.
  EXPECT_GT(second["usage"]["prompt_tokens"].get<int>(),
            first["usage"]["prompt_tokens"].get<int>() + 20)
      << first["usage"].dump() << second["usage"].dump();
}

// "auto": a call the model starts with [TOOL_CALLS] is held to the grammar.
TEST_F(MistralToolServerTest, AutoCallsThatStartAreWellFormed) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  const AutoCalls a =
      PostAutoCalls(*mistral_, kMistralToolCallsToken, 16, kAutoCallSeeds, "[TOOL_CALLS]");
  EXPECT_GE(a.with_calls, ::rotor::testing::kSanitized ? 1 : 3);
}

TEST_F(MistralToolServerTest, AutoAndNone) {
  ASSERT_TRUE(mistral_->ok()) << mistral_->error();
  ExpectAutoAndNone(*mistral_);
}

}  // namespace
}  // namespace rotor::serve::testing
