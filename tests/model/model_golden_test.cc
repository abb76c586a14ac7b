// stories260K against the reference implementation (llama2.c run.c, cross-checked
// with llama.cpp): teacher-forced logits at all 200 positions and greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/cpu.h"
#include "model/forward.h"
#include "model/model.h"
#include "run_tokens.h"

namespace rotor {
namespace {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";
const std::string kModelF16 = ROTOR_TESTDATA_DIR "/stories260K-F16.gguf";
const std::string kRef = ROTOR_TESTDATA_DIR "/stories260K-greedy-once-upon-a-time";

std::vector<int32_t> ReadIds() {
  std::ifstream in(kRef + ".ids");
  std::vector<int32_t> ids{std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>()};
  return ids;
}

std::vector<float> ReadLogits() {
  std::ifstream in(kRef + ".logits.f32", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Forward> fwd;
  std::unique_ptr<KvCache> cache;
  explicit Fixture(const std::string& path, int threads = 2, int ubatch = 256) {
    auto m = Model::Load(path);
    EXPECT_TRUE(m.ok()) << m.message();
    model = std::move(*m);
    pool = std::make_unique<ThreadPool>(threads);
    fwd = std::make_unique<Forward>(*model, *pool, ubatch);
    cache = std::move(KvCache::Create(model->config().kv_shape(512), KvConfig{.types = {KvType::kF32, KvType::kF32}})).value();
  }
};

TEST(Golden, TeacherForcedLogitsMatchReference) {
  std::vector<int32_t> ids = ReadIds();
  ASSERT_EQ(ids.size(), 200u);
  std::vector<float> ref = ReadLogits();
  ASSERT_EQ(ref.size(), 200u * 512u);
  std::vector<int32_t> input = {1};
  input.insert(input.end(), ids.begin(), ids.end() - 1);  // 200 inputs
  for (int step : {200, 64, 7, 1}) {
    Fixture f(kModel);
    std::vector<float> logits(200 * 512);
    ASSERT_TRUE(testing::RunTokens(*f.model, *f.cache, input, step, LogitsWanted::kAll, logits.data())
                    .ok());
    double max_err = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      max_err = std::max(max_err, static_cast<double>(std::fabs(logits[i] - ref[i])));
    EXPECT_LT(max_err, 1e-4) << "prefill step " << step;
  }
}

// Greedy decoding one token at a time reproduces the reference tokens.
void ExpectGreedyMatches(const std::string& path) {
  std::vector<int32_t> ids = ReadIds();
  Fixture f(path);
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  std::vector<float> logits(512);
  ASSERT_TRUE(testing::RunTokens(*f.model, *f.cache, prompt, 512, LogitsWanted::kLast, logits.data())
                  .ok());
  for (size_t p = 4; p < ids.size(); ++p) {
    int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                        logits.begin());
    ASSERT_EQ(best, ids[p]) << "position " << p << " of " << path;
    const int32_t tok[1] = {best};
    SeqInput in{f.cache.get(), tok, LogitsWanted::kLast};
    ASSERT_TRUE(f.fwd->Run(std::span<const SeqInput>(&in, 1), logits.data()).ok());
  }
}

TEST(Golden, GreedyF32MatchesReferenceOnEveryIsa) {
  Isa saved = ActiveIsa();
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    SCOPED_TRACE(IsaName(static_cast<Isa>(isa)));
    ExpectGreedyMatches(kModel);
  }
  SetIsa(saved);
}

TEST(Golden, GreedyF16MatchesReference) { ExpectGreedyMatches(kModelF16); }

TEST(Golden, SingleThreadEqualsTwoThreads) {
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383};
  std::vector<float> a(512), b(512);
  Fixture f1(kModel, 1), f2(kModel, 2);
  ASSERT_TRUE(testing::RunTokens(*f1.model, *f1.cache, prompt, 0, LogitsWanted::kLast, a.data(), 1).ok());
  ASSERT_TRUE(testing::RunTokens(*f2.model, *f2.cache, prompt, 0, LogitsWanted::kLast, b.data(), 2).ok());
  for (int i = 0; i < 512; ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

}  // namespace
}  // namespace rotor
