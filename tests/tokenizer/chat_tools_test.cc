// Tool calling in the chatml, llama3 and mistral formats (chat_tools.cc): the
// exact text of tools, tool calls and tool results.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace rotor {
namespace {

const std::vector<ChatTool> kTools = {
    {"get_weather", "Weather of a city",
     R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"},
    {"now", "", ""},
};

// A call, its result, and the model's answer.
const std::vector<ChatMessage> kExchange = {
    {"system", "Be brief."},
    {"user", "Weather in Oslo?"},
    {"assistant", "", {{"call_1", "get_weather", R"({"city":"Oslo"})"}}},
    {"tool", "{\"temp\": 3}", {}, "call_1"},
    {"assistant", "3 degrees."},
};

TEST(ChatToolsTest, ChatMlListsToolsInTheSystemTurn) {
  const ChatTemplate t(ChatFormat::kChatMl);
  EXPECT_TRUE(t.SupportsTools());
  EXPECT_EQ(
      t.Apply({kExchange[0], kExchange[1]}, true, kTools),
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
      "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
      "XML tags:\n<tools>\n"
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a )"
      R"(city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
      R"("required": ["city"]}}})"
      "\n"
      R"({"type": "function", "function": {"name": "now"}})"
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n");
  // Without a system message the tools make the system turn alone.
  EXPECT_EQ(t.Apply({{"user", "Hi"}}, false, {kTools[1]}),
            "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with "
            "the user query.\n\nYou are provided with function signatures within <tools></tools> "
            "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"now\"}}\n"
            "</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
}

// Arguments, results and parameters nested 100,000 levels deep (strings in a
// request, so no body limit sees them) are written as given: parsing them
// and writing them back recursed once per level and overflowed the stack.
TEST(ChatToolsTest, DeeplyNestedJsonTextIsWrittenAsGiven) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral}) {
    const ChatTemplate t(f);
    const std::vector<ChatMessage> m = {{"user", "hi"},
                                        {"assistant", "", {{"call_1", "get_weather", deep}}},
                                        {"tool", deep, {}, "call_1"}};
    const std::vector<ChatTool> tools = {{"get_weather", "", deep}};
    const std::string text = t.Apply(m, true, tools);
    EXPECT_NE(text.find(deep), std::string::npos);
  }
}

TEST(ChatToolsTest, ChatMlToolCallsAndResults) {
  const ChatTemplate t(ChatFormat::kChatMl);
  std::vector<ChatMessage> m(kExchange.begin() + 1, kExchange.end());
  // Two results in a row share one user turn; an assistant text comes first.
  m.insert(m.begin() + 3, ChatMessage{"tool", "second", {}, "call_2"});
  m[1].content = "Let me look.";
  m[1].tool_calls.push_back({"call_2", "now", "{}"});
  EXPECT_EQ(t.Apply(m, true),
            "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
            "<|im_start|>assistant\nLet me look.\n<tool_call>\n"
            R"({"name": "get_weather", "arguments": {"city": "Oslo"}})"
            "\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
            "<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 3}\n</tool_response>\n"
            "<tool_response>\nsecond\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n3 degrees.<|im_end|>\n<|im_start|>assistant\n");
  // The call's JSON and the result are content: no control tokens in them.
  for (const ChatSegment& s : t.Render(m, true)) {
    if (s.text.find("Oslo\"}") != std::string::npos || s.text == "second") {
      EXPECT_TRUE(s.content) << s.text;
    }
  }
}

TEST(ChatToolsTest, Llama3ToolsInTheFirstUserMessage) {
  const ChatTemplate t(ChatFormat::kLlama3);
  EXPECT_TRUE(t.SupportsTools());
  EXPECT_EQ(t.Apply(kExchange, true, {kTools[0]}),
            "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n\nBe brief."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Given the following functions, please respond with a JSON for a function call with "
            "its proper arguments that best answers the given prompt.\n\nRespond in the format "
            "{\"name\": function name, \"parameters\": dictionary of argument name and its "
            "value}.Do not use variables.\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "
            "\"get_weather\",\n        \"description\": \"Weather of a city\",\n        "
            "\"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n"
            "                \"city\": {\n                    \"type\": \"string\"\n"
            "                }\n            },\n            \"required\": [\n"
            "                \"city\"\n            ]\n        }\n    }\n}\n\n"
            "Weather in Oslo?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            R"({"name": "get_weather", "parameters": {"city": "Oslo"}})"
            "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 3}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n3 degrees.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // No system message: the system turn says only the environment.
  EXPECT_EQ(t.Apply({{"user", "Hi"}}, false, {kTools[1]}),
            "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
            "respond with a JSON for a function call with its proper arguments that best answers "
            "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": "
            "\"function\",\n    \"function\": {\n        \"name\": \"now\"\n    }\n}\n\nHi"
            "<|eot_id|>");
}

// The tool list as Mistral v0.3 writes it.
constexpr std::string_view kMistralTools =
    "[AVAILABLE_TOOLS] ["
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a )"
    R"(city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
    R"("required": ["city"]}}}, {"type": "function", "function": {"name": "now"}})"
    "][/AVAILABLE_TOOLS]";

