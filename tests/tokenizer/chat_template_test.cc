#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rotor {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Who are you?"},
};
const std::vector<ChatMessage> kOneUser = {{"user", "Hi"}};

std::string Render(ChatFormat f, const std::vector<ChatMessage>& m, bool gen = true) {
  return ChatTemplate(f).Apply(m, gen);
}

TEST(ChatTemplateTest, Llama2) {
  EXPECT_EQ(Render(ChatFormat::kLlama2, kConversation),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Who are you? "
            "[/INST]");
  EXPECT_EQ(Render(ChatFormat::kLlama2, {{"user", "  Hi \n"}}), "[INST] Hi [/INST]");
}

TEST(ChatTemplateTest, Llama3) {
  EXPECT_EQ(Render(ChatFormat::kLlama3, kConversation),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(ChatFormat::kLlama3, kOneUser, /*gen=*/false),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplateTest, ChatMl) {
  EXPECT_EQ(Render(ChatFormat::kChatMl, kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nWho are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatFormat::kChatMl, kOneUser, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, Mistral) {
  EXPECT_EQ(Render(ChatFormat::kMistral, kConversation),
            "[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Who are you? [/INST]");
  EXPECT_EQ(Render(ChatFormat::kMistral, kOneUser), "[INST] Hi [/INST]");
}

TEST(ChatTemplateTest, Phi3) {
  EXPECT_EQ(Render(ChatFormat::kPhi3, kConversation),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
            "<|user|>\nWho are you?<|end|>\n<|assistant|>\n");
  EXPECT_EQ(Render(ChatFormat::kPhi3, kOneUser, false), "<|user|>\nHi<|end|>\n");
}

TEST(ChatTemplateTest, Gemma) {
  EXPECT_EQ(Render(ChatFormat::kGemma, kConversation),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nWho are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(Render(ChatFormat::kGemma, kOneUser, false), "<start_of_turn>user\nHi<end_of_turn>\n");
}

TEST(ChatTemplateTest, Zephyr) {
  EXPECT_EQ(Render(ChatFormat::kZephyr, kConversation),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
            "<|user|>\nWho are you?</s>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, Plain) {
  EXPECT_EQ(Render(ChatFormat::kPlain, kConversation),
            "System: Be brief.\nUser: Hi\nAssistant: Hello!\nUser: Who are you?\nAssistant:");
  EXPECT_EQ(Render(ChatFormat::kPlain, kOneUser, false), "User: Hi\n");
  EXPECT_EQ(ChatTemplate().format(), ChatFormat::kPlain);
}

TEST(ChatTemplateTest, SystemWithoutUserBecomesAUserTurn) {
  EXPECT_EQ(Render(ChatFormat::kMistral, {{"system", "S"}}), "[INST] S\n\n [/INST]");
  EXPECT_EQ(Render(ChatFormat::kGemma, {{"system", "S"}}),
            "<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplateTest, OtherRolesKeepTheirNameOnlyWhereTheFormatHasNames) {
  const std::vector<ChatMessage> m = {{"tool", "42"}};
  EXPECT_EQ(Render(ChatFormat::kChatMl, m, false), "<|im_start|>tool\n42<|im_end|>\n");
  EXPECT_EQ(Render(ChatFormat::kPhi3, m, false), "<|user|>\n42<|end|>\n");
}

// Excerpts with each family's distinctive markers (not whole templates).
TEST(ChatTemplateTest, DetectsTheCommonFormats) {
  struct Case {
    std::string jinja;
    ChatFormat want;
  };
  const std::vector<Case> cases = {
      {"", ChatFormat::kPlain},
      {"{% if messages[0]['role'] == 'system' %}{% set s = '<<SYS>>\\n' + m + '\\n<</SYS>>\\n\\n' "
       "%}{% endif %}{{ bos_token + '[INST] ' + c.strip() + ' [/INST]' }}",
       ChatFormat::kLlama2},
      {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
       "message['content'] | trim + '<|eot_id|>' }}",
       ChatFormat::kLlama3},
      {"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}",
       ChatFormat::kChatMl},
      {"{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + "
       "m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + eos_token }}{% endif %}",
       ChatFormat::kMistral},
      {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}",
       ChatFormat::kPhi3},
      {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
       ChatFormat::kGemma},
      {"{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}",
       ChatFormat::kZephyr},
  };
  for (const Case& c : cases) {
    Result<ChatTemplate> t = ChatTemplate::Detect(c.jinja);
    ASSERT_TRUE(t.ok()) << c.jinja << ": " << t.message();
    EXPECT_EQ(t->format(), c.want) << c.jinja;
  }
}

TEST(ChatTemplateTest, UnknownTemplateIsAnErrorNamingTheFormats) {
  Result<ChatTemplate> t = ChatTemplate::Detect("{{ messages | tojson }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("chatml"), std::string::npos) << t.message();
}

TEST(ChatTemplateTest, FromName) {
  for (std::string_view n : ChatTemplate::Names()) {
    Result<ChatTemplate> t = ChatTemplate::FromName(n);
    ASSERT_TRUE(t.ok()) << n;
    EXPECT_EQ(t->name(), n);
  }
  EXPECT_EQ(ChatTemplate::FromName("Qwen")->format(), ChatFormat::kChatMl);
  EXPECT_EQ(ChatTemplate::FromName("LLAMA-3")->format(), ChatFormat::kLlama3);
  Result<ChatTemplate> bad = ChatTemplate::FromName("vicuna");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'vicuna'"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace rotor
