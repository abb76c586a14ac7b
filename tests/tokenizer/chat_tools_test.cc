// Tool calling in the chatml and llama3 formats (chat_tools.cc): the exact
// text of tools, tool calls and tool results.
#include <gtest/gtest.h>

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

TEST(ChatToolsTest, WithoutToolsTheFormatsAreUnchanged) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3}) {
    const ChatTemplate t(f);
    EXPECT_EQ(t.Apply(m, true, {}), t.Apply(m, true));
  }
  EXPECT_EQ(ChatTemplate(ChatFormat::kChatMl).Apply(m, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n");
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kLlama2, ChatFormat::kMistral,
                       ChatFormat::kPhi3, ChatFormat::kGemma, ChatFormat::kZephyr})
    EXPECT_FALSE(ChatTemplate(f).SupportsTools());
}

}  // namespace
}  // namespace rotor
