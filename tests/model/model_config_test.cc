// Architectures and RoPE variants from GGUF keys: qwen2, Llama 3 frequency
// factors (tensor or keys), linear scaling, partial rotary, sliding-window
// files, and the refusals that name what they refuse.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "gguf/gguf_writer.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "run_tokens.h"

namespace rotor {
namespace {
namespace model_config_test {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rotor_model_config_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A small random model of a preset (vocabulary 300), written once per name.
const std::string& SynthPath(const std::string& preset) {
  static std::map<std::string, std::string> paths;
  static const struct Remover {
    ~Remover() {
      for (const auto& [n, p] : paths) std::filesystem::remove(p);
    }
  } remover;
  auto it = paths.find(preset);
  if (it != paths.end()) return it->second;
  SynthSpec s = *SynthPreset(preset);
  s.n_vocab = 300;
  ThreadPool pool(2);
  const std::string p = TempPath(preset + ".gguf");
  EXPECT_TRUE(WriteSynthModel(s, nullptr, p, pool).ok());
  return paths[preset] = p;
}

// Copies `path` through `edit` (keys) leaving out the tensors in `drop`.
Result<std::unique_ptr<Model>> LoadEdited(const std::string& path,
                                          const std::function<void(GgufWriter&)>& edit,
                                          const std::vector<std::string>& drop = {}) {
  auto src = GgufFile::Open(path);
  EXPECT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.CopyMetadata(**src);
  edit(w);
  for (const GgufTensor& t : (*src)->tensors())
    if (std::find(drop.begin(), drop.end(), t.name) == drop.end()) {
      EXPECT_TRUE(w.AddTensorView(t.name, t.type, t.ne, t.data, t.n_bytes).ok());
    }
  auto bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(std::move(*bytes), "edited.gguf");
  if (!file.ok()) return file.status();
  return Model::FromGguf(std::move(*file));
}

void ExpectError(const Result<std::unique_ptr<Model>>& m, const std::vector<std::string>& parts) {
  ASSERT_FALSE(m.ok());
  for (const std::string& p : parts)
    EXPECT_NE(m.message().find(p), std::string::npos) << "'" << p << "' not in: " << m.message();
}

std::vector<float> LastLogits(const Model& m, int n = 60) {
  ThreadPool pool(2);
  Forward fwd(m, pool, 64, 128);
  auto cache = std::move(KvCache::Create(m.config().kv_shape(128), KvConfig{.types = {KvType::kF32, KvType::kF32}})).value();
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < n; ++i) prompt.push_back(3 + (i * 37) % 290);
  std::vector<float> logits(m.config().n_vocab);
  EXPECT_TRUE(testing::RunTokens(m, *cache, prompt, 0, LogitsWanted::kLast, logits.data()).ok());
  return logits;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

TEST(ModelConfig, UnknownArchitecturesAreRefusedNamingThemAndTheSupportedOnes) {
  for (const char* arch : {"gpt2", "falcon"}) {
    auto m = LoadEdited(SynthPath("qwen2-tiny"),
                        [&](GgufWriter& w) { w.SetString("general.architecture", arch); });
    ExpectError(m, {fmt::format("architecture '{}' is not supported", arch), "llama, qwen2"});
  }
}

TEST(ModelConfig, Qwen2) {
  auto m = Model::Load(SynthPath("qwen2-tiny"));
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.rope_layout, ops::RopeLayout::kNeox);
  EXPECT_TRUE(c.permute_qk());
  EXPECT_EQ(c.rope().layout, ops::RopeLayout::kNormal);  // Q/K are permuted at projection
  EXPECT_FLOAT_EQ(c.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_TRUE(c.rope_freq_factors.empty());
  EXPECT_TRUE((*m)->tied_output());
  for (int il = 0; il < c.n_layer; ++il) {
    EXPECT_NE((*m)->layer(il).bq, nullptr);
    EXPECT_NE((*m)->layer(il).bk, nullptr);
    EXPECT_NE((*m)->layer(il).bv, nullptr);
  }
  // Neither the pairing nor the biases are inert: each changes the logits.
  const std::vector<float> base = LastLogits(**m);
  auto as_llama = LoadEdited(SynthPath("qwen2-tiny"), [](GgufWriter& w) {
    auto src = GgufFile::Open(SynthPath("qwen2-tiny"));
    w.SetString("general.architecture", "llama");
    for (const GgufKv& kv : (*src)->metadata())
      if (kv.key.rfind("qwen2.", 0) == 0) w.Set("llama." + kv.key.substr(6), kv.value);
  });
  ASSERT_TRUE(as_llama.ok()) << as_llama.message();
  EXPECT_EQ((*as_llama)->config().rope_layout, ops::RopeLayout::kNormal);
  EXPECT_GT(MaxDiff(base, LastLogits(**as_llama)), 1e-2);
  std::vector<std::string> biases;
  for (int il = 0; il < c.n_layer; ++il)
    for (const char* t : {"q", "k", "v"})
      biases.push_back(fmt::format("blk.{}.attn_{}.bias", il, t));
  auto no_bias = LoadEdited(
      SynthPath("qwen2-tiny"), [](GgufWriter&) {}, biases);
  ASSERT_TRUE(no_bias.ok()) << no_bias.message();
  EXPECT_EQ((*no_bias)->layer(0).bq, nullptr);
  EXPECT_GT(MaxDiff(base, LastLogits(**no_bias)), 1e-2);
}

TEST(ModelConfig, BiasTheGraphCannotApplyIsRefused) {
  std::vector<float> b(128, 0.f);
  auto m = LoadEdited(SynthPath("qwen2-tiny"), [&](GgufWriter& w) {
    EXPECT_TRUE(w.AddTensor("blk.1.attn_output.bias", DType::kF32, {128}, b.data(), 512).ok());
  });
  ExpectError(m, {"blk.1.attn_output.bias", "not supported"});
  auto wrong = LoadEdited(
      SynthPath("qwen2-tiny"),
      [&](GgufWriter& w) {
        EXPECT_TRUE(w.AddTensor("blk.0.attn_k.bias", DType::kF32, {128}, b.data(), 512).ok());
      },
      {"blk.0.attn_k.bias"});
  ExpectError(wrong, {"blk.0.attn_k.bias", "expected [64]"});
}

TEST(ModelConfig, Llama3FreqFactorsFollowTheLlama31Rule) {
  // Llama 3.2 1B: base 500000, 64 pairs, factor 32, low 1, high 4, context 8192.
  const std::vector<float> ff = Llama3FreqFactors(64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
  ASSERT_EQ(ff.size(), 32u);
  int n_one = 0, n_full = 0, n_mid = 0;
  for (size_t i = 0; i < ff.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(ff[i], ff[i - 1]);
    }
    const double wavelen = 2 * M_PI * std::pow(500000.0, 2.0 * i / 64);
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(ff[i], 1.0f) << i;
      ++n_one;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(ff[i], 32.0f) << i;
      ++n_full;
    } else {  // new_freq = (1 - s) freq / 32 + s freq, s = (8192 / wavelen - 1) / 3
      const double s = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_NEAR(ff[i], 1.0 / ((1 - s) / 32 + s), 1e-4) << i;
      EXPECT_GT(ff[i], 1.0f);
      EXPECT_LT(ff[i], 32.0f);
      ++n_mid;
    }
  }
  EXPECT_GT(n_one, 0);
  EXPECT_GT(n_full, 0);
  EXPECT_GT(n_mid, 0);
}

// The rope.scaling keys of a Llama 3.1 configuration (llama3-tiny's).
void SetLlama3Keys(GgufWriter& w) {
  w.SetString("llama.rope.scaling.type", "llama3");
  w.SetF32("llama.rope.scaling.factor", 8.f);
  w.SetF32("llama.rope.scaling.low_freq_factor", 1.f);
  w.SetF32("llama.rope.scaling.high_freq_factor", 4.f);
  w.SetU32("llama.rope.scaling.original_context_length", 64);
}

TEST(ModelConfig, Llama3FactorsFromTensorOrKeysAgreeAndMatter) {
  // As converted Llama 3.1+ files: rope_freqs.weight, no rope.scaling keys.
  const std::string path = SynthPath("llama3-tiny");
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  EXPECT_FALSE((*m)->file().Has("llama.rope.scaling.type"));
  ASSERT_EQ(c.rope_freq_factors.size(), 16u);
  EXPECT_EQ(c.rope().freq_factors, c.rope_freq_factors.data());
  const GgufTensor* t = (*m)->file().FindTensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(c.rope_freq_factors[i], reinterpret_cast<const float*>(t->data)[i]);
  EXPECT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_EQ(c.rope_freq_factors.back(), 8.0f);

  // The keys instead of the tensor give the same factors and the same logits.
  auto keys = LoadEdited(path, SetLlama3Keys, {"rope_freqs.weight"});
  ASSERT_TRUE(keys.ok()) << keys.message();
  EXPECT_EQ((*keys)->config().rope_scaling, "llama3");
  EXPECT_FLOAT_EQ((*keys)->config().rope_scale, 8.f);
  ASSERT_EQ((*keys)->config().rope_freq_factors.size(), 16u);
  for (int i = 0; i < 16; ++i)
    EXPECT_NEAR((*keys)->config().rope_freq_factors[i], c.rope_freq_factors[i], 1e-6) << i;
  EXPECT_LT(MaxDiff(LastLogits(**m), LastLogits(**keys)), 1e-5);
  // ... which need the original context length.
  ExpectError(LoadEdited(path,
                         [](GgufWriter& w) {
                           SetLlama3Keys(w);
                           w.Remove("llama.rope.scaling.original_context_length");
                         },
                         {"rope_freqs.weight"}),
              {"llama.rope.scaling.original_context_length"});
  // With the tensor and the keys, the tensor's factors are used.
  auto both = LoadEdited(path, [](GgufWriter& w) {
    SetLlama3Keys(w);
    w.Remove("llama.rope.scaling.factor");
  });
  ASSERT_TRUE(both.ok()) << both.message();
  EXPECT_EQ((*both)->config().rope_freq_factors, c.rope_freq_factors);
  ExpectError(LoadEdited(path,
                         [](GgufWriter& w) {
                           SetLlama3Keys(w);
                           w.Remove("llama.rope.scaling.factor");
                         },
                         {"rope_freqs.weight"}),
              {"llama.rope.scaling.factor", "must be >= 1"});
  // Dropping the factors changes the logits.
  auto plain = LoadEdited(path, [](GgufWriter&) {}, {"rope_freqs.weight"});
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_TRUE((*plain)->config().rope_freq_factors.empty());
  EXPECT_GT(MaxDiff(LastLogits(**m), LastLogits(**plain)), 1e-2);
}

TEST(ModelConfig, LinearScalingDividesPositions) {
  const std::string path = SynthPath("qwen2-tiny");
  auto lin = LoadEdited(path, [](GgufWriter& w) {
    w.SetString("qwen2.rope.scaling.type", "linear");
    w.SetF32("qwen2.rope.scaling.factor", 4.f);
  });
  ASSERT_TRUE(lin.ok()) << lin.message();
  EXPECT_EQ((*lin)->config().rope_freq_factors, std::vector<float>(16, 4.f));
  // The older key means the same.
  auto old = LoadEdited(path, [](GgufWriter& w) { w.SetF32("qwen2.rope.scale_linear", 4.f); });
  ASSERT_TRUE(old.ok()) << old.message();
  EXPECT_EQ((*old)->config().rope_freq_factors, std::vector<float>(16, 4.f));
  EXPECT_EQ((*old)->config().rope_scaling, "linear");
  // Linear on top of rope_freqs.weight multiplies.
  auto both = LoadEdited(SynthPath("llama3-tiny"), [](GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "linear");
    w.SetF32("llama.rope.scaling.factor", 2.f);
  });
  ASSERT_TRUE(both.ok()) << both.message();
  EXPECT_EQ((*both)->config().rope_freq_factors.front(), 2.f);
  EXPECT_EQ((*both)->config().rope_freq_factors.back(), 16.f);
  ExpectError(LoadEdited(path,
                         [](GgufWriter& w) {
                           w.SetString("qwen2.rope.scaling.type", "linear");
                           w.SetF32("qwen2.rope.scaling.factor", 0.f);
                         }),
              {"qwen2.rope.scaling.factor", "= 0"});
}

// A RoPE base must be a finite number above 1: the loader let infinity
// through, and synth wrote bases the loader then refused (or silently kept
// its preset's for 0, negative and NaN ones).
TEST(ModelConfig, RopeBaseMustBeFiniteAndAboveOne) {
  for (float base : {1.f, 0.f, -5.f, INFINITY, NAN}) {
    ExpectError(LoadEdited(SynthPath("llama3-tiny"),
                           [&](GgufWriter& w) { w.SetF32("llama.rope.freq_base", base); }),
                {"llama.rope.freq_base", "must be a finite number > 1"});
    SynthSpec spec = *SynthPreset("llama3-tiny");
    spec.n_vocab = 300;
    spec.rope_base = base;
    ThreadPool pool(1);
    const Status st = WriteSynthModel(spec, nullptr, TempPath("bad_base.gguf"), pool);
    ASSERT_FALSE(st.ok()) << base;
    EXPECT_NE(st.message().find("--rope-base"), std::string::npos) << st.message();
    EXPECT_FALSE(std::filesystem::exists(TempPath("bad_base.gguf")));
  }
}

// Every tensor of the file is read: one past block_count (a file whose
// metadata and tensors disagree) or of a variant rotor does not run was
// silently left out.
TEST(ModelConfig, ATensorTheModelDoesNotReadIsAnError) {
  std::vector<float> data(128, 0.5f);
  for (const char* name : {"blk.2.attn_norm.weight", "blk.0.attn_q_norm.weight", "extra"}) {
    ExpectError(LoadEdited(SynthPath("llama3-tiny"),
                           [&](GgufWriter& w) {
                             EXPECT_TRUE(w.AddTensor(name, DType::kF32, {128}, data.data(),
                                                     data.size() * sizeof(float))
                                             .ok());
                           }),
                {fmt::format("tensor '{}' is not part of a llama model of 2 layers", name)});
  }
  auto plain = LoadEdited(SynthPath("llama3-tiny"), [](GgufWriter&) {});
  EXPECT_TRUE(plain.ok()) << plain.message();
}

TEST(ModelConfig, UnsupportedScalingAndBadFactorsAreRefused) {
  ExpectError(LoadEdited(SynthPath("qwen2-tiny"),
                         [](GgufWriter& w) {
                           w.SetString("qwen2.rope.scaling.type", "yarn");
                           w.SetF32("qwen2.rope.scaling.factor", 4.f);
                         }),
              {"qwen2.rope.scaling.type", "'yarn'", "none, linear, llama3"});
  std::vector<float> short_ff(8, 1.f), bad_ff(16, 1.f);
  ExpectError(
      LoadEdited(
          SynthPath("llama3-tiny"),
          [&](GgufWriter& w) {
            EXPECT_TRUE(
                w.AddTensor("rope_freqs.weight", DType::kF32, {8}, short_ff.data(), 32).ok());
          },
          {"rope_freqs.weight"}),
      {"rope_freqs.weight", "expected [16]"});
  bad_ff[3] = -1.f;
  ExpectError(
      LoadEdited(SynthPath("llama3-tiny"),
                 [&](GgufWriter& w) {
                   EXPECT_TRUE(
                       w.AddTensor("rope_freqs.weight", DType::kF32, {16}, bad_ff.data(), 64).ok());
                 },
                 {"rope_freqs.weight"}),
      {"rope_freqs.weight'[3] = -1"});
  ExpectError(LoadEdited(SynthPath("qwen2-tiny"),
                         [](GgufWriter& w) { w.SetU32("qwen2.attention.key_length", 64); }),
              {"qwen2.attention.key_length", "64"});
}

TEST(ModelConfig, PartialRotaryAndSlidingWindowLoad) {
  auto m = LoadEdited(SynthPath("llama3-tiny"),
                      [](GgufWriter& w) {
                        w.SetU32("llama.rope.dimension_count", 16);
                        w.SetU32("llama.attention.sliding_window", 256);
                        SetLlama3Keys(w);  // the factors computed for 8 pairs
                      },
                      {"rope_freqs.weight"});
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ((*m)->config().n_rot, 16);
  EXPECT_EQ((*m)->config().rope_freq_factors.size(), 8u);
  EXPECT_EQ((*m)->config().sliding_window, 256);
  ExpectError(LoadEdited(SynthPath("llama3-tiny"),
                         [](GgufWriter& w) { w.SetU32("llama.rope.dimension_count", 15); }),
              {"llama.rope.dimension_count", "15", "even"});
  ExpectError(LoadEdited(SynthPath("llama3-tiny"),
                         [](GgufWriter& w) { w.SetU32("llama.rope.dimension_count", 16); }),
              {"rope_freqs.weight", "expected [8]"});
}

}  // namespace model_config_test
}  // namespace
}  // namespace rotor
