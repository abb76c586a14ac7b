// The C API's promises to a careless caller (found by probing the header at
// the end of the sixty-ninth session): NULL handles give defined answers,
// out-parameters are written on failure, messages name the field or pointer,
// KV options may come in any order, NaN logits are not sampled, parameters
// are bounded when given, and invalid UTF-8 survives a round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "capi_test_util.h"
#include "rotor/rotor.h"

namespace {
namespace capi_contract_test {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";

using rotor_capi_test::St;

bool Has(const St& s, const std::string& part) {
  return s.msg().find(part) != std::string::npos;
}

class CApiContract : public ::testing::Test {
 protected:
  void SetUp() override {
    rotor_model_params p = rotor_model_default_params();
    p.n_threads = 1;
    St s = rotor_model_load(kModel.c_str(), &p, &model_);
    ASSERT_TRUE(s.ok()) << s.msg();
    St c = rotor_context_new(model_, nullptr, &ctx_);
    ASSERT_TRUE(c.ok()) << c.msg();
  }
  void TearDown() override {
    rotor_context_free(ctx_);
    rotor_model_free(model_);
  }
  // The description, or the error a sequence would get.
  std::string Describe(const rotor_kv_config* kv) {
    char text[256] = "untouched";
    St s = rotor_kv_config_describe(kv, model_, text, sizeof text, nullptr);
    return s.ok() ? std::string(text) : s.msg();
  }

