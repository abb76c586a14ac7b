// The scoring library against independent computations: perplexity equals
// exp(mean NLL) of a plain loop over Forward's logits, a KL base compared with
// itself gives KL 0 and 100% top-1 agreement, the stream's per-token NLLs equal
// the chunked ones where both see the same context, and bad inputs fail clearly.
#include "eval/perplexity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../kv/kv_test_util.h"

namespace rotor {
namespace {

using ::rotor::testing::AllLogits;
using ::rotor::testing::Kv;
using ::rotor::testing::LoadModelCached;
using ::testing::HasSubstr;

constexpr int kCtx = 64;

const Model& Stories() { return LoadModelCached(testing::kStories); }

const std::vector<int32_t>& TextTokens() {
  static const std::vector<int32_t> tokens = [] {
    std::ifstream in(ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto tok = Tokenizer::FromGguf(Stories().file());
    EXPECT_TRUE(tok.ok()) << tok.message();
    return TokenizeForScoring(**tok, ss.str());
  }();
  return tokens;
}

// -log softmax(row)[target], written out plainly in double.
double PlainNll(const float* row, int n_vocab, int32_t target) {
  double m = row[0];
  for (int i = 1; i < n_vocab; ++i) m = std::max(m, static_cast<double>(row[i]));
  double s = 0;
  for (int i = 0; i < n_vocab; ++i) s += std::exp(row[i] - m);
  return std::log(s) + m - row[target];
}

// The NLLs of chunk `c` the llama.cpp way, from Forward's logits of the whole chunk.
std::vector<double> ReferenceChunkNll(const KvConfig& kv, int c, int step) {
  const std::vector<int32_t>& text = TextTokens();
  std::vector<int32_t> chunk(text.begin() + c * kCtx, text.begin() + (c + 1) * kCtx);
  chunk[0] = 1;  // BOS
  const int n_vocab = Stories().config().n_vocab;
  std::vector<float> logits = AllLogits(Stories(), kv, chunk, step, kCtx);
  std::vector<double> nll;
  for (int p = kCtx / 2; p < kCtx - 1; ++p)
    nll.push_back(PlainNll(logits.data() + p * n_vocab, n_vocab, text[c * kCtx + p + 1]));
  return nll;
}

PerplexityResult Chunked(const KvConfig& kv, int n_chunks, int step = kCtx,
                         const PerplexityHooks& hooks = {}) {
  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = step, .n_ctx = kCtx});
  PerplexityOptions o;
  o.n_ctx = kCtx;
  o.n_chunks = n_chunks;
  o.kv = kv;
  Result<PerplexityResult> r = ChunkedPerplexity(runner, 1, TextTokens(), o, hooks);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? std::move(*r) : PerplexityResult{};
}

TEST(Perplexity, TokenizationStartsWithBos) {
  ASSERT_GT(TextTokens().size(), 1000u);
  EXPECT_EQ(TextTokens()[0], 1);
}

TEST(Perplexity, EqualsExpOfMeanNllOfAPlainLoop) {
  for (const KvConfig& kv : {Kv("full", 0), Kv("sink", 16)}) {
    SCOPED_TRACE(kv.policy);
    const int n_chunks = 4;
    PerplexityResult r = Chunked(kv, n_chunks);
    ASSERT_EQ(r.n_chunks, n_chunks);
    ASSERT_EQ(r.token_nll.size(), static_cast<size_t>(n_chunks * (kCtx - 1 - kCtx / 2)));
    double sum = 0, sum2 = 0;
    int64_t count = 0;
    for (int c = 0; c < n_chunks; ++c) {
      for (double v : ReferenceChunkNll(kv, c, 0)) {
        EXPECT_NEAR(r.token_nll[count], v, 1e-5);
        sum += v;
        sum2 += v * v;
        ++count;
      }
      // Each token's NLL may differ by 1e-5 (the kernels' rounding differs
      // between ISAs), so the mean by as much and exp(mean) by that relatively.
      EXPECT_NEAR(r.running_ppl[c], std::exp(sum / count), 1.1e-5 * r.running_ppl[c]);
    }
    const double mean = sum / count;
    EXPECT_NEAR(r.nll.Ppl(), std::exp(mean), 1.1e-5 * std::exp(mean));
    // llama.cpp's uncertainty: ppl * sqrt((E[x^2] - E[x]^2) / (n - 1)).
    EXPECT_NEAR(r.nll.PplError(),
                std::exp(mean) * std::sqrt((sum2 / count - mean * mean) / (count - 1)), 1e-6);
  }
}

TEST(Perplexity, EvictionChangesItAndStepDoesNot) {
  const double full = Chunked(Kv("full", 0), 3).nll.Ppl();
  const double sink = Chunked(Kv("sink", 16), 3).nll.Ppl();
  EXPECT_GT(std::abs(sink - full), 1e-3);
  for (int step : {1, 7, 64})
    EXPECT_NEAR(Chunked(Kv("sink", 16), 3, step).nll.Ppl(), sink, 1e-4) << step;
  EXPECT_NEAR(Chunked(Kv("h2o", 16), 3, 7).nll.Ppl(),
              Chunked(Kv("h2o", 16), 3, 64).nll.Ppl(), 1e-4);
}

class KlBaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("rotor-kl-" + std::to_string(::getpid()) + ".kld"))
                .string();
    base_ = Base(kCtx, kChunks);
    auto w = KlBaseWriter::Create(path_, base_);
    ASSERT_TRUE(w.ok()) << w.message();
    PerplexityHooks hooks;
    hooks.write_base = w->get();
    full_ = Chunked(Kv("full", 0), kChunks, kCtx, hooks);
    ASSERT_TRUE((*w)->Close().ok());
  }
  void TearDown() override { std::filesystem::remove(path_); }

  static KlBaseInfo Base(int n_ctx, int n_chunks) {
    KlBaseInfo info;
    info.model = "stories260K";
    info.text = "tinystories-valid-8k.txt";
    info.kv = "full";
    info.n_vocab = Stories().config().n_vocab;
    info.n_ctx = n_ctx;
    info.n_chunks = n_chunks;
    info.tokens.assign(TextTokens().begin(), TextTokens().begin() + n_ctx * n_chunks);
    return info;
  }
  PerplexityResult Compare(const KvConfig& kv) {
    auto reader = KlBaseReader::Open(path_);
    EXPECT_TRUE(reader.ok()) << reader.message();
    PerplexityHooks hooks;
    hooks.compare_base = reader->get();
    return Chunked(kv, kChunks, kCtx, hooks);
  }

  static constexpr int kChunks = 5;
  std::string path_;
  KlBaseInfo base_;
  PerplexityResult full_;
};

