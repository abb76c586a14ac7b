// The per-tensor rules against llama.cpp's choices for concrete tensors of a
// Llama-2-7B-like model (32 layers, rows of 4096) and of small models whose rows
// do not fit 256-element blocks.
#include "model/quantize_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rotor {
namespace {

using ::testing::HasSubstr;

const QuantModelInfo k7B{.n_layer = 32, .n_gqa = 1, .has_output = true};
const QuantModelInfo kGqa4{.n_layer = 32, .n_gqa = 4, .has_output = true};
const std::vector<int64_t> kMat = {4096, 4096};

QuantTarget T(std::string_view name) {
  Result<QuantTarget> t = ParseQuantTarget(name);
  EXPECT_TRUE(t.ok()) << t.message();
  return t.ok() ? *t : QuantTarget{};
}

DType Pick(std::string_view target, std::string_view tensor, const QuantModelInfo& m = k7B,
           std::vector<int64_t> ne = kMat, QuantRuleOptions o = {}) {
  return ChooseTensorType(T(target), m, o, tensor, ne, DType::kF32).type;
}

TEST(QuantizeRulesTest, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(T("q4_k_m").name, "Q4_K_M");
  EXPECT_EQ(T("Q4_K_M").file_type, FileType::kQ4_K_M);
  EXPECT_EQ(T("q4_K_m").type, DType::kQ4_K);
  EXPECT_EQ(T("F16").type, DType::kF16);
  EXPECT_EQ(T("iq4_NL").type, DType::kIQ4_NL);
  EXPECT_EQ(T("q2_k").file_type, FileType::kQ2_K);
  EXPECT_EQ(T("q6_K").file_type, FileType::kQ6_K);
  // llama.cpp's aliases.
  EXPECT_EQ(T("q4_K").file_type, FileType::kQ4_K_M);
  EXPECT_EQ(T("Q3_K").file_type, FileType::kQ3_K_M);
  EXPECT_EQ(T("q5_k").file_type, FileType::kQ5_K_M);
}

TEST(QuantizeRulesTest, FileTypesAreLlamaCppNumbers) {
  const std::vector<std::pair<std::string, uint32_t>> want = {
      {"f32", 0},     {"f16", 1},     {"q4_0", 2},    {"q4_1", 3},    {"q8_0", 7},
      {"q5_0", 8},    {"q5_1", 9},    {"Q2_K", 10},   {"Q3_K_S", 11}, {"Q3_K_M", 12},
      {"Q3_K_L", 13}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17},
      {"Q6_K", 18},   {"iq4_nl", 25}, {"bf16", 32}};
  for (const auto& [name, ft] : want)
    EXPECT_EQ(static_cast<uint32_t>(T(name).file_type), ft) << name;
}

TEST(QuantizeRulesTest, UnknownNameListsTheValidOnes) {
  Result<QuantTarget> t = ParseQuantTarget("q7_K");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.message(), HasSubstr("unknown type 'q7_K'"));
  for (const char* n : {"f32", "bf16", "q8_0", "q4_1", "iq4_nl", "Q2_K", "Q4_K_M", "Q6_K"})
    EXPECT_THAT(t.message(), HasSubstr(n));
}