  rotor_model* model_ = nullptr;
  rotor_context* ctx_ = nullptr;
};

TEST(CApiContractLoad, NullHandlesGetDefinedAnswers) {
  EXPECT_EQ(rotor_model_n_vocab(nullptr), 0);
  EXPECT_EQ(rotor_model_n_ctx(nullptr), 0);
  EXPECT_EQ(rotor_model_n_ctx_train(nullptr), 0);
  EXPECT_EQ(rotor_model_token_bos(nullptr), -1);
  EXPECT_EQ(rotor_model_token_eos(nullptr), -1);
  EXPECT_FALSE(rotor_model_token_is_eog(nullptr, 0));
  EXPECT_STREQ(rotor_model_description(nullptr), "");
  EXPECT_EQ(rotor_sampler_seed(nullptr), 0u);
  const float logits[4] = {1, 2, 3, 4};
  EXPECT_EQ(rotor_sampler_sample(nullptr, logits), -1);
}

// Each parameter out of range is named by its field (the engine's messages
// name the CLI's flags: "-c", "-t"), and n_ctx is bounded at load: 2^30 loaded
// and failed seconds into the first generation with a bare "out of memory".
TEST(CApiContractLoad, ParametersAreNamedByTheirFields) {
  struct Case {
    int n_threads, n_ctx, max_seqs;
    const char* message;
  };
  const Case cases[] = {
      {-1, 0, 1, "rotor_model_load: n_threads -1 out of range"},
      {1, -5, 1, "rotor_model_load: n_ctx -5 out of range [0, 16777216]"},
      {1, 1 << 30, 1, "rotor_model_load: n_ctx 1073741824 out of range [0, 16777216]"},
      {1, 0, 0, "rotor_model_load: max_seqs 0 out of range"},
  };
  for (const Case& c : cases) {
    rotor_model_params p = rotor_model_default_params();
    p.n_threads = c.n_threads;
    p.n_ctx = c.n_ctx;
    p.max_seqs = c.max_seqs;
    rotor_model* m = reinterpret_cast<rotor_model*>(1);
    St s = rotor_model_load(kModel.c_str(), &p, &m);
    EXPECT_EQ(s.code(), ROTOR_ERR_INVALID_ARGUMENT) << c.message;
    EXPECT_TRUE(Has(s, c.message)) << s.msg();
    EXPECT_EQ(m, nullptr);
  }
}

// A GGUF file without a vocabulary: the error names the file.
TEST(CApiContractLoad, TokenizerErrorsNameTheFile) {
  const std::string path = testing::TempDir() + "/capi_no_vocab.gguf";
  {
    // "GGUF", version 3, no tensors, no metadata.
    const unsigned char header[24] = {'G', 'G', 'U', 'F', 3};
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(header), 24);
  }
  for (bool vocab_only : {true, false}) {
    rotor_model_params p = rotor_model_default_params();
    p.vocab_only = vocab_only;
    rotor_model* m = nullptr;
    St s = rotor_model_load(path.c_str(), &p, &m);
    EXPECT_EQ(s.code(), ROTOR_ERR_IO);
    EXPECT_TRUE(Has(s, "capi_no_vocab.gguf")) << s.msg();
    EXPECT_EQ(m, nullptr);
  }
}

TEST_F(CApiContract, MessagesSayWhichPointerIsNull) {
  size_t n = 99;
  St no_model = rotor_tokenize(nullptr, "a", 1, false, false, nullptr, 0, &n);
  EXPECT_TRUE(Has(no_model, "rotor_tokenize: model is NULL")) << no_model.msg();
  EXPECT_EQ(n, 0u);
  St no_count = rotor_tokenize(model_, "a", 1, false, false, nullptr, 0, nullptr);
  EXPECT_TRUE(Has(no_count, "rotor_tokenize: n_tokens is NULL")) << no_count.msg();
  St no_bytes = rotor_detokenize(model_, nullptr, 0, false, nullptr, 0, nullptr);
  EXPECT_TRUE(Has(no_bytes, "rotor_detokenize: n_bytes is NULL")) << no_bytes.msg();
  St no_ctx = rotor_seq_new(nullptr, nullptr, reinterpret_cast<int32_t*>(&n));
  EXPECT_TRUE(Has(no_ctx, "rotor_seq_new: ctx is NULL")) << no_ctx.msg();
  St no_params = rotor_generate(model_, nullptr, nullptr, nullptr, nullptr);
  EXPECT_TRUE(Has(no_params, "rotor_generate: params is NULL")) << no_params.msg();
}

// Options set in any order: a size set before the policy was silently dropped
// (choosing a policy starts from its defaults), and an option the policy does
// not use vanished with it. Errors found when a sequence is made name the
// fields, as the describe call does (they named the flags, "--kv-keep").
TEST_F(CApiContract, KvOptionsInAnyOrderAndNamedByField) {
  rotor_kv_config* kv = nullptr;
  ASSERT_TRUE(St(rotor_kv_config_new(&kv)).ok());
  ASSERT_TRUE(St(rotor_kv_config_set(kv, "kv_size", "64")).ok());
  ASSERT_TRUE(St(rotor_kv_config_set(kv, "kv", "sink")).ok());
  EXPECT_EQ(Describe(kv).rfind("sink, 64 cells", 0), 0u) << Describe(kv);
  ASSERT_TRUE(St(rotor_kv_config_set(kv, "--kv-size", "32")).ok());  // replaces 64
  EXPECT_EQ(Describe(kv).rfind("sink, 32 cells", 0), 0u) << Describe(kv);

  ASSERT_TRUE(St(rotor_kv_config_set(kv, "kv_keep", "32")).ok());
  EXPECT_NE(Describe(kv).find("kv_keep 32 must be smaller than kv_size 32"), std::string::npos)
      << Describe(kv);
  int32_t seq = 7;
  St refused = rotor_seq_new(ctx_, kv, &seq);
  EXPECT_EQ(refused.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Has(refused, "kv_keep 32 must be smaller than kv_size 32")) << refused.msg();
  EXPECT_EQ(seq, -1);

  ASSERT_TRUE(St(rotor_kv_config_set(kv, "kv", "window")).ok());
  EXPECT_NE(Describe(kv).find("kv_keep is not used by kv window"), std::string::npos)
      << Describe(kv);
  // A bad value is refused at once and changes nothing.
  EXPECT_FALSE(St(rotor_kv_config_set(kv, "kv_size", "-3")).ok());
  rotor_kv_config_free(kv);

  // The K type alone, then both: the more specific one still wins (applied
  // in the order of the calls, kv_type undid kv_type_k).
  rotor_kv_config* types = nullptr;
  ASSERT_TRUE(St(rotor_kv_config_new(&types)).ok());
  ASSERT_TRUE(St(rotor_kv_config_set(types, "kv_type_k", "q8_0")).ok());
  ASSERT_TRUE(St(rotor_kv_config_set(types, "kv_type", "f32")).ok());
  EXPECT_NE(Describe(types).find("q8_0/f32 K/V"), std::string::npos) << Describe(types);
  rotor_kv_config_free(types);
}

// A description's *n_bytes is the size it needs, NUL included, so a buffer of
// that size fits (it gave the length, and a caller retrying with a buffer of
// *n_bytes was refused every time).
TEST_F(CApiContract, DescribeGivesTheSizeABufferNeeds) {
  rotor_kv_config* kv = nullptr;
  ASSERT_TRUE(St(rotor_kv_config_new(&kv)).ok());
  size_t need = 0;
  St probe = rotor_kv_config_describe(kv, model_, nullptr, 0, &need);
  EXPECT_EQ(probe.code(), ROTOR_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(need, 1u);
  std::vector<char> text(need, 'x');
  size_t got = 0;
  St fits = rotor_kv_config_describe(kv, model_, text.data(), text.size(), &got);
  ASSERT_TRUE(fits.ok()) << fits.msg();
  EXPECT_EQ(got, need);
  EXPECT_EQ(std::strlen(text.data()) + 1, need);
  St short_by_one = rotor_kv_config_describe(kv, model_, text.data(), need - 1, &got);
  EXPECT_EQ(short_by_one.code(), ROTOR_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(got, need);
  rotor_kv_config_free(kv);
}

// A bad id after a cached prefix: the call failed, yet the prefix was
// attached (and the id's index counted from after it).
TEST_F(CApiContract, ABadTokenAppendsNothingAfterACachedPrefix) {
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i * 7 % 400);
  int32_t a = -1, b = -1;
  ASSERT_TRUE(St(rotor_seq_new(ctx_, nullptr, &a)).ok());
  ASSERT_TRUE(St(rotor_eval(ctx_, a, prompt.data(), prompt.size(), nullptr)).ok());
  ASSERT_TRUE(St(rotor_seq_new(ctx_, nullptr, &b)).ok());
  prompt.back() = 9999;
  St bad = rotor_eval(ctx_, b, prompt.data(), prompt.size(), nullptr);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Has(bad, "token 9999 (at 39) out of range")) << bad.msg();
  int64_t n = -1;
  ASSERT_TRUE(St(rotor_seq_n_tokens(ctx_, b, &n)).ok());
  EXPECT_EQ(n, 0);
}

// Removing tokens up to the end cuts the text there, as keep_prefix does:
// the cache dropped them but rotor_seq_tokens still listed them, and a file
// saved after new tokens labelled their K/V with the removed ids.
TEST_F(CApiContract, RemovingToTheEndCutsTheText) {
  std::vector<int32_t> text(40);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(1 + i * 11 % 400);
  int32_t s = -1;
  ASSERT_TRUE(St(rotor_seq_new(ctx_, nullptr, &s)).ok());
  ASSERT_TRUE(St(rotor_eval(ctx_, s, text.data(), text.size(), nullptr)).ok());
  ASSERT_TRUE(St(rotor_seq_remove(ctx_, s, 25, 40)).ok());
  const std::vector<int32_t> more = {117, 118, 119};
  ASSERT_TRUE(St(rotor_eval(ctx_, s, more.data(), more.size(), nullptr)).ok());
  int64_t n = -1;
  ASSERT_TRUE(St(rotor_seq_n_tokens(ctx_, s, &n)).ok());
  EXPECT_EQ(n, 28);
  std::vector<int32_t> ids(64);
  size_t got = 0;
  ASSERT_TRUE(St(rotor_seq_tokens(ctx_, s, ids.data(), ids.size(), &got)).ok());
  ids.resize(got);
  std::vector<int32_t> want(text.begin(), text.begin() + 25);
  want.insert(want.end(), more.begin(), more.end());
  EXPECT_EQ(ids, want);
  // A hole keeps the later tokens' indices, and their ids.
  ASSERT_TRUE(St(rotor_seq_remove(ctx_, s, 5, 10)).ok());
  ASSERT_TRUE(St(rotor_seq_tokens(ctx_, s, ids.data(), 64, &got)).ok());
  EXPECT_EQ(got, 28u);
}

// A shift re-rotates cached-RoPE keys; shifted back, the positions are the
// tokens' own again, but the keys were rounded twice: a save is refused (a
// file of them, loaded with the prefix cache on, changed later requests).
TEST_F(CApiContract, ShiftedKeysAreNotSaved) {
  std::vector<int32_t> text(40);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(1 + i * 13 % 400);
  rotor_kv_config* kv = nullptr;
  ASSERT_TRUE(St(rotor_kv_config_new(&kv)).ok());
  ASSERT_TRUE(St(rotor_kv_config_set(kv, "kv_type", "q8_0")).ok());
  int32_t s = -1;
  ASSERT_TRUE(St(rotor_seq_new(ctx_, kv, &s)).ok());
  ASSERT_TRUE(St(rotor_eval(ctx_, s, text.data(), text.size(), nullptr)).ok());
  ASSERT_TRUE(St(rotor_seq_shift(ctx_, s, 0, 40, 3)).ok());
  ASSERT_TRUE(St(rotor_seq_shift(ctx_, s, 0, 40, -3)).ok());
  const std::string path = ::testing::TempDir() + "rotor_capi_shifted.kv";
  St saved = rotor_seq_save(ctx_, s, path.c_str(), nullptr);
  EXPECT_FALSE(saved.ok());
  EXPECT_TRUE(Has(saved, "re-rotated")) << saved.msg();
  // Cleared, the sequence saves again.
  ASSERT_TRUE(St(rotor_seq_clear(ctx_, s)).ok());
  ASSERT_TRUE(St(rotor_eval(ctx_, s, text.data(), text.size(), nullptr)).ok());
  EXPECT_TRUE(St(rotor_seq_save(ctx_, s, path.c_str(), nullptr)).ok());
  std::remove(path.c_str());
  rotor_kv_config_free(kv);
}

TEST_F(CApiContract, OutParametersAreWrittenOnFailure) {
  int64_t count = 77;
  EXPECT_FALSE(St(rotor_seq_n_tokens(ctx_, 12345, &count)).ok());
  EXPECT_EQ(count, 0);
  int32_t copy = 77;
  EXPECT_FALSE(St(rotor_seq_fork(ctx_, 12345, &copy)).ok());
  EXPECT_EQ(copy, -1);
  const float* logits = reinterpret_cast<const float*>(&count);
  EXPECT_FALSE(St(rotor_logits(ctx_, 12345, &logits)).ok());
  EXPECT_EQ(logits, nullptr);

  // prefill_step was unbounded in rotor_generate (rotor_context_new's is).
  rotor_generate_params g = rotor_generate_default_params();
  g.prompt = "Once";
  g.prefill_step = 1 << 21;
  rotor_generate_result r;
  std::memset(&r, 0xAB, sizeof r);
  St big = rotor_generate(model_, &g, nullptr, nullptr, &r);
  EXPECT_EQ(big.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Has(big, "prefill_step 2097152 out of range [0, 1048576]")) << big.msg();
  EXPECT_EQ(r.n_prompt, 0);
  EXPECT_EQ(r.n_generated, 0);
  // -n is n_predict here.
  g.prefill_step = 0;
  g.n_predict = -2;
  St n = rotor_generate(model_, &g, nullptr, nullptr, &r);
  EXPECT_TRUE(Has(n, "n_predict -2 must be >= 0")) << n.msg();
}

// All-NaN logits (weights holding NaN) gave token 0 as a valid draw.
TEST_F(CApiContract, SamplerRefusesLogitsThatAreNotNumbers) {
  const int32_t n_vocab = rotor_model_n_vocab(model_);
  rotor_sampling_params sp = rotor_sampling_greedy_params();
  rotor_sampler* s = nullptr;
  ASSERT_TRUE(St(rotor_sampler_new(&sp, n_vocab, &s)).ok());
  std::vector<float> logits(n_vocab, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(rotor_sampler_sample(s, logits.data()), -1);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  logits[5] = 1;  // -inf: banned tokens, a valid input
  EXPECT_EQ(rotor_sampler_sample(s, logits.data()), 5);
  logits[7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(rotor_sampler_sample(s, logits.data()), -1);
  EXPECT_EQ(rotor_sampler_sample(s, nullptr), -1);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(rotor_sampler_sample(s, logits.data()), -1);  // every token banned (it gave 0)
  rotor_sampler_free(s);
}

// SentencePiece: a space after an invalid byte came back as U+2581.
TEST_F(CApiContract, InvalidUtf8RoundTrips) {
  for (const std::string text : {"\xff x", "\xe2\x82 x", "a\xc3 b c", "\x80 z"}) {
    int32_t ids[64];
    size_t n = 0, n_bytes = 0;
    ASSERT_TRUE(St(rotor_tokenize(model_, text.data(), text.size(), false, false, ids, 64, &n))
                    .ok());
    char back[64];
    ASSERT_TRUE(St(rotor_detokenize(model_, ids, n, false, back, sizeof back, &n_bytes)).ok());
    EXPECT_EQ(std::string(back, n_bytes), text);
  }
}

}  // namespace capi_contract_test
}  // namespace