TEST_F(KlBaseTest, FullAgainstItselfIsZeroWithFullAgreement) {
  auto reader = KlBaseReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.message();
  EXPECT_EQ((*reader)->info().tokens, base_.tokens);
  EXPECT_EQ((*reader)->info().n_ctx, kCtx);
  EXPECT_EQ((*reader)->info().model, "stories260K");
  PerplexityResult r = Compare(Kv("full", 0));
  ASSERT_TRUE(r.kl);
  EXPECT_EQ(r.kl->count(), kChunks * (kCtx - 1 - kCtx / 2));
  EXPECT_NEAR(r.kl->Kld().mean, 0.0, 1e-6);  // only the base's 16-bit rounding
  EXPECT_LT(r.kl->KldPercentile(1.0), 1e-3);
  EXPECT_EQ(r.kl->SameTop().mean, 1.0);
  EXPECT_NEAR(r.kl->nll_base.Ppl(), full_.nll.Ppl(), 1e-5);
  EXPECT_NEAR(r.kl->LogPplRatio().mean, 0.0, 1e-7);
}

TEST_F(KlBaseTest, EvictionDivergesFromTheBase) {
  PerplexityResult r = Compare(Kv("window", 8));
  ASSERT_TRUE(r.kl);
  EXPECT_GT(r.kl->Kld().mean, 1e-3);
  EXPECT_GT(r.kl->Kld().error, 0.0);
  EXPECT_LT(r.kl->SameTop().mean, 1.0);
  EXPECT_GE(r.kl->KldPercentile(0.99), r.kl->Kld().mean);
  EXPECT_NEAR(r.kl->nll.Ppl(), r.nll.Ppl(), 1e-9);
}

TEST_F(KlBaseTest, MismatchesAreClearErrors) {
  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = 32, .n_ctx = 32});
  auto reader = KlBaseReader::Open(path_);
  ASSERT_TRUE(reader.ok());
  PerplexityHooks hooks;
  hooks.compare_base = reader->get();
  PerplexityOptions o;
  o.n_ctx = 32;
  auto r = ChunkedPerplexity(runner, 1, TextTokens(), o, hooks);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("-c 64"));

  std::vector<int32_t> other(TextTokens().begin() + 100, TextTokens().end());
  other[0] = 1;
  Runner runner64(Stories(), pool, RunnerOptions{.prefill_step = kCtx, .n_ctx = kCtx});
  o.n_ctx = kCtx;
  o.n_chunks = 2;
  r = ChunkedPerplexity(runner64, 1, other, o, hooks);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("different text"));

  o.n_chunks = kChunks + 1;
  r = ChunkedPerplexity(runner64, 1, TextTokens(), o, hooks);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("holds 5 chunks"));
}

