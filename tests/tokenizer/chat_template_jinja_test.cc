// The rendered prompts against the models' own Jinja templates: each case of
// chat_template_jinja_cases.inc is a conversation rendered by jinja2 3.1.6 from
// a template as its model ships it (Llama-2-chat, Mistral-7B-Instruct v0.2 and
// v0.3, Mistral-Nemo, Llama-3-8B-Instruct, Llama-3.2 with date_string
// "26 Jul 2024", OpenHermes' ChatML, Phi-3.5-mini, Phi-4, Gemma, Gemma-2,
// Zephyr), with Hugging Face's conventions (add_generation_prompt, a call's
// arguments as a dict, tojson as json.dumps); the BOS the tokenizer adds is cut
// off. Conversations a template refuses (raise_exception) are not there, nor
// the documented differences (a default system prompt written in a template,
// Llama 3.x tool results written as a JSON string, Mistral's non-JSON tool
// results quoted). The same texts check Detect() on each template.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace rotor {
namespace {

struct JinjaMessage {
  const char* role;
  const char* content;
  std::vector<ChatToolCall> calls;
  const char* call_id;
};

struct JinjaCase {
  const char* source;  // the model whose template rendered `want`
  const char* conversation;
  const char* format;  // rotor's name for it
  std::vector<JinjaMessage> messages;
  bool tools;  // get_weather offered
  const char* want;
};

const std::vector<JinjaCase>& JinjaCases() {
  static const std::vector<JinjaCase> cases = {
#include "chat_template_jinja_cases.inc"
  };
  return cases;
}

TEST(ChatTemplateJinjaTest, EachFormatRendersAsItsModelsTemplate) {
  const std::vector<ChatTool> tools = {
      {"get_weather", "Get the weather in a city",
       R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"}};
  int checked = 0;
  for (const JinjaCase& c : JinjaCases()) {
    Result<ChatTemplate> t = ChatTemplate::FromName(c.format);
    ASSERT_TRUE(t.ok()) << t.message();
    std::vector<ChatMessage> messages;
    for (const JinjaMessage& m : c.messages)
      messages.push_back({m.role, m.content, m.calls, m.call_id});
    EXPECT_EQ(t->Apply(messages, true, c.tools ? tools : std::vector<ChatTool>{}), c.want)
        << c.source << " / " << c.conversation;
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST(ChatTemplateJinjaTest, NewerFormatsAreRecognised) {
  // Distinctive parts of the templates (whole texts in the cases' sources).
  struct DetectCase {
    const char* jinja;
    const char* name;
  };
  const DetectCase cases[] = {
      {R"({{ '[INST] ' + message['content'] + ' [/INST]' }})", "mistral"},
      {R"({{- "[AVAILABLE_TOOLS] [" }}{{- "[INST] " + message["content"] + "[/INST]" }})",
       "mistral-v3"},
      {R"({{- "[AVAILABLE_TOOLS][" }}{{- "[INST]" + message["content"] + "[/INST]" }})",
       "mistral-v3-tekken"},
      {R"({{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}})", "phi4"},
      {R"({{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'}})",
       "chatml"},
      {R"(<|start_header_id|>{%- set date_string = "26 Jul 2024" %}Cutting Knowledge Date)",
       "llama3.1"},
      {R"(<|start_header_id|>{{ message['role'] }}<|end_header_id|>)", "llama3"},
  };
  for (const DetectCase& d : cases) {
    Result<ChatTemplate> t = ChatTemplate::Detect(d.jinja);
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_EQ(t->name(), d.name) << d.jinja;
  }
  // Llama 3.1 keeps its template's date; Llama 3.2's strftime_now is today's.
  Result<ChatTemplate> l31 = ChatTemplate::Detect(
      R"(<|start_header_id|>{%- set date_string = "26 Jul 2024" %}Cutting Knowledge Date)");
  ASSERT_TRUE(l31.ok());
  EXPECT_EQ(l31->date(), "26 Jul 2024");
  Result<ChatTemplate> l32 = ChatTemplate::Detect(
      R"(<|start_header_id|>{%- set date_string = strftime_now("%d %b %Y") %})"
      R"(Cutting Knowledge Date)");
  ASSERT_TRUE(l32.ok());
  EXPECT_EQ(l32->date().size(), 11u) << l32->date();  // "07 Dec 2026"
  EXPECT_NE(l32->date(), "26 Jul 2024");
}

}  // namespace
}  // namespace rotor
