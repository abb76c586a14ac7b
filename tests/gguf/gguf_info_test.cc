#include "gguf/gguf_info.h"

#include <gtest/gtest.h>

#include "gguf/gguf_writer.h"

namespace rotor {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(GgufInfo, Stories260K) {
  auto f = GgufFile::Open(std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  const std::string s = FormatGgufInfo(**f);
  EXPECT_TRUE(Contains(s, "version:     3\n")) << s;
  EXPECT_TRUE(Contains(s, "alignment:   32\n")) << s;
  EXPECT_TRUE(Contains(s, "file size:   1185376 bytes (1.13 MiB)\n")) << s;
  EXPECT_TRUE(Contains(s, "metadata:    19 keys\n")) << s;
  EXPECT_TRUE(Contains(s, "array   [512 x string] \"<unk>\", \"<s>\", \"</s>\", ...\n")) << s;
  EXPECT_TRUE(Contains(s, "[512 x f32] 0, 0, 0, ...")) << s;
  EXPECT_TRUE(Contains(s, "  general.architecture                    string  \"llama\"\n")) << s;
  EXPECT_TRUE(Contains(s, "  llama.context_length                    u32     512\n")) << s;
  EXPECT_TRUE(Contains(s, "layer_norm_rms_epsilon  f32     1e-05\n")) << s;
  EXPECT_TRUE(Contains(s, "tokenizer.ggml.seperator_token_id       u32     4294967295\n")) << s;
  EXPECT_TRUE(Contains(
      s, "      0  token_embd.weight         f32     [64, 512]        131072             0\n"))
      << s;
  EXPECT_TRUE(Contains(s, "  blk.2.ffn_down.weight     f32     [172, 64]")) << s;
  EXPECT_TRUE(Contains(s, "total: 48 tensors, 1171200 bytes (1.12 MiB), 292800 parameters\n")) << s;

  InfoOptions brief{.max_array_items = 1, .metadata = false, .tensors = false};
  const std::string b = FormatGgufInfo(**f, brief);
  EXPECT_FALSE(Contains(b, "token_embd.weight")) << b;
  EXPECT_FALSE(Contains(b, "general.architecture")) << b;
  EXPECT_TRUE(Contains(b, "total: 48 tensors")) << b;
}

TEST(GgufInfo, ValuesAreAbbreviatedAndEscaped) {
  const std::string long_template(5000, 'x');
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(long_template)),
            "\"" + std::string(64, 'x') + "\"... (5000 bytes)");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of("a\"b\\c\nd\x01")), "\"a\\\"b\\\\c\\nd\\x01\"");
  // Cut at a character boundary: 63 ASCII bytes then a 3-byte character.
  const std::string utf8 = std::string(63, 'a') + "\xe2\x96\x81" + "tail";
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(utf8)), "\"" + std::string(63, 'a') + "\"... (70 bytes)");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(true)), "true");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(int8_t{-5})), "-5");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(~0ull)), "18446744073709551615");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(0.1f)), "0.1");
  EXPECT_EQ(FormatGgufValue(GgufValue::Of(0.1)), "0.1");
  EXPECT_EQ(FormatGgufValue(GgufValue::ArrayOf(std::vector<int32_t>{1, 2})), "[2 x i32] 1, 2");
  EXPECT_EQ(FormatGgufValue(GgufValue::ArrayOf(std::vector<float>{})), "[0 x f32]");
  EXPECT_EQ(FormatGgufValue(GgufValue::ArrayOf(std::vector<uint64_t>{~0ull})),
            "[1 x u64] 18446744073709551615");
  const bool bools[] = {true, false, true, true};
  EXPECT_EQ(FormatGgufValue(GgufValue::ArrayOf(std::span<const bool>(bools))),
            "[4 x bool] true, false, true, ...");
  GgufValue nested =
      GgufValue::ArrayOfArrays({GgufValue::ArrayOf(std::vector<uint8_t>{1, 2, 3, 4}),
                                GgufValue::StringArray(std::vector<std::string>{"x"})});
  EXPECT_EQ(FormatGgufValue(nested), "[2 x array] [[4 x u8] 1, 2, 3, ...], [[1 x string] \"x\"]");
  InfoOptions none{.max_array_items = 0};
  EXPECT_EQ(FormatGgufValue(nested, none), "[2 x array] ...");
}

TEST(GgufInfo, VocabOnlyFileHasNoTensorTable) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.chat_template", std::string(300, '{'));
  auto bytes = w.WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  auto f = GgufFile::FromBytes(std::move(bytes).value(), "vocab.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  const std::string s = FormatGgufInfo(**f);
  EXPECT_TRUE(Contains(s, "file:        vocab.gguf\n")) << s;
  EXPECT_TRUE(Contains(s, "... (300 bytes)")) << s;
  EXPECT_FALSE(Contains(s, "\ntensors:\n")) << s;
  EXPECT_TRUE(Contains(s, "total: 0 tensors, 0 bytes (0 B), 0 parameters")) << s;
}

}  // namespace
}  // namespace rotor