// The rows have no checksum: a damaged row's numbers are checked against what
// the writer makes (they gave NaN or infinite statistics, exit status 0).
TEST_F(KlBaseTest, DamagedRowsAreRejected) {
  std::string bytes;
  {
    std::ifstream in(path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const int n_vocab = base_.n_vocab;
  const size_t row_bytes = 16 + 2 * static_cast<size_t>(n_vocab);
  const int64_t n_rows = kChunks * (kCtx - 1 - kCtx / 2);
  const size_t row3 = bytes.size() - static_cast<size_t>(n_rows) * row_bytes + 3 * row_bytes;
  int32_t top1 = 0;
  std::memcpy(&top1, bytes.data() + row3 + 12, 4);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int32_t bad_top = n_vocab + 5;
  const uint16_t zero = 0, high = 65535;
  const int32_t other = top1 == 0 ? 1 : 0;
  const struct {
    size_t at;
    std::string value;
    const char* what;
  } damage[] = {
      {0, std::string(reinterpret_cast<const char*>(&nan), 4), "-log p"},
      {8, std::string(reinterpret_cast<const char*>(&inf), 4), "range"},
      {12, std::string(reinterpret_cast<const char*>(&bad_top), 4), "most likely"},
      {16 + 2 * static_cast<size_t>(top1), std::string(reinterpret_cast<const char*>(&zero), 2),
       "most likely"},
      {16 + 2 * static_cast<size_t>(other), std::string(reinterpret_cast<const char*>(&high), 2),
       "sum to 1"},
  };
  for (const auto& d : damage) {
    std::string damaged = bytes;
    damaged.replace(row3 + d.at, d.value.size(), d.value);
    std::ofstream(path_, std::ios::binary) << damaged;
    auto reader = KlBaseReader::Open(path_);
    ASSERT_TRUE(reader.ok()) << reader.message();
    KlBaseRow row;
    Status st = Status::Ok();
    int read = 0;
    for (; read < 4 && st.ok(); ++read) st = (*reader)->NextRow(&row);
    ASSERT_FALSE(st.ok()) << d.what;
    EXPECT_EQ(read, 4) << d.what;  // rows 0-2 are fine
    EXPECT_THAT(st.message(), HasSubstr("row 3 of the KL base is damaged")) << st.message();
    EXPECT_THAT(st.message(), HasSubstr(d.what)) << st.message();
  }
}

TEST_F(KlBaseTest, DamagedFilesAreRejected) {
  const auto size = std::filesystem::file_size(path_);
  std::filesystem::resize_file(path_, size - 10);
  auto r = KlBaseReader::Open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("truncated"));
  {
    std::ofstream out(path_, std::ios::binary);
    out << "not a base at all";
  }
  r = KlBaseReader::Open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("not a rotor KL base"));
  {
    // A header declaring 2^24 chunks of 2^24 tokens (2^50 bytes of token ids) in a
    // file of a few bytes: refused before anything is allocated for them.
    std::ofstream out(path_, std::ios::binary);
    auto put32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
    out.write("ROTORKLB", 8);
    for (uint32_t v : {1u, 512u, 1u << 24, 1u << 24}) put32(v);
    const uint64_t fingerprint = 0;
    out.write(reinterpret_cast<const char*>(&fingerprint), 8);
    for (int i = 0; i < 3; ++i) put32(0);  // model, text, kv: empty strings
    out.write("0123456789abcdef", 16);
  }
  r = KlBaseReader::Open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("cannot hold 16777216 chunks"));
  r = KlBaseReader::Open(path_ + ".missing");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr(".missing"));
}

TEST(Perplexity, ModelFingerprintTellsModelsApart) {
  auto a = ModelFingerprint(testing::kStories);
  auto b = ModelFingerprint(ROTOR_TESTDATA_DIR "/stories260K-F16.gguf");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*a, *ModelFingerprint(testing::kStories));
  EXPECT_FALSE(ModelFingerprint("/nonexistent/model.gguf").ok());
}

std::vector<float> Stream(const KvConfig& kv, int64_t n, int step, int n_ctx) {
  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = step, .n_ctx = n_ctx});
  StreamOptions o;
  o.n_ctx = n_ctx;
  o.kv = kv;
  auto r = StreamNll(runner, std::span<const int32_t>(TextTokens().data(), n), o);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::vector<float>{};
}

TEST(Stream, EqualsChunkedWhereBothSeeTheSameContext) {
  // The first chunk starts with the text's own BOS: the stream's first kCtx
  // tokens are the same input, so positions kCtx/2 .. kCtx-2 score alike.
  for (const KvConfig& kv :
       {Kv("full", 0), Kv("sink", 16), Kv("h2o", 16)}) {
    SCOPED_TRACE(kv.policy);
    PerplexityResult chunked = Chunked(kv, 1);
    std::vector<float> stream = Stream(kv, 3 * kCtx, 16, 4 * kCtx);
    ASSERT_EQ(stream.size(), static_cast<size_t>(3 * kCtx - 1));
    for (int p = kCtx / 2; p < kCtx - 1; ++p)
      EXPECT_NEAR(stream[p], chunked.token_nll[p - kCtx / 2], 1e-4) << p;
  }
}