TEST(ChatToolsTest, MistralToolsBeforeTheLastUserMessage) {
  const ChatTemplate t(ChatFormat::kMistral);
  EXPECT_TRUE(t.SupportsTools());
  const std::string id = MistralCallId("call_1");
  EXPECT_EQ(t.Apply(kExchange, true, kTools),
            std::string(kMistralTools) + "[INST] Be brief.\n\nWeather in Oslo? [/INST]"
            R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": ")" +
                id + R"("}]</s>[TOOL_RESULTS] {"content": {"temp": 3}, "call_id": ")" + id +
                "\"}[/TOOL_RESULTS]3 degrees.</s>");
  // Several user messages: the tools go before the last one only.
  EXPECT_EQ(t.Apply({{"user", "A"}, {"assistant", "B"}, {"user", "C"}}, true, kTools),
            "[INST] A [/INST]B</s>" + std::string(kMistralTools) + "[INST] C [/INST]");
  // No user message: the tools end the prompt.
  EXPECT_EQ(t.Apply({{"assistant", "B"}}, true, kTools), "B</s>" + std::string(kMistralTools));
}

TEST(ChatToolsTest, MistralToolCallsAndResults) {
  const ChatTemplate t(ChatFormat::kMistral);
  // Text before the calls, two calls, a v0.3 id kept as it is, results that
  // are not JSON written as JSON strings.
  const std::vector<ChatMessage> m = {
      {"user", "Q"},
      {"assistant",
       "Let me look.",
       {{"abcDEF123", "now", "{}"}, {"call_2", "get_weather", R"({"city": "a\"b"})"}}},
      {"tool", "noon", {}, "abcDEF123"},
      {"tool", "3", {}, "call_2"},
  };
  const std::string id2 = MistralCallId("call_2");
  EXPECT_EQ(t.Apply(m, true),
            "[INST] Q [/INST]Let me look.[TOOL_CALLS] "
            R"([{"name": "now", "arguments": {}, "id": "abcDEF123"}, {"name": "get_weather", )"
            R"("arguments": {"city": "a\"b"}, "id": ")" +
                id2 +
                R"("}]</s>[TOOL_RESULTS] {"content": "noon", "call_id": "abcDEF123"}[/TOOL_RESULTS])"
                R"([TOOL_RESULTS] {"content": 3, "call_id": ")" +
                id2 + R"("}[/TOOL_RESULTS])");
  // The JSON is content (no control tokens in it); the markers are markup.
  // Of a result only the message's content is content: the object around it
  // is markup (the id is always 9 letters and digits).
  for (const ChatSegment& s : t.Render(m, true)) {
    if (s.text.find("[TOOL_") != std::string::npos) {
      EXPECT_FALSE(s.content) << s.text;
    }
    if (s.text.find("noon") != std::string::npos || s.text.find("now") != std::string::npos) {
      EXPECT_TRUE(s.content) << s.text;
    }
    if (s.text.find("call_id") != std::string::npos) {
      EXPECT_FALSE(s.content) << s.text;
    }
    if (s.content && s.text.find("noon") != std::string::npos) {
      EXPECT_EQ(s.text, "\"noon\"");
    }
  }
}

TEST(ChatToolsTest, MistralCallIds) {
  // v0.3's ids (9 ASCII letters and digits) are kept; others become such ids,
  // the same each time, different for different ids.
  EXPECT_EQ(MistralCallId("a1B2c3D4e"), "a1B2c3D4e");
  std::vector<std::string> seen;
  for (const char* id : {"call_1", "call_2", "", "a1B2c3D4", "a1B2c3D4e_", "a1B2c3D4\xc3\xa9",
                         "call_abcdefghijklmnopqrstuvwx"}) {
    const std::string m = MistralCallId(id);
    EXPECT_EQ(m, MistralCallId(std::string(id)));
    ASSERT_EQ(m.size(), 9u) << id;
    for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id << " " << m;
    for (const std::string& before : seen) EXPECT_NE(m, before) << id;
    seen.push_back(m);
  }
}

TEST(ChatToolsTest, WithoutToolsTheFormatsAreUnchanged) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral}) {
    const ChatTemplate t(f);
    EXPECT_TRUE(t.SupportsTools());
    EXPECT_EQ(t.Apply(m, true, {}), t.Apply(m, true));
  }
  EXPECT_EQ(ChatTemplate(ChatFormat::kChatMl).Apply(m, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate(ChatFormat::kMistral).Apply(m, true), "[INST] S\n\nU [/INST]A</s>");
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kLlama2, ChatFormat::kPhi3,
                       ChatFormat::kGemma, ChatFormat::kZephyr})
    EXPECT_FALSE(ChatTemplate(f).SupportsTools());
}

}  // namespace
}  // namespace rotor
