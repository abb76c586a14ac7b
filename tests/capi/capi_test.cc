// The C API (include/rotor/rotor.h) on the bundled model: greedy text equal to
// the reference (as `rotor generate`), batched equal to alone with per-sequence
// KV options, sequence operations, KV files, and a status with a message for
// every error path.
#include "rotor/rotor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.h"

namespace {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";

using rotor_capi_test::St;

#define ASSERT_OK(expr)                       \
  do {                                        \
    St st_(expr);                             \
    ASSERT_TRUE(st_.ok()) << st_.msg();       \
  } while (0)

std::vector<int32_t> ReferenceIds() {
  std::ifstream in(ROTOR_TESTDATA_DIR "/stories260K-greedy-once-upon-a-time.ids");
  return {std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>()};
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    rotor_model_params p = rotor_model_default_params();
    p.n_threads = 2;
    p.max_seqs = 4;
    St s = rotor_model_load(kModel.c_str(), &p, &model_);
    ASSERT_TRUE(s.ok()) << s.msg();
    rotor_context_params cp = rotor_context_default_params();
    cp.max_seqs = 4;
    St c = rotor_context_new(model_, &cp, &ctx_);
    ASSERT_TRUE(c.ok()) << c.msg();
  }
  void TearDown() override {
    rotor_context_free(ctx_);
    rotor_model_free(model_);
  }

  std::vector<int32_t> Tokenize(const std::string& text) {
    std::vector<int32_t> ids(256);
    size_t n = 0;
    St s = rotor_tokenize(model_, text.data(), text.size(), true, false, ids.data(), ids.size(),
                          &n);
    EXPECT_TRUE(s.ok()) << s.msg();
    ids.resize(n);
    return ids;
  }
  rotor_kv_config* Kv(std::vector<std::pair<const char*, const char*>> opts) {
    rotor_kv_config* kv = nullptr;
    EXPECT_TRUE(St(rotor_kv_config_new(&kv)).ok());
    for (auto [k, v] : opts) {
      St s = rotor_kv_config_set(kv, k, v);
      EXPECT_TRUE(s.ok()) << s.msg();
    }
    return kv;
  }
  // Greedy continuation of `prompt` in `seq`, n tokens, one eval per token.
  std::vector<int32_t> Greedy(int32_t seq, const std::vector<int32_t>& prompt, int n) {
    std::vector<int32_t> out;
    St s = rotor_eval(ctx_, seq, prompt.data(), prompt.size(), nullptr);
    EXPECT_TRUE(s.ok()) << s.msg();
    for (int i = 0; i < n && s.ok(); ++i) {
      const float* logits = nullptr;
      St l = rotor_logits(ctx_, seq, &logits);
      EXPECT_TRUE(l.ok()) << l.msg();
      if (!l.ok()) break;
      const int32_t t = Argmax(logits);
      out.push_back(t);
      St e = rotor_eval(ctx_, seq, &t, 1, nullptr);
      EXPECT_TRUE(e.ok()) << e.msg();
    }
    return out;
  }
  int32_t Argmax(const float* logits) {
    const int32_t n = rotor_model_n_vocab(model_);
    return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  }
  int32_t NewSeq(rotor_kv_config* kv = nullptr) {
    int32_t seq = -1;
    St s = rotor_seq_new(ctx_, kv, &seq);
    EXPECT_TRUE(s.ok()) << s.msg();
    rotor_kv_config_free(kv);
    return seq;
  }

  rotor_model* model_ = nullptr;
  rotor_context* ctx_ = nullptr;
};

TEST(CApiVersion, VersionAndStatusOfSuccess) {
  EXPECT_STREQ(rotor_version(), "0.9.0");
  EXPECT_EQ(rotor_api_version(), ROTOR_API_VERSION);
  EXPECT_EQ(rotor_status_code(nullptr), ROTOR_OK);
  EXPECT_STREQ(rotor_status_message(nullptr), "");
  rotor_status_free(nullptr);
}