TEST(Stream, PerTokenNllMatchesPlainLoopAndIsStepInvariant) {
  const KvConfig kv = Kv("sink", 16);
  const int n = 200;
  std::vector<int32_t> tokens(TextTokens().begin(), TextTokens().begin() + n);
  std::vector<float> logits = AllLogits(Stories(), kv, tokens, 0, 256);
  std::vector<float> stream = Stream(kv, n, 64, 256);
  const int n_vocab = Stories().config().n_vocab;
  for (int p = 0; p < n - 1; ++p)
    EXPECT_NEAR(stream[p], PlainNll(logits.data() + p * n_vocab, n_vocab, tokens[p + 1]), 1e-4)
        << p;
  std::vector<float> step7 = Stream(kv, n, 7, 256);
  for (int p = 0; p < n - 1; ++p) EXPECT_NEAR(step7[p], stream[p], 1e-4) << p;
}

TEST(Stream, FullNeedsAContextForEveryToken) {
  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = 64, .n_ctx = 128});
  StreamOptions o;
  o.n_ctx = 128;
  auto r = StreamNll(runner, std::span<const int32_t>(TextTokens().data(), 300), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("-c 300"));
  o.kv = Kv("window", 32);
  EXPECT_TRUE(StreamNll(runner, std::span<const int32_t>(TextTokens().data(), 300), o).ok());
}

TEST(Stream, WindowsCoverPositions) {
  // nll[i] predicts position i + 1; position 0 (BOS) is never predicted.
  std::vector<float> nll = {1, 1, 1, 2, 2, 2, 3};  // positions 1..7
  std::vector<WindowPpl> w = WindowPerplexity(nll, 3);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 3);
  EXPECT_EQ(w[0].n, 2);
  EXPECT_NEAR(w[0].ppl, std::exp(1.0), 1e-12);
  EXPECT_EQ(w[1].n, 3);
  EXPECT_NEAR(w[1].ppl, std::exp(5.0 / 3), 1e-12);
  EXPECT_EQ(w[2].begin, 6);
  EXPECT_EQ(w[2].end, 8);
  EXPECT_NEAR(w[2].ppl, std::exp(2.5), 1e-12);
}

TEST(Perplexity, ShortTextsAndBadCountsAreErrors) {
  auto r = CountChunks(100, 128, -1);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("fewer than one chunk of -c 128"));
  EXPECT_EQ(*CountChunks(1000, 128, -1), 7);
  EXPECT_EQ(*CountChunks(1000, 128, 3), 3);
  EXPECT_EQ(*CountChunks(1000, 128, 50), 7);
  // -c 2 scored no position at all and printed a perplexity of 0.
  for (int n_ctx : {-1, 0, 1, 2}) {
    auto small = CountChunks(1000, n_ctx, -1);
    ASSERT_FALSE(small.ok()) << n_ctx;
    EXPECT_THAT(small.message(), HasSubstr("-c " + std::to_string(n_ctx) + " is too small"));
  }
  EXPECT_EQ(*CountChunks(1000, 3, -1), 333);
  EXPECT_FALSE(CountChunks(1000, 128, 0).ok());

  ThreadPool pool(2);
  Runner runner(Stories(), pool, RunnerOptions{.prefill_step = 64, .n_ctx = 64});
  PerplexityOptions o;
  o.n_ctx = 64;
  o.kv = Kv("sink", 128);
  auto p = ChunkedPerplexity(runner, 1, TextTokens(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.message(), HasSubstr("--kv-size 128"));
}

TEST(Statistics, MeanErrorAndPercentile) {
  MeanError m = MeanAndError(6, 14, 3);  // 1, 2, 3
  EXPECT_DOUBLE_EQ(m.mean, 2);
  EXPECT_NEAR(m.error, std::sqrt((14.0 / 3 - 4) / 2), 1e-12);
  std::vector<float> sorted = {0, 1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(sorted, 0.5), 2);
  EXPECT_DOUBLE_EQ(Percentile(sorted, 0.99), 3.96);
  EXPECT_DOUBLE_EQ(Percentile(sorted, 1), 4);
  std::vector<float> logits = {0.f, std::log(3.f)};
  EXPECT_NEAR(TokenNll(logits, 1), -std::log(0.75), 1e-6);
  EXPECT_EQ(ArgMax(logits), 1);
}

}  // namespace
}  // namespace rotor
