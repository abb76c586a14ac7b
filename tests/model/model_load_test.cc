// Loading: hyper-parameters, validation errors that name the key or tensor,
// and random-weight models of every type against their f32 original.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/forward.h"
#include "greedy_run.h"
#include "model/model.h"
#include "model/synth.h"
#include "run_tokens.h"

namespace rotor {
namespace {
namespace model_load_test {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";

std::string TempPath(const std::string& name) {
  // The pid keeps parallel runs (ctest -j, other checkouts) apart.
  return (std::filesystem::temp_directory_path() /
          ("rotor_model_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Copies stories260K through `edit`, which may change keys and tensors, and loads the result.
// Tensors named in `drop` are left out (edit may add replacements).
Result<std::unique_ptr<Model>> LoadEdited(const std::function<void(GgufWriter&)>& edit,
                                          const std::string& drop = "") {
  auto src = GgufFile::Open(kModel);
  EXPECT_TRUE(src.ok());
  GgufWriter w;
  w.CopyMetadata(**src);
  edit(w);
  for (const GgufTensor& t : (*src)->tensors()) {
    if (t.name != drop) {
      EXPECT_TRUE(w.AddTensorView(t.name, t.type, t.ne, t.data, t.n_bytes).ok());
    }
  }
  auto bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(std::move(*bytes), "edited.gguf");
  if (!file.ok()) return file.status();
  return Model::FromGguf(std::move(*file));
}

TEST(ModelLoad, Stories260KHyperParameters) {
  auto m = Model::Load(kModel);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_ctx_train, 512);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE((*m)->tied_output());
}

TEST(ModelLoad, MissingFile) {
  auto m = Model::Load("/nonexistent/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("/nonexistent/model.gguf"), std::string::npos) << m.message();
}

TEST(ModelLoad, UnknownArchitectureIsRefusedByName) {
  auto m = LoadEdited([](GgufWriter& w) {
    w.SetString("general.architecture", "mamba");
  });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'mamba'"), std::string::npos) << m.message();
}

TEST(ModelLoad, MissingKeyIsNamed) {
  auto m = LoadEdited([](GgufWriter& w) { w.Remove("llama.block_count"); });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("llama.block_count"), std::string::npos) << m.message();
}

TEST(ModelLoad, MissingTensorIsNamed) {
  auto m = LoadEdited([](GgufWriter&) {}, "blk.3.ffn_up.weight");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("missing tensor 'blk.3.ffn_up.weight'"), std::string::npos)
      << m.message();
}

TEST(ModelLoad, ShapeDisagreeingWithHyperParametersIsNamed) {
  auto m = LoadEdited([](GgufWriter& w) {
    w.SetU32("llama.feed_forward_length", 128);
  });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("blk.0.ffn_gate.weight"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("expected [64, 128]"), std::string::npos) << m.message();
}

TEST(ModelLoad, HeadCountsMustDivide) {
  auto m = LoadEdited([](GgufWriter& w) {
    w.SetU32("llama.attention.head_count_kv", 3);
  });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("head_count_kv 3"), std::string::npos) << m.message();
}

TEST(ModelLoad, UnsupportedTensorTypeIsNamed) {
  std::vector<uint8_t> q81(64 * 2 * 36);  // 64 rows of 64 q8_1 values
  auto m = LoadEdited(
      [&](GgufWriter& w) {
        EXPECT_TRUE(
            w.AddTensor("blk.0.attn_q.weight", DType::kQ8_1, {64, 64}, q81.data(), q81.size()).ok());
      },
      "blk.0.attn_q.weight");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'blk.0.attn_q.weight' has type q8_1"), std::string::npos)
      << m.message();
}

// Logits of the last token of a fixed prompt.
std::vector<float> LastLogits(const std::string& path, const std::vector<int32_t>& prompt) {
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.message();
  ThreadPool pool(2);
  Forward fwd(**m, pool, 64);
  auto cache = KvCache::Create((*m)->config().kv_shape(128), KvConfig{.types = {KvType::kF32, KvType::kF32}});
  std::vector<float> logits((*m)->config().n_vocab);
  EXPECT_TRUE(testing::RunTokens(**m, **cache, prompt, 0, LogitsWanted::kLast, logits.data()).ok());
  return logits;
}

// The same random weights stored in each type give logits close to f32.
// Bound on the RMS logit error relative to the logits' spread (std). Per
// matmul the relative RMS error is: f16 2^-11/sqrt(3) ~ 3e-4, bf16 2^-8/sqrt(3)
// ~ 2.3e-3, q8_0 (weights and activations on a 1/127-of-block-max grid,
// uniform values) ~ 2 x 1/(127 sqrt(12)) x sqrt(3) ~ 4e-3, q4_0 (a 1/8 grid)
// ~ 1/(8 sqrt(12)) x sqrt(3) ~ 6e-2. About 10 matmuls in series add up
// roughly as sqrt(10) ~ 3.2x; the bounds below leave ~2x on top of that.
TEST(ModelLoad, QuantizedSynthModelsTrackF32) {
  ThreadPool pool(2);
  SynthSpec spec;
  spec.n_embd = 128, spec.n_ff = 256, spec.n_layer = 2, spec.n_head = 8, spec.n_head_kv = 2;
  spec.n_vocab = 300;
  std::vector<int32_t> prompt = {1, 100, 200, 150, 7, 42, 299, 3};
  spec.type = DType::kF32;
  ASSERT_TRUE(WriteSynthModel(spec, nullptr, TempPath("f32.gguf"), pool).ok());
  std::vector<float> ref = LastLogits(TempPath("f32.gguf"), prompt);
  double mean = 0, var = 0;
  for (float v : ref) mean += v / ref.size();
  for (float v : ref) var += (v - mean) * (v - mean) / ref.size();
  const double spread = std::sqrt(var);
  ASSERT_GT(spread, 0.1);
  struct Case { DType type; double bound; };
  // The other block types: bounds ~2x what they measured. With n_embd = 128
  // the K-quants keep only ffn_down (k = 256); the other matrices take
  // llama-quantize's fallbacks (iq4_nl, q5_0, q5_1, q8_0).
  for (Case c : {Case{DType::kF16, 0.002}, Case{DType::kBF16, 0.015}, Case{DType::kQ8_0, 0.03},
                 Case{DType::kQ4_0, 0.4}, Case{DType::kQ4_1, 0.3}, Case{DType::kQ5_0, 0.15},
                 Case{DType::kQ5_1, 0.15}, Case{DType::kIQ4_NL, 0.3}, Case{DType::kQ2_K, 0.35},
                 Case{DType::kQ3_K, 0.3}, Case{DType::kQ4_K, 0.15}, Case{DType::kQ5_K, 0.12},
                 Case{DType::kQ6_K, 0.03}}) {
    spec.type = c.type;
    const std::string path = TempPath(std::string(DTypeName(c.type)) + ".gguf");
    ASSERT_TRUE(WriteSynthModel(spec, nullptr, path, pool).ok());
    std::vector<float> got = LastLogits(path, prompt);
    double sq = 0;
    for (size_t i = 0; i < ref.size(); ++i) sq += (got[i] - ref[i]) * (got[i] - ref[i]);
    const double rms = std::sqrt(sq / ref.size());
    EXPECT_LT(rms / spread, c.bound) << DTypeName(c.type);
    std::printf("%-6s relative rms logit error %.4f\n", std::string(DTypeName(c.type)).c_str(),
                rms / spread);
    EXPECT_GT(rms, 0.0) << DTypeName(c.type) << ": identical logits, the type was not applied";
    std::filesystem::remove(path);
  }
  std::filesystem::remove(TempPath("f32.gguf"));
}

// Files mixing types per tensor load and run: synth gives rows the K-quant
// blocks cannot hold llama-quantize's fallback type.
TEST(ModelLoad, MixedTypeFilesLoadAndTrackF32) {
  ThreadPool pool(2);
  SynthSpec spec;
  spec.n_embd = 256, spec.n_layer = 2, spec.n_head = 8, spec.n_head_kv = 2, spec.n_vocab = 300;
  const std::vector<int32_t> prompt = {1, 100, 200, 150, 7, 42, 299, 3};
  struct Case { DType type; int n_ff; DType down; double bound; };
  for (Case c : {Case{DType::kQ4_K, 288, DType::kQ5_0, 0.3}, Case{DType::kQ6_K, 288, DType::kQ8_0, 0.07},
                 Case{DType::kQ2_K, 176, DType::kF16, 1.0}, Case{DType::kQ3_K, 288, DType::kIQ4_NL, 0.6}}) {
    SCOPED_TRACE(DTypeName(c.type));
    spec.n_ff = c.n_ff;
    spec.type = DType::kF32;
    ASSERT_TRUE(WriteSynthModel(spec, nullptr, TempPath("mixed_f32.gguf"), pool).ok());
    const std::vector<float> ref = LastLogits(TempPath("mixed_f32.gguf"), prompt);
    spec.type = c.type;
    const std::string path = TempPath("mixed.gguf");
    ASSERT_TRUE(WriteSynthModel(spec, nullptr, path, pool).ok());
    {
      auto file = GgufFile::Open(path);
      ASSERT_TRUE(file.ok()) << file.message();
      EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight")->type, c.type);
      EXPECT_EQ((*file)->FindTensor("blk.1.ffn_up.weight")->type, c.type);
      EXPECT_EQ((*file)->FindTensor("blk.0.ffn_down.weight")->type, c.down);
      EXPECT_EQ((*file)->FindTensor("attn_norm.weight") == nullptr, true);
    }
    const std::vector<float> got = LastLogits(path, prompt);
    double mean = 0, var = 0, sq = 0;
    for (float v : ref) mean += v / ref.size();
    for (float v : ref) var += (v - mean) * (v - mean) / ref.size();
    for (size_t i = 0; i < ref.size(); ++i) sq += (got[i] - ref[i]) * (got[i] - ref[i]);
    EXPECT_LT(std::sqrt(sq / ref.size()) / std::sqrt(var), c.bound);
    std::printf("%-6s mixed: relative rms logit error %.4f\n",
                std::string(DTypeName(c.type)).c_str(), std::sqrt(sq / ref.size() / var));
    EXPECT_GT(sq, 0.0);
    std::filesystem::remove(path);
    std::filesystem::remove(TempPath("mixed_f32.gguf"));
  }
}

}  // namespace model_load_test
}  // namespace
}  // namespace rotor

namespace rotor {
namespace {
namespace model_load_test {

// rotor synth's weights keep a greedy run alive: with the real Llama-2
// vocabulary, 64 greedy tokens are not one token repeated.
TEST(Synth, GreedyRunIsNotDegenerate) {
  ThreadPool pool(2);
  auto vocab = GgufFile::Open(ROTOR_MODELS_DIR "/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.message();
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    SynthSpec spec;
    spec.n_embd = 128, spec.n_ff = 256, spec.n_layer = 2, spec.n_head = 4, spec.n_head_kv = 2;
    spec.type = type;
    const std::string path = TempPath("synth_vocab.gguf");
    ASSERT_TRUE(WriteSynthModel(spec, vocab->get(), path, pool).ok());
    auto m = Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_EQ((*m)->config().n_vocab, 32000);
    const int distinct = testing::DistinctGreedyTokens(**m, pool);
    EXPECT_GE(distinct, 8) << DTypeName(type) << ": 64 greedy tokens used " << distinct << " distinct tokens";
    std::filesystem::remove(path);
  }
}

}  // namespace model_load_test
}  // namespace
}  // namespace rotor