TEST(CApiErrors, BadFilesAndParamsGiveStatusesNamingThem) {
  rotor_model* m = reinterpret_cast<rotor_model*>(1);
  St missing = rotor_model_load("/nonexistent/model.gguf", nullptr, &m);
  EXPECT_EQ(missing.code(), ROTOR_ERR_IO);
  EXPECT_NE(missing.msg().find("/nonexistent/model.gguf"), std::string::npos) << missing.msg();
  EXPECT_EQ(m, nullptr);

  // A truncated copy of the model.
  const std::string cut = testing::TempDir() + "/capi_truncated.gguf";
  {
    std::ifstream in(kModel, std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::ofstream(cut, std::ios::binary).write(bytes.data(), 5000);
  }
  St truncated = rotor_model_load(cut.c_str(), nullptr, &m);
  EXPECT_EQ(truncated.code(), ROTOR_ERR_IO);
  EXPECT_NE(truncated.msg().find("capi_truncated.gguf"), std::string::npos) << truncated.msg();

  rotor_model_params p = rotor_model_default_params();
  p.n_ctx = -5;
  St bad = rotor_model_load(kModel.c_str(), &p, &m);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("-5"), std::string::npos) << bad.msg();
  St null_out = rotor_model_load(kModel.c_str(), nullptr, nullptr);
  EXPECT_EQ(null_out.code(), ROTOR_ERR_INVALID_ARGUMENT);
}

TEST_F(CApi, GreedyTextEqualsTheReferenceThroughEvalAndThroughGenerate) {
  const std::vector<int32_t> ref = ReferenceIds();
  const std::vector<int32_t> prompt = Tokenize("Once upon a time");
  ASSERT_EQ(prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  const std::vector<int32_t> got = Greedy(NewSeq(), prompt, 196);
  EXPECT_EQ(got, std::vector<int32_t>(ref.begin() + 4, ref.end()));

  std::ifstream in(ROTOR_TESTDATA_DIR "/stories260K-greedy-once-upon-a-time.txt");
  const std::string ref_text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::string streamed;
  rotor_generate_params g = rotor_generate_default_params();
  g.prompt = "Once upon a time";
  g.n_predict = 196;
  g.sampling = rotor_sampling_greedy_params();
  rotor_generate_result r{};
  ASSERT_OK(rotor_generate(
      model_, &g,
      [](const char* t, size_t n, void* user) {
        static_cast<std::string*>(user)->append(t, n);
        return true;
      },
      &streamed, &r));
  EXPECT_EQ(r.n_prompt, 5);
  EXPECT_EQ(r.n_generated, 196);
  EXPECT_EQ(r.finish, ROTOR_FINISH_LENGTH);
  EXPECT_EQ("Once upon a time" + streamed, ref_text.substr(0, 16 + streamed.size()));

  // The detokenized ids give the same text.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), got.begin(), got.end());
  std::string text(4096, '\0');
  size_t n_bytes = 0;
  ASSERT_OK(rotor_detokenize(model_, all.data(), all.size(), false, text.data(), text.size(),
                             &n_bytes));
  EXPECT_EQ(text.substr(0, n_bytes), "Once upon a time" + streamed);
}

TEST_F(CApi, GenerateFollowsAGrammarOrASchema) {
  rotor_generate_params g = rotor_generate_default_params();
  g.prompt = "Once upon a time";
  g.n_predict = 100;
  g.sampling.seed = 3;
  g.grammar = "root ::= \"yes\" | \"no\"";
  auto append = [](const char* t, size_t n, void* user) {
    static_cast<std::string*>(user)->append(t, n);
    return true;
  };
  std::string text;
  rotor_generate_result r{};
  ASSERT_OK(rotor_generate(model_, &g, append, &text, &r));
  EXPECT_TRUE(text == "yes" || text == "no") << text;
  EXPECT_EQ(r.finish, ROTOR_FINISH_EOS);

  g.grammar = nullptr;
  g.json_schema = R"({"type": "array", "items": {"type": "integer"}, "maxItems": 2})";
  text.clear();
  ASSERT_OK(rotor_generate(model_, &g, append, &text, &r));
  EXPECT_EQ(text.front(), '[') << text;
  EXPECT_EQ(text.back(), ']') << text;

  g.json_schema = R"({"type": "string", "pattern": "x"})";
  St bad = rotor_generate(model_, &g, append, &text, &r);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("unsupported keyword 'pattern'"), std::string::npos) << bad.msg();
  g.json_schema = nullptr;
  g.grammar = "root ::= nothing";
  St bad_gbnf = rotor_generate(model_, &g, append, &text, &r);
  EXPECT_NE(bad_gbnf.msg().find("undefined rule 'nothing'"), std::string::npos) << bad_gbnf.msg();
}

