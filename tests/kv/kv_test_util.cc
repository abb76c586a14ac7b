#include "kv_test_util.h"

#include "../model/run_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "model/forward.h"
#include "model/quantize.h"
#include "model/synth.h"

namespace rotor::testing {

const std::string& GqaModelPath() {
  static const std::string path = [] {
    std::string p = (std::filesystem::temp_directory_path() /
                     ("rotor_kv_gqa_" + std::to_string(::getpid()) + ".gguf"))
                        .string();
    SynthSpec s;
    s.n_embd = 128, s.n_ff = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2;
    s.n_vocab = 300, s.n_ctx = 512, s.seed = 5;
    ThreadPool pool(2);
    Status st = WriteSynthModel(s, nullptr, p, pool);
    EXPECT_TRUE(st.ok()) << st.message();
    return p;
  }();
  // Removed when the test binary exits.
  static const struct Remover {
    ~Remover() { std::filesystem::remove(path); }
  } remover;
  return path;
}

const std::string& ModelPath(const std::string& name) {
  if (name == "stories260K") return kStories;
  if (name == "gqa") return GqaModelPath();
  static std::map<std::string, std::string> paths;
  static const struct Remover {
    ~Remover() {
      for (const auto& [n, p] : paths) std::filesystem::remove(p);
    }
  } remover;
  auto it = paths.find(name);
  if (it != paths.end()) return it->second;
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("rotor_kv_" + name + "_" + std::to_string(::getpid()) + ".gguf"))
                            .string();
  ThreadPool pool(2);
  if (name == "gqa256-Q4_K_M" || name == "gqa256-q5_K" || name == "gqa256-Q3_K_M" ||
      name == "gqa256-Q2_K") {
    // K-quant rows need k % 256 == 0: the GQA shape at width 256, written in
    // f32 and quantized as `rotor quantize` does (Q4_K_M: q4_K with q6_K for
    // attn_v, ffn_down and output; q5_K --pure: every matrix q5_K; Q3_K_M:
    // q3_K rows beside q4_K / q5_K; Q2_K: q2_K rows beside q3_K and others).
    SynthSpec s;
    s.n_embd = 256, s.n_ff = 512, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2;
    s.n_vocab = 300, s.n_ctx = 512, s.seed = 5;
    const std::string f32 = p + ".f32";
    Status st = WriteSynthModel(s, nullptr, f32, pool);
    EXPECT_TRUE(st.ok()) << st.message();
    QuantizeOptions q{.target = *ParseQuantTarget(name.substr(7))};
    q.pure = name == "gqa256-q5_K";
    Result<QuantizeStats> r = QuantizeModel(f32, p, q, pool);
    EXPECT_TRUE(r.ok()) << r.message();
    std::filesystem::remove(f32);
    return paths[name] = p;
  }
  SynthSpec s;
  if (name == "gqa-q8_0" || name == "gqa-q4_0") {
    // GqaModelPath's shape in a quantized type (300 rows: a partial group of 16).
    s.n_embd = 128, s.n_ff = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2;
    s.n_vocab = 300, s.n_ctx = 512, s.seed = 5;
    s.type = name == "gqa-q8_0" ? DType::kQ8_0 : DType::kQ4_0;
  } else {
    Result<SynthSpec> spec =
        SynthPreset(name == "qwen2" || name == "qwen2-partial" ? "qwen2-tiny" : "llama3-tiny");
    EXPECT_TRUE(spec.ok());
    s = *spec;
    s.n_vocab = 300, s.seed = 9;
    if (name == "qwen2-partial") s.n_rot = 16, s.rope_scaling = "linear", s.rope_scale = 2.f;
    if (name == "llama3-keys") s.rope_freqs = false, s.n_rot = 24;
    EXPECT_TRUE(name == "qwen2" || name == "qwen2-partial" || name == "llama3" ||
                name == "llama3-keys")
        << name;
  }
  Status st = WriteSynthModel(s, nullptr, p, pool);
  EXPECT_TRUE(st.ok()) << st.message();
  return paths[name] = p;
}

const Model& LoadModelCached(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[path];
  if (!m) {
    auto r = Model::Load(path);
    EXPECT_TRUE(r.ok()) << r.message();
    m = std::move(*r);
  }
  return *m;
}

std::vector<int32_t> Prompt(int n, int n_vocab, uint32_t seed) {
  std::vector<int32_t> out = {1};
  uint32_t s = seed;
  while (static_cast<int>(out.size()) < n) {
    s = s * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int32_t>((s >> 8) % (n_vocab - 3)));
  }
  return out;
}

KvConfig Kv(std::string_view policy, int size, int keep, RopeK rope, KvPositions positions,
            int recent, int window) {
  KvConfig c;
  auto set = [&](KvOpt o, std::string_view text) {
    Status s = c.Set(o, text);
    EXPECT_TRUE(s.ok()) << s.message();
  };
  auto set_int = [&](KvOpt o, int64_t v) {
    Status s = c.SetInt(o, v);
    EXPECT_TRUE(s.ok()) << s.message();
  };
  set(KvOpt::kPolicy, policy);
  set(KvOpt::kRopeK, RopeKName(rope));
  // f32 K/V (not the f16 default): the policy tests compare with f32
  // references; the other types' tests set theirs (kv_quant_model_test.cc).
  set(KvOpt::kType, "f32");
  if (KvPolicyUses(policy, KvOpt::kSize) && size > 0) set_int(KvOpt::kSize, size);
  if (KvPolicyUses(policy, KvOpt::kKeep)) set_int(KvOpt::kKeep, keep);
  if (KvPolicyUses(policy, KvOpt::kPositions)) set(KvOpt::kPositions, KvPositionsName(positions));
  if (KvPolicyUses(policy, KvOpt::kRecent) && recent > 0) set_int(KvOpt::kRecent, recent);
  if (KvPolicyUses(policy, KvOpt::kWindow) && window > 0) set_int(KvOpt::kWindow, window);
  return c;
}

std::vector<float> AllLogits(const Model& model, const KvConfig& kv,
                             const std::vector<int32_t>& tokens, int step, int n_ctx,
                             std::unique_ptr<KvCache>* keep_cache, int64_t prompt) {
  auto cache = KvCache::Create(model.kv_shape(n_ctx), kv);  // with the key offsets
  EXPECT_TRUE(cache.ok()) << cache.message();
  if (!cache.ok()) return {};
  if (prompt > 0) {
    Status s = (*cache)->ExpectPrompt(prompt);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  std::vector<float> logits = ContinueLogits(model, **cache, tokens, step);
  if (keep_cache) *keep_cache = std::move(*cache);
  return logits;
}

std::vector<float> ContinueLogits(const Model& model, KvCache& cache,
                                  const std::vector<int32_t>& tokens, int step) {
  std::vector<float> logits(tokens.size() * model.config().n_vocab);
  Status s = RunTokens(model, cache, tokens, step, LogitsWanted::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return logits;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

}  // namespace rotor::testing