TEST(QuantizeRulesTest, UseMoreBitsMatchesLlamaCpp) {
  std::vector<int> more;
  for (int i = 0; i < 32; ++i)
    if (UseMoreBits(i, 32)) more.push_back(i);
  EXPECT_EQ(more, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  EXPECT_TRUE(UseMoreBits(0, 8));
  EXPECT_FALSE(UseMoreBits(0, 5));  // n/8 = 0: stories260K's layer 0 gets no bonus
  EXPECT_EQ(LayerOf("blk.17.attn_v.weight"), 17);
  EXPECT_EQ(LayerOf("token_embd.weight"), -1);
  EXPECT_EQ(LayerOf("blk.x.attn_v.weight"), -1);
}

TEST(QuantizeRulesTest, Q4KM) {
  EXPECT_EQ(Pick("Q4_K_M", "blk.0.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.4.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.6.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.31.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.0.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.5.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.0.attn_q.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_M", "blk.0.ffn_up.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_M", "token_embd.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_M", "output.weight"), DType::kQ6_K);
  TensorChoice norm =
      ChooseTensorType(T("Q4_K_M"), k7B, {}, "blk.0.attn_norm.weight", {4096}, DType::kF32);
  EXPECT_FALSE(norm.convert);
  EXPECT_EQ(norm.type, DType::kF32);
  EXPECT_FALSE(
      ChooseTensorType(T("Q4_K_M"), k7B, {}, "blk.0.attn_q.bias", {4096, 1}, DType::kF32).convert);
  // A weight of one row is 1-D for llama.cpp (ggml_n_dims): copied as it is.
  EXPECT_FALSE(
      ChooseTensorType(T("Q4_K_M"), k7B, {}, "blk.0.extra.weight", {256, 1}, DType::kF32).convert);
  EXPECT_TRUE(
      ChooseTensorType(T("Q4_K_M"), k7B, {}, "blk.0.extra.weight", {256, 2}, DType::kF32).convert);
}

TEST(QuantizeRulesTest, OtherMixes) {
  EXPECT_EQ(Pick("Q5_K_M", "blk.0.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("Q5_K_M", "blk.5.ffn_down.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q5_K_S", "blk.0.attn_v.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q4_K_S", "blk.3.attn_v.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q4_K_S", "blk.4.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q4_K_S", "blk.3.ffn_down.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q4_K_S", "blk.4.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.1.attn_v.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.2.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.1.ffn_down.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.2.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.2.attn_output.weight"), DType::kQ4_K);
  EXPECT_EQ(Pick("Q3_K_M", "blk.2.attn_q.weight"), DType::kQ3_K);
  EXPECT_EQ(Pick("Q3_K_L", "blk.9.attn_output.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("Q3_K_S", "blk.0.attn_v.weight"), DType::kQ3_K);
  EXPECT_EQ(Pick("Q2_K", "blk.0.attn_v.weight"), DType::kQ3_K);
  EXPECT_EQ(Pick("Q2_K", "blk.0.attn_v.weight", kGqa4), DType::kQ4_K);
  EXPECT_EQ(Pick("Q2_K", "blk.0.ffn_down.weight"), DType::kQ3_K);
  EXPECT_EQ(Pick("Q2_K", "blk.0.attn_output.weight"), DType::kQ3_K);
  EXPECT_EQ(Pick("Q2_K", "blk.0.ffn_up.weight"), DType::kQ2_K);
  EXPECT_EQ(Pick("Q6_K", "blk.0.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("iq4_nl", "blk.0.attn_v.weight", kGqa4), DType::kQ5_K);
  EXPECT_EQ(Pick("iq4_nl", "blk.0.ffn_down.weight"), DType::kQ5_K);
  EXPECT_EQ(Pick("iq4_nl", "blk.4.ffn_down.weight"), DType::kIQ4_NL);
  // 80 layers (70B): attn_v gets q5_K where the mix said q4_K.
  const QuantModelInfo k70B{.n_layer = 80, .n_gqa = 8, .has_output = true};
  EXPECT_EQ(Pick("Q4_K_S", "blk.40.attn_v.weight", k70B), DType::kQ5_K);
  // llama.cpp types an 80-layer llama without GQA as 65B (LLaMA-1): no bonus
  // there; Qwen2's 80 layers are 70B with or without it.
  const QuantModelInfo k65B{.n_layer = 80, .n_gqa = 1, .has_output = true};
  EXPECT_EQ(Pick("Q4_K_S", "blk.40.attn_v.weight", k65B), DType::kQ4_K);
  EXPECT_EQ(Pick("Q2_K", "blk.40.attn_v.weight", k65B), DType::kQ3_K);
  const QuantModelInfo qwen80{.n_layer = 80, .n_gqa = 1, .has_output = true, .arch = "qwen2"};
  EXPECT_EQ(Pick("Q4_K_S", "blk.40.attn_v.weight", qwen80), DType::kQ5_K);
}

TEST(QuantizeRulesTest, OutputTensor) {
  EXPECT_EQ(Pick("q4_0", "output.weight"), DType::kQ6_K);
  EXPECT_EQ(Pick("q8_0", "output.weight"), DType::kQ8_0);
  EXPECT_EQ(Pick("q4_0", "token_embd.weight"), DType::kQ4_0);
  // Tied output: the embeddings take the output's type.
  const QuantModelInfo tied{.n_layer = 32, .n_gqa = 1, .has_output = false};
  EXPECT_EQ(Pick("Q4_K_M", "token_embd.weight", tied), DType::kQ6_K);
  // Rows that do not fit 256: q8_0.
  EXPECT_EQ(Pick("Q4_K_M", "output.weight", k7B, {64, 512}), DType::kQ8_0);
  // --pure and --leave-output.
  EXPECT_EQ(Pick("q4_0", "output.weight", k7B, kMat, {.pure = true}), DType::kQ4_0);
  EXPECT_EQ(Pick("Q4_K_M", "blk.0.attn_v.weight", k7B, kMat, {.pure = true}), DType::kQ4_K);
  TensorChoice left = ChooseTensorType(T("Q4_K_M"), k7B, {.leave_output = true}, "output.weight",
                                       kMat, DType::kF16);
  EXPECT_FALSE(left.convert);
  EXPECT_EQ(left.type, DType::kF16);
  // Float targets: no rules.
  EXPECT_EQ(Pick("f16", "output.weight"), DType::kF16);
  EXPECT_EQ(Pick("bf16", "blk.0.attn_v.weight"), DType::kBF16);
}

TEST(QuantizeRulesTest, FallbacksWhenRowsDoNotFitTheBlock) {
  auto choice = [](std::string_view target, int64_t ne0, QuantRuleOptions o = {}) {
    return ChooseTensorType(T(target), k7B, o, "blk.4.attn_q.weight", {ne0, 64}, DType::kF32);
  };
  TensorChoice c = choice("Q4_K_M", 64);
  EXPECT_EQ(c.type, DType::kQ5_0);
  ASSERT_TRUE(c.fallback_from.has_value());
  EXPECT_EQ(*c.fallback_from, DType::kQ4_K);
  EXPECT_EQ(choice("Q5_K_S", 64).type, DType::kQ5_1);
  EXPECT_EQ(choice("Q6_K", 64).type, DType::kQ8_0);
  EXPECT_EQ(choice("Q2_K", 64).type, DType::kIQ4_NL);
  EXPECT_EQ(choice("Q3_K_S", 96).type, DType::kIQ4_NL);
  EXPECT_EQ(choice("Q4_K_M", 172).type, DType::kF16);  // q5_0 does not fit 172 either
  EXPECT_EQ(choice("q8_0", 172).type, DType::kF16);
  EXPECT_EQ(choice("q4_K", 64, {.pure = true}).type, DType::kQ5_0);
  EXPECT_FALSE(choice("q8_0", 64).fallback_from.has_value());
  EXPECT_EQ(choice("f16", 172).type, DType::kF16);
}

TEST(QuantizeRulesTest, SameTypeIsCopied) {
  TensorChoice c = ChooseTensorType(T("q8_0"), k7B, {}, "blk.0.attn_q.weight", kMat, DType::kQ8_0);
  EXPECT_FALSE(c.convert);
  EXPECT_EQ(c.type, DType::kQ8_0);
}

}  // namespace
}  // namespace rotor