TEST_F(CApi, TokenBuffersTooSmallReportTheSizeNeeded) {
  size_t n = 0;
  St s = rotor_tokenize(model_, "Once upon a time", 16, true, false, nullptr, 0, &n);
  EXPECT_EQ(s.code(), ROTOR_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, 5u);
  const int32_t ids[2] = {403, 999999};
  char buf[8];
  St bad = rotor_detokenize(model_, ids, 2, false, buf, sizeof buf, &n);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("999999"), std::string::npos) << bad.msg();
  St small = rotor_detokenize(model_, ids, 1, false, buf, 1, &n);
  EXPECT_EQ(small.code(), ROTOR_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(n, 1u);
}

TEST_F(CApi, KvOptionErrorsNameTheOptionAndValue) {
  rotor_kv_config* kv = nullptr;
  ASSERT_OK(rotor_kv_config_new(&kv));
  St unknown = rotor_kv_config_set(kv, "kv_sise", "64");
  EXPECT_EQ(unknown.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(unknown.msg().find("kv_sise"), std::string::npos) << unknown.msg();
  St policy = rotor_kv_config_set(kv, "kv", "lru");
  EXPECT_NE(policy.msg().find("lru"), std::string::npos) << policy.msg();
  ASSERT_OK(rotor_kv_config_set(kv, "--kv", "sink"));
  ASSERT_OK(rotor_kv_config_set(kv, "kv_size", "100000"));
  int32_t seq = -1;
  St big = rotor_seq_new(ctx_, kv, &seq);  // larger than the 512-token context
  EXPECT_EQ(big.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(big.msg().find("100000"), std::string::npos) << big.msg();
  ASSERT_OK(rotor_kv_config_set(kv, "kv_size", "64"));
  char text[256];
  ASSERT_OK(rotor_kv_config_describe(kv, model_, text, sizeof text, nullptr));
  EXPECT_NE(std::string(text).find("sink, 64 cells"), std::string::npos) << text;
  // llama.cpp's spelling of a K type, and a quantized cache that runs.
  ASSERT_OK(rotor_kv_config_set(kv, "--cache-type-k", "q8_0"));
  ASSERT_OK(rotor_kv_config_describe(kv, model_, text, sizeof text, nullptr));
  EXPECT_NE(std::string(text).find("q8_0"), std::string::npos) << text;
  ASSERT_OK(rotor_seq_new(ctx_, kv, &seq));
  const std::vector<int32_t> prompt = Tokenize("Once upon a time");
  ASSERT_OK(rotor_eval(ctx_, seq, prompt.data(), prompt.size(), nullptr));
  rotor_kv_config_free(kv);
}

TEST_F(CApi, AFullContextIsAnErrorAndAppendsNothing) {
  const int32_t seq = NewSeq();
  std::vector<int32_t> tokens(600, 403);  // the model's context is 512
  St s = rotor_eval(ctx_, seq, tokens.data(), tokens.size(), nullptr);
  EXPECT_EQ(s.code(), ROTOR_ERR_CONTEXT_FULL);
  EXPECT_NE(s.msg().find("600"), std::string::npos) << s.msg();
  int64_t n = -1;
  ASSERT_OK(rotor_seq_n_tokens(ctx_, seq, &n));
  EXPECT_EQ(n, 0);
  const float* logits = nullptr;
  EXPECT_EQ(St(rotor_logits(ctx_, seq, &logits)).code(), ROTOR_ERR_INVALID_ARGUMENT);
  const int32_t bad = -3;
  St b = rotor_eval(ctx_, seq, &bad, 1, nullptr);
  EXPECT_NE(b.msg().find("-3"), std::string::npos) << b.msg();
  EXPECT_EQ(St(rotor_eval(ctx_, 77, &bad, 1, nullptr)).code(), ROTOR_ERR_INVALID_ARGUMENT);

  rotor_generate_params g = rotor_generate_default_params();
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "Once upon a time ";
  g.prompt = long_prompt.c_str();
  St gen = rotor_generate(model_, &g, nullptr, nullptr, nullptr);
  EXPECT_EQ(gen.code(), ROTOR_ERR_CONTEXT_FULL) << gen.msg();
}

// What a careless C program did (found at the end of the sixty-ninth
// session): a declared function missing from the library, counts and ids
// that aborted on a CHECK, a shift that wrapped positions, and sequences
// looked up outside the model's lock.
TEST_F(CApi, CarelessCallsGetStatusesNotAborts) {
  const int32_t seq = NewSeq();
  const std::vector<int32_t> prompt = Tokenize("Once upon a time");
  ASSERT_OK(rotor_eval(ctx_, seq, prompt.data(), prompt.size(), nullptr));
  int64_t cached = -1;
  ASSERT_OK(rotor_seq_n_cached(ctx_, seq, &cached));  // did not link
  EXPECT_EQ(cached, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(St(rotor_seq_n_cached(ctx_, seq, nullptr)).code(), ROTOR_ERR_INVALID_ARGUMENT);
  // Counts past int32 (a negative int64, or 2^63 that appended nothing).
  for (size_t n : {static_cast<size_t>(-5), size_t{1} << 63}) {
    St e = rotor_eval(ctx_, seq, prompt.data(), n, nullptr);
    EXPECT_EQ(e.code(), ROTOR_ERR_INVALID_ARGUMENT) << n;
    EXPECT_NE(e.msg().find("more than any context holds"), std::string::npos) << e.msg();
    rotor_batch_entry entry = {seq, prompt.data(), n};
    EXPECT_EQ(St(rotor_eval_batch(ctx_, &entry, 1)).code(), ROTOR_ERR_INVALID_ARGUMENT) << n;
  }
  int64_t n_tokens = -1;
  ASSERT_OK(rotor_seq_n_tokens(ctx_, seq, &n_tokens));
  EXPECT_EQ(n_tokens, static_cast<int64_t>(prompt.size()));
  // A shift past int32 positions wrapped them and returned OK.
  St shift = rotor_seq_shift(ctx_, seq, 0, n_tokens, INT32_MAX);
  EXPECT_NE(shift.code(), ROTOR_OK);
  EXPECT_NE(shift.msg().find("would move past 2147483647"), std::string::npos) << shift.msg();
  ASSERT_OK(rotor_seq_shift(ctx_, seq, 0, n_tokens, 1000));
  // An id outside the vocabulary: ignored (it aborted).
  rotor_sampling_params sp = rotor_sampling_default_params();
  rotor_sampler* sampler = nullptr;
  ASSERT_OK(rotor_sampler_new(&sp, rotor_model_n_vocab(model_), &sampler));
  rotor_sampler_accept(sampler, -1);
  rotor_sampler_accept(sampler, rotor_model_n_vocab(model_));
  rotor_sampler_accept(nullptr, 3);
  rotor_sampler_free(sampler);
  // Sequences freed and made on one thread while another evaluates its own:
  // each call finds its sequence under the model's lock.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      int32_t other = -1;
      if (St(rotor_seq_new(ctx_, nullptr, &other)).ok()) rotor_seq_free(ctx_, other);
    }
  });
  for (int i = 0; i < 200; ++i) {
    const int32_t t = prompt[i % prompt.size()];
    St e = rotor_eval(ctx_, seq, &t, 1, nullptr);
    if (e.code() == ROTOR_ERR_CONTEXT_FULL) ASSERT_OK(rotor_seq_clear(ctx_, seq));
  }
  stop = true;
  churn.join();
}

