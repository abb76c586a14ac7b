// rotor synth's new shapes: qwen2 and Llama 3 presets write files the model
// loads with the keys and tensors of their kind; the bundled vocabulary is
// padded to a real embedding size; greedy runs stay diverse.
#include "model/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/forward.h"
#include "greedy_run.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace rotor {
namespace {
namespace synth_test {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rotor_synth_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

const char* kVocab = ROTOR_MODELS_DIR "/ggml-vocab-llama-spm.gguf";

TEST(SynthPresets, Qwen25HasTheRealShapeAndPadsTheVocabulary) {
  SynthSpec s = *SynthPreset("qwen2.5-0.5b");
  EXPECT_EQ(s.arch, "qwen2");
  EXPECT_EQ(s.n_layer, 24);
  EXPECT_EQ(s.n_embd, 896);
  EXPECT_EQ(s.n_head, 14);
  EXPECT_EQ(s.n_head_kv, 2);
  EXPECT_EQ(s.n_ff, 4864);
  EXPECT_EQ(s.n_vocab, 151936);
  EXPECT_TRUE(s.tied_output);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FLOAT_EQ(s.rope_base, 1e6f);
  // A narrow copy (the real width only changes the matrices' sizes).
  s.n_layer = 1, s.n_embd = 64, s.n_ff = 128, s.n_head = 4, s.n_head_kv = 2;
  auto vocab = GgufFile::Open(kVocab);
  ASSERT_TRUE(vocab.ok()) << vocab.message();
  ThreadPool pool(2);
  const std::string path = TempPath("qwen25.gguf");
  ASSERT_TRUE(WriteSynthModel(s, vocab->get(), path, pool).ok());
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ((*m)->config().arch, "qwen2");
  EXPECT_EQ((*m)->config().n_vocab, 151936);
  EXPECT_NE((*m)->layer(0).bq, nullptr);
  EXPECT_TRUE((*m)->tied_output());
  auto tok = Tokenizer::FromGguf((*m)->file());
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ((*tok)->n_vocab(), 151936);
  // The padding is never produced by encoding and decodes to nothing.
  std::vector<int32_t> ids = (*tok)->Encode("Once upon a time <unused_40000>", true, true);
  for (int32_t id : ids) EXPECT_LT(id, 32000);
  EXPECT_EQ((*tok)->Decode(std::vector<int32_t>{40000}, false), "");
  std::filesystem::remove(path);

  // A vocabulary smaller than the file's is an error.
  s.n_vocab = 1000;
  Status st = WriteSynthModel(s, vocab->get(), path, pool);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("smaller than the vocabulary file's 32000"), std::string::npos)
      << st.message();
}

TEST(SynthPresets, Llama32CarriesLlama3RopeFactors) {
  SynthSpec s = *SynthPreset("llama3.2-1b");
  s.n_layer = 1, s.n_embd = 256, s.n_ff = 128, s.n_head = 4, s.n_head_kv = 2;  // head_dim 64
  ThreadPool pool(2);
  const std::string path = TempPath("llama32.gguf");
  ASSERT_TRUE(WriteSynthModel(s, nullptr, path, pool).ok());
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  // As a converted file: the tensor, and no rope.scaling keys (llama.cpp
  // refuses a rope.scaling.type of llama3).
  ASSERT_NE((*m)->file().FindTensor("rope_freqs.weight"), nullptr);
  EXPECT_FALSE((*m)->file().Has("llama.rope.scaling.type"));
  EXPECT_FALSE((*m)->file().Has("llama.rope.scaling.factor"));
  EXPECT_EQ(c.rope_freq_factors, Llama3FreqFactors(64, 500000.0, 32.0, 1.0, 4.0, 8192.0));
  std::filesystem::remove(path);

  // Without the tensor the keys say the same, and the logits agree.
  s.rope_freqs = false;
  const std::string keys_path = TempPath("llama32-keys.gguf");
  ASSERT_TRUE(WriteSynthModel(s, nullptr, keys_path, pool).ok());
  auto k = Model::Load(keys_path);
  ASSERT_TRUE(k.ok()) << k.message();
  EXPECT_EQ((*k)->file().FindTensor("rope_freqs.weight"), nullptr);
  EXPECT_EQ(*(*k)->file().GetString("llama.rope.scaling.type"), "llama3");
  EXPECT_EQ((*k)->config().rope_freq_factors, c.rope_freq_factors);
  std::filesystem::remove(keys_path);
}

// As for the Llama presets (model_load_test): with the real vocabulary, 64
// greedy tokens are not one token repeated (biases and tied output included).
TEST(SynthPresets, NewShapesKeepGreedyRunsDiverse) {
  auto vocab = GgufFile::Open(kVocab);
  ASSERT_TRUE(vocab.ok()) << vocab.message();
  ThreadPool pool(2);
  for (const char* preset : {"qwen2-tiny", "llama3-tiny"}) {
    const std::string path = TempPath(std::string(preset) + ".gguf");
    ASSERT_TRUE(WriteSynthModel(*SynthPreset(preset), vocab->get(), path, pool).ok());
    auto m = Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    const int distinct = testing::DistinctGreedyTokens(**m, pool);
    EXPECT_GE(distinct, 8) << preset << ": 64 greedy tokens used " << distinct << " distinct tokens";
    std::filesystem::remove(path);
  }
}

}  // namespace synth_test
}  // namespace
}  // namespace rotor
