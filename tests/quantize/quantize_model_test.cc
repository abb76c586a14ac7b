// Every target (plain types, llama.cpp mixes, --pure K types) on two models:
// - stories260K (trained; rows of 64 and 172, so K types fall back per the rules)
//   scored by perplexity on real text against its f32 original;
// - a random model with rows that are multiples of 256 (8 layers, GQA 4), so
//   the K types and the mix rules apply unchanged, scored by KL divergence of
//   next-token distributions against its f32 original. Under the sanitizers
//   it has 2 layers: the same code paths for every type and rule, a quarter
//   of the quantization work (the Release suite checks the numbers on 8).
// Each output reopens with rotor's reader, keeps metadata, order and alignment,
// has the types the rules give, dequantizes close to the input, loads and
// generates. Targets whose types ops cannot convert in this build are skipped
// with a message (and run once ops supports them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../kv/kv_test_util.h"
#include "eval/perplexity.h"
#include "model/forward.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "ops/quant.h"
#include "sanitizers/sweep.h"

namespace rotor {
namespace {

using ::rotor::testing::AllLogits;
using ::rotor::testing::Kv;

struct Case {
  std::string target;
  bool pure = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.target << (c.pure ? " --pure" : ""); }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.target + (info.param.pure ? "_pure" : "");
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const std::string& t : QuantTargetNames()) out.push_back({t, false});
  for (const char* t : {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q4_0", "iq4_nl"})
    out.push_back({t, true});
  return out;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rotor_quantize_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A random f32 model whose rows all fit 256-element blocks.
const std::string& Synth256Path() {
  static const std::string path = [] {
    std::string p = TempPath("synth256.gguf");
    SynthSpec s;
    s.n_embd = 256, s.n_ff = 512, s.n_layer = testing::kSanitized ? 2 : 8, s.n_head = 4;
    s.n_head_kv = 1;
    s.n_vocab = 512, s.n_ctx = 256, s.seed = 11;
    ThreadPool pool(2);
    Status st = WriteSynthModel(s, nullptr, p, pool);
    EXPECT_TRUE(st.ok()) << st.message();
    return p;
  }();
  static const struct Remover {
    ~Remover() { std::filesystem::remove(path); }
  } remover;
  return path;
}

// Bits that set a type's relative rounding error e = 2^(1 - bits): integer
// grids of b bits step by about amax / 2^(b-1); floats by 2^-mantissa bits.
int Bits(DType t) {
  switch (t) {
    case DType::kF32:
      return 25;
    case DType::kF16:
      return 12;
    case DType::kBF16:
      return 9;
    case DType::kQ8_0:
      return 8;
    case DType::kQ6_K:
      return 6;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 5;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kIQ4_NL:
      return 4;
    case DType::kQ3_K:
      return 3;
    case DType::kQ2_K:
      return 2;
    default:
      ADD_FAILURE() << "no bits for " << DTypeName(t);
      return 1;
  }
}

std::vector<float> Dequantize(const GgufTensor& t) {
  std::vector<float> out(t.n_elements);  // [rows, ne0]
  const int64_t n = t.ne[0], row = RowBytes(t.type, n);
  for (int64_t r = 0; r < t.rows(); ++r)
    ops::DequantizeRow(t.type, t.data + r * row, &out[r * n], n);
  return out;
}

class QuantizeModelTest : public ::testing::TestWithParam<Case> {
 protected:
  // Quantizes `in` for the case; false (with a skip) when ops cannot do a type.
  bool Quantize(const std::string& in, std::vector<QuantizedTensor>* plan) {
    Result<QuantTarget> target = ParseQuantTarget(GetParam().target);
    EXPECT_TRUE(target.ok()) << target.message();
    options_ = {.target = *target, .pure = GetParam().pure};
    auto file = GgufFile::Open(in);
    EXPECT_TRUE(file.ok()) << file.message();
    std::set<std::string> missing;
    Result<std::vector<QuantizedTensor>> p = PlanQuantization(**file, options_);
    if (!p.ok()) {
      EXPECT_THAT(p.message(), ::testing::HasSubstr("not yet supported by this build"));
      for (const DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                            DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL})
        if (!ops::IsSupported(t)) missing.insert(std::string(DTypeName(t)));
      if (missing.empty()) ADD_FAILURE() << "plan failed with every type supported";
      skip_message_ = fmt::format("{}: ops in this build cannot convert {} ({})", GetParam().target,
                                  fmt::join(missing, ", "), p.message());
      return false;
    }
    *plan = *p;
    out_ = TempPath(CaseName({GetParam(), 0}) + ".gguf");
    ThreadPool pool(2);
    Result<QuantizeStats> st = QuantizeModel(in, out_, options_, pool);
    EXPECT_TRUE(st.ok()) << st.message();
    return st.ok();
  }

  void TearDown() override {
    if (!out_.empty()) std::filesystem::remove(out_);
  }

  // Reopens the output and checks it against the input and the plan.
  void CheckFile(const std::string& in_path, const std::vector<QuantizedTensor>& plan) {
    auto in = GgufFile::Open(in_path);
    auto out = GgufFile::Open(out_);
    ASSERT_TRUE(in.ok() && out.ok()) << out.message();
    const GgufFile& a = **in;
    const GgufFile& b = **out;
    EXPECT_EQ(*b.GetInt("general.file_type"), static_cast<int64_t>(options_.target.file_type));
    EXPECT_EQ(*b.GetInt("general.quantization_version"), 2);
    for (const GgufKv& kv : a.metadata()) {
      if (kv.key == "general.file_type") continue;
      const GgufValue* v = b.Find(kv.key);
      ASSERT_NE(v, nullptr) << kv.key;
      EXPECT_TRUE(*v == kv.value) << kv.key;
    }
    EXPECT_EQ(b.alignment(), a.alignment());
    EXPECT_EQ(b.data_offset() % b.alignment(), 0u);
    ASSERT_EQ(b.tensors().size(), a.tensors().size());
    ASSERT_EQ(plan.size(), a.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
      const GgufTensor& ta = a.tensors()[i];
      const GgufTensor& tb = b.tensors()[i];
      SCOPED_TRACE(ta.name);
      EXPECT_EQ(tb.name, ta.name);
      EXPECT_EQ(tb.ne, ta.ne);
      EXPECT_EQ(tb.type, plan[i].out_type);
      EXPECT_EQ(tb.offset % b.alignment(), 0u);
      if (!plan[i].convert) {
        EXPECT_EQ(tb.type, ta.type);
        EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0);
        continue;
      }
      EXPECT_EQ(tb.ne.size(), 2u);
      EXPECT_EQ(tb.name.find("_norm"), std::string::npos);
      // Relative RMS error against the input, within 1.5x of 2^(1 - bits).
      std::vector<float> x = Dequantize(ta), y = Dequantize(tb);
      double err = 0, sig = 0;
      for (size_t k = 0; k < x.size(); ++k) {
        err += (x[k] - y[k]) * (x[k] - y[k]);
        sig += x[k] * x[k];
      }
      const double rel = std::sqrt(err / sig);
      sum_e2_ += rel * rel * static_cast<double>(x.size());
      n_e2_ += static_cast<double>(x.size());
      const double bound = 1.5 * std::ldexp(1.0, 1 - Bits(tb.type));
      EXPECT_LE(rel, bound) << DTypeName(tb.type);
      if (tb.type != DType::kF32 && Bits(tb.type) <= 8) {
        EXPECT_GT(rel, 0.0);
      }
    }
  }

  // Mean squared relative weight error of the converted tensors (by element).
  double MeanE2() const { return n_e2_ > 0 ? sum_e2_ / n_e2_ : 0; }

  QuantizeOptions options_;
  std::string out_;
  double sum_e2_ = 0, n_e2_ = 0;
  std::string skip_message_;
};

// Greedy decoding runs and gives in-range tokens and finite logits.
void ExpectGenerates(const Model& m) {
  ThreadPool pool(2);
  Runner runner(m, pool, RunnerOptions{.prefill_step = 8, .n_ctx = 64});
  auto cache = KvCache::Create(m.config().kv_shape(64), Kv("full", 0));
  ASSERT_TRUE(cache.ok()) << cache.message();
  const int n_vocab = m.config().n_vocab;
  std::vector<int32_t> prompt = {1, 400 % n_vocab, 300 % n_vocab};
  Feed feed = Feed::Prompt(cache->get(), prompt);
  ASSERT_TRUE(runner.Run(feed).ok());
  int32_t tok = -1;
  for (int i = 0; i < 16; ++i) {
    std::span<const float> logits(feed.rows, n_vocab);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    tok = ArgMax(logits);
    ASSERT_GE(tok, 0);
    ASSERT_LT(tok, n_vocab);
    feed = Feed::Continue(cache->get(), std::span<const int32_t>(&tok, 1));
    ASSERT_TRUE(runner.Run(feed).ok());
  }
}

double StoriesPerplexity(const std::string& path) {
  auto model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.message();
  if (!model.ok()) return 0;
  std::ifstream f(ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(tok.ok()) << tok.message();
  std::vector<int32_t> tokens = TokenizeForScoring(**tok, ss.str());
  ThreadPool pool(2);
  Runner runner(**model, pool, RunnerOptions{.prefill_step = 128, .n_ctx = 128});
  PerplexityOptions o{.n_ctx = 128, .n_chunks = 8, .kv = Kv("full", 0)};
  auto r = ChunkedPerplexity(runner, 1, tokens, o);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? r->nll.Ppl() : 0;
}

TEST_P(QuantizeModelTest, Stories260KPerplexityNearF32) {
  const std::string in = testing::kStories;
  std::vector<QuantizedTensor> plan;
  if (!Quantize(in, &plan)) GTEST_SKIP() << skip_message_;
  CheckFile(in, plan);
  auto model = Model::Load(out_);
  ASSERT_TRUE(model.ok()) << model.message();
  ExpectGenerates(**model);
  static const double base = StoriesPerplexity(in);
  const double ppl = StoriesPerplexity(out_);
  // Weight errors of relative size e (measured above, bounded there by the
  // bits) move the mean NLL by about C * e^2; C = 60 covers the sensitivity of
  // this 260K model (measured 18-40), plus 5e-4 for the text sample's noise.
  // Integer matrices also quantize the activations they multiply to q8_0
  // (ops/matmul.h): a second error of the size of q8_0 weights' (e^2 = 2.37e-5
  // on this model), whose realization moves with the kernel's f32 rounding
  // (an ulp carries an activation across a rounding boundary). The same q8_0
  // file scores log-ratio 0.00176 with the scalar kernels and 0.00229 with
  // AVX2's row-interleaved ones (KLD 2e-4 between them; the natural-layout
  // AVX2 kernels, 2.6e-4 from the scalar ones).
  constexpr double kQ8ActivationE2 = 2.37e-5;
  bool integer_matrices = false;
  for (const QuantizedTensor& t : plan) integer_matrices |= t.convert && Bits(t.out_type) <= 8;
  const double margin = 60 * (MeanE2() + (integer_matrices ? kQ8ActivationE2 : 0)) + 5e-4;
  std::printf(
      "[ %s ] stories260K ppl %.4f (f32 %.4f), ratio %.4f, log-ratio %.5f, |.| <= %.5f "
      "(mean e^2 %.3g)\n",
      CaseName({GetParam(), 0}).c_str(), ppl, base, ppl / base, std::log(ppl / base), margin,
      MeanE2());
  EXPECT_LE(std::log(ppl / base), margin);
  EXPECT_GE(std::log(ppl / base), -margin);
}

// Mean KL(f32 || quantized) of next-token distributions over a 64-token text.
double MeanKl(const Model& base, const Model& q) {
  const std::vector<int32_t> prompt = testing::Prompt(64, base.config().n_vocab, 3);
  const KvConfig kv = Kv("full", 0);
  std::vector<float> a = AllLogits(base, kv, prompt, 0, 128);
  std::vector<float> b = AllLogits(q, kv, prompt, 0, 128);
  const int v = base.config().n_vocab;
  double kl = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    const float* x = &a[p * v];
    const float* y = &b[p * v];
    double mx = *std::max_element(x, x + v), my = *std::max_element(y, y + v), sx = 0, sy = 0;
    for (int i = 0; i < v; ++i) sx += std::exp(x[i] - mx), sy += std::exp(y[i] - my);
    for (int i = 0; i < v; ++i) {
      const double lx = x[i] - mx - std::log(sx), ly = y[i] - my - std::log(sy);
      kl += std::exp(lx) * (lx - ly);
    }
  }
  return kl / prompt.size();
}

TEST_P(QuantizeModelTest, Synth256KlNearF32) {
  const std::string& in = Synth256Path();
  std::vector<QuantizedTensor> plan;
  if (!Quantize(in, &plan)) GTEST_SKIP() << skip_message_;
  CheckFile(in, plan);
  // The rows fit every block: no fallback, every rule applies as in llama.cpp.
  for (const QuantizedTensor& q : plan) EXPECT_FALSE(q.fallback_from.has_value()) << q.name;
  auto model = Model::Load(out_);
  ASSERT_TRUE(model.ok()) << model.message();
  ExpectGenerates(**model);
  auto base = Model::Load(in);
  ASSERT_TRUE(base.ok());
  const double kl = MeanKl(**base, **model);
  // KL grows with the square of the relative weight error e (measured in
  // CheckFile, bounded there by the bits): KL <= C * e^2 with C = 100 for this
  // random 8-layer model (measured 20-50).
  const double margin = 100 * MeanE2() + 1e-6;
  std::printf("[ %s ] synth256 KL %.6f <= %.6f (mean e^2 %.3g)\n",
              CaseName({GetParam(), 0}).c_str(), kl, margin, MeanE2());
  EXPECT_LE(kl, margin);
  EXPECT_GE(kl, 0.0);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, QuantizeModelTest, ::testing::ValuesIn(AllCases()), CaseName);

}  // namespace
}  // namespace rotor