TEST_F(CApi, BatchedSequencesWithTheirOwnPoliciesEqualEachAlone) {
  const std::vector<std::vector<int32_t>> prompts = {
      Tokenize("Once upon a time"), Tokenize("The little dog ran"), Tokenize("Lily wanted")};
  auto kvs = [&](int i) {
    if (i == 0) return Kv({});
    if (i == 1) return Kv({{"kv", "sink"}, {"kv_size", "32"}, {"kv_keep", "4"}});
    return Kv({{"kv", "h2o"}, {"kv_size", "32"}});
  };
  const int n_gen = 60;  // past the 32-cell caches
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 3; ++i) {
    const int32_t seq = NewSeq(kvs(i));
    alone.push_back(Greedy(seq, prompts[i], n_gen));
    ASSERT_OK(rotor_seq_free(ctx_, seq));
  }
  int32_t seqs[3];
  std::vector<rotor_batch_entry> batch;
  for (int i = 0; i < 3; ++i) {
    seqs[i] = NewSeq(kvs(i));
    batch.push_back({seqs[i], prompts[i].data(), prompts[i].size()});
  }
  std::vector<std::vector<int32_t>> together(3);
  std::vector<int32_t> next(3);
  ASSERT_OK(rotor_eval_batch(ctx_, batch.data(), batch.size()));
  for (int step = 0; step < n_gen; ++step) {
    for (int i = 0; i < 3; ++i) {
      const float* logits = nullptr;
      ASSERT_OK(rotor_logits(ctx_, seqs[i], &logits));
      next[i] = Argmax(logits);
      together[i].push_back(next[i]);
      batch[i] = {seqs[i], &next[i], 1};
    }
    ASSERT_OK(rotor_eval_batch(ctx_, batch.data(), batch.size()));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << "sequence " << i;
  batch[1] = batch[0];
  St twice = rotor_eval_batch(ctx_, batch.data(), 2);
  EXPECT_NE(twice.msg().find("twice"), std::string::npos) << twice.msg();
}

TEST_F(CApi, AllLogitsEqualTheLastRowAndChunkingChangesNothing) {
  const int32_t n_vocab = rotor_model_n_vocab(model_);
  const std::vector<int32_t> prompt = Tokenize("Once upon a time there was a little girl");
  std::vector<float> all(prompt.size() * n_vocab);
  // f32 K/V: with f16 a chunk and single tokens differ by about 1e-3 (see
  // docs/BENCHMARKS.md, open question of the ninth session).
  const int32_t a = NewSeq(Kv({{"kv_type", "f32"}}));
  ASSERT_OK(rotor_eval(ctx_, a, prompt.data(), prompt.size(), all.data()));
  const float* last = nullptr;
  ASSERT_OK(rotor_logits(ctx_, a, &last));
  EXPECT_TRUE(std::equal(last, last + n_vocab, all.end() - n_vocab));
  // Token by token in another sequence: the same rows.
  const int32_t b = NewSeq(Kv({{"kv_type", "f32"}}));
  for (size_t i = 0; i < prompt.size(); ++i) {
    ASSERT_OK(rotor_eval(ctx_, b, &prompt[i], 1, nullptr));
    const float* row = nullptr;
    ASSERT_OK(rotor_logits(ctx_, b, &row));
    for (int32_t v = 0; v < n_vocab; ++v)
      ASSERT_NEAR(row[v], all[i * n_vocab + v], 1e-4) << "token " << i << " vocab " << v;
  }
}

TEST_F(CApi, SequenceOperations) {
  const std::vector<int32_t> prompt = Tokenize("Once upon a time");
  const int32_t seq = NewSeq();
  const std::vector<int32_t> first = Greedy(seq, prompt, 20);
  // Fork: the copy continues as the original would.
  int32_t copy = -1;
  ASSERT_OK(rotor_seq_fork(ctx_, seq, &copy));
  const std::vector<int32_t> a = Greedy(seq, {first.back()}, 10);
  const std::vector<int32_t> b = Greedy(copy, {first.back()}, 10);
  EXPECT_EQ(a, b);
  // Keep a prefix and run it again: the same continuation.
  const int64_t keep = static_cast<int64_t>(prompt.size()) + 10;
  ASSERT_OK(rotor_seq_keep_prefix(ctx_, seq, keep));
  int64_t n = 0;
  ASSERT_OK(rotor_seq_n_tokens(ctx_, seq, &n));
  EXPECT_EQ(n, keep);
  const std::vector<int32_t> again = Greedy(seq, {first[9]}, 9);
  EXPECT_EQ(again, std::vector<int32_t>(first.begin() + 10, first.begin() + 19));
  // Out of range: an error naming the numbers; the sequence unchanged.
  St bad = rotor_seq_remove(ctx_, seq, 5, 100000);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("100000"), std::string::npos) << bad.msg();
  ASSERT_OK(rotor_seq_remove(ctx_, seq, 2, 4));
  ASSERT_OK(rotor_seq_shift(ctx_, seq, 4, n, -2));
  ASSERT_OK(rotor_seq_clear(ctx_, seq));
  ASSERT_OK(rotor_seq_n_tokens(ctx_, seq, &n));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Greedy(seq, prompt, 20), first);
}

TEST_F(CApi, SavedSequenceLoadsAndContinuesIdentically) {
  const int32_t n_vocab = rotor_model_n_vocab(model_);
  const std::vector<int32_t> prompt = Tokenize("Once upon a time there was a big red ball");
  const int32_t seq = NewSeq();
  ASSERT_OK(rotor_eval(ctx_, seq, prompt.data(), prompt.size(), nullptr));
  const std::string path = testing::TempDir() + "/capi_seq.kv";
  int64_t bytes = 0;
  ASSERT_OK(rotor_seq_save(ctx_, seq, path.c_str(), &bytes));
  EXPECT_EQ(bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  const int32_t next = 403;
  ASSERT_OK(rotor_eval(ctx_, seq, &next, 1, nullptr));
  const float* want = nullptr;
  ASSERT_OK(rotor_logits(ctx_, seq, &want));
  const std::vector<float> expected(want, want + n_vocab);

  const int32_t loaded = NewSeq();
  int64_t n_loaded = 0;
  ASSERT_OK(rotor_seq_load(ctx_, loaded, path.c_str(), &n_loaded));
  EXPECT_EQ(n_loaded, static_cast<int64_t>(prompt.size()));
  std::vector<int32_t> ids(64);
  size_t n_ids = 0;
  ASSERT_OK(rotor_seq_tokens(ctx_, loaded, ids.data(), ids.size(), &n_ids));
  ids.resize(n_ids);
  EXPECT_EQ(ids, prompt);
  ASSERT_OK(rotor_eval(ctx_, loaded, &next, 1, nullptr));
  const float* got = nullptr;
  ASSERT_OK(rotor_logits(ctx_, loaded, &got));
  EXPECT_EQ(std::vector<float>(got, got + n_vocab), expected);

  // Into a sequence that holds tokens, or from a damaged file: clear errors.
  St busy = rotor_seq_load(ctx_, loaded, path.c_str(), nullptr);
  EXPECT_NE(busy.msg().find("empty"), std::string::npos) << busy.msg();
  { std::ofstream(path, std::ios::binary | std::ios::in).write("XXXX", 4); }
  const int32_t fresh = NewSeq();
  St damaged = rotor_seq_load(ctx_, fresh, path.c_str(), nullptr);
  EXPECT_EQ(damaged.code(), ROTOR_ERR_IO);
  EXPECT_NE(damaged.msg().find("capi_seq.kv"), std::string::npos) << damaged.msg();
  // h2o does not share prefixes: no file.
  const int32_t h2o = NewSeq(Kv({{"kv", "h2o"}, {"kv_size", "32"}}));
  ASSERT_OK(rotor_eval(ctx_, h2o, prompt.data(), prompt.size(), nullptr));
  St refused = rotor_seq_save(ctx_, h2o, path.c_str(), nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.msg().find("h2o"), std::string::npos) << refused.msg();
}

TEST_F(CApi, SamplerIsSeededAndChecksItsParameters) {
  rotor_sampling_params p = rotor_sampling_default_params();
  p.top_p = 1.5f;
  rotor_sampler* s = nullptr;
  St bad = rotor_sampler_new(&p, 512, &s);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("top_p"), std::string::npos) << bad.msg();
  p = rotor_sampling_default_params();
  p.seed = 99;
  std::vector<float> logits(512);
  for (int i = 0; i < 512; ++i) logits[i] = std::sin(i * 0.37f) * 3;
  std::vector<int32_t> draws[2];
  for (auto& d : draws) {
    ASSERT_OK(rotor_sampler_new(&p, 512, &s));
    EXPECT_EQ(rotor_sampler_seed(s), 99u);
    for (int i = 0; i < 50; ++i) {
      const int32_t t = rotor_sampler_sample(s, logits.data());
      rotor_sampler_accept(s, t);
      d.push_back(t);
    }
    rotor_sampler_free(s);
  }
  EXPECT_EQ(draws[0], draws[1]);
}

TEST_F(CApi, GenerateStopsWhenTheCallbackSaysSoAndOnStopStrings) {
  rotor_generate_params g = rotor_generate_default_params();
  g.prompt = "Once upon a time";
  g.sampling = rotor_sampling_greedy_params();
  int calls = 0;
  rotor_generate_result r{};
  ASSERT_OK(rotor_generate(
      model_, &g,
      [](const char*, size_t, void* user) { return ++*static_cast<int*>(user) < 5; }, &calls,
      &r));
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(r.finish, ROTOR_FINISH_CANCELLED);
  const char* stop[] = {"Lily"};
  g.stop = stop;
  g.n_stop = 1;
  std::string text;
  ASSERT_OK(rotor_generate(
      model_, &g,
      [](const char* t, size_t n, void* user) {
        static_cast<std::string*>(user)->append(t, n);
        return true;
      },
      &text, &r));
  EXPECT_EQ(r.finish, ROTOR_FINISH_STOP);
  EXPECT_EQ(text.find("Lily"), std::string::npos) << text;
}

}  // namespace
