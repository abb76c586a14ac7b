// The C API on a vocabulary alone (vocab_only): tokens and token queries work,
// calls that need weights say why they fail; rotor_token_piece.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capi_test_util.h"

#include "rotor/rotor.h"

namespace {
namespace capi_vocab_test {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";
const std::string kGpt2Vocab = ROTOR_TESTDATA_DIR "/ggml-vocab-gpt-2.gguf";

using rotor_capi_test::St;

rotor_model* Load(const std::string& path, bool vocab_only) {
  rotor_model_params p = rotor_model_default_params();
  p.n_threads = 1;
  p.vocab_only = vocab_only;
  rotor_model* m = nullptr;
  St s = rotor_model_load(path.c_str(), &p, &m);
  EXPECT_TRUE(s.ok()) << s.msg();
  return m;
}

std::vector<int32_t> Tokenize(rotor_model* m, const std::string& text, bool special = false) {
  std::vector<int32_t> ids(text.size() + 2);
  size_t n = 0;
  St s = rotor_tokenize(m, text.data(), text.size(), true, special, ids.data(), ids.size(), &n);
  EXPECT_TRUE(s.ok()) << s.msg();
  ids.resize(n);
  return ids;
}

std::string Piece(rotor_model* m, int32_t id, bool special) {
  char buf[64];
  size_t n = 0;
  St s = rotor_token_piece(m, id, special, buf, sizeof buf, &n);
  EXPECT_TRUE(s.ok()) << s.msg();
  return std::string(buf, n);
}

TEST(CApiVocab, VocabularyOnlyFileTokenizesAndHasNoWeights) {
  EXPECT_TRUE(rotor_model_default_params().vocab_only == false);
  rotor_model* m = Load(kGpt2Vocab, true);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Tokenize(m, "Hello world"), (std::vector<int32_t>{15496, 995}));  // llama.cpp's
  EXPECT_EQ(rotor_model_n_vocab(m), 50257);
  EXPECT_EQ(rotor_model_n_ctx(m), 0);
  EXPECT_EQ(rotor_model_n_ctx_train(m), 0);
  EXPECT_TRUE(rotor_model_token_is_eog(m, 50256));
  EXPECT_NE(std::string(rotor_model_description(m)).find("no weights"), std::string::npos);
  const int32_t ids[2] = {15496, 995};
  char text[32];
  size_t n = 0;
  St d = rotor_detokenize(m, ids, 2, false, text, sizeof text, &n);
  ASSERT_TRUE(d.ok()) << d.msg();
  EXPECT_EQ(std::string(text, n), "Hello world");

  rotor_context* ctx = nullptr;
  St c = rotor_context_new(m, nullptr, &ctx);
  EXPECT_EQ(c.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(c.msg().find("vocab_only"), std::string::npos) << c.msg();
  EXPECT_EQ(ctx, nullptr);
  rotor_generate_params gp = rotor_generate_default_params();
  gp.prompt = "Hello";
  St g = rotor_generate(m, &gp, nullptr, nullptr, nullptr);
  EXPECT_EQ(g.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g.msg().find("rotor_generate"), std::string::npos) << g.msg();
  rotor_kv_config* kv = nullptr;
  ASSERT_TRUE(St(rotor_kv_config_new(&kv)).ok());
  St k = rotor_kv_config_describe(kv, m, text, sizeof text, &n);
  EXPECT_EQ(k.code(), ROTOR_ERR_INVALID_ARGUMENT);
  rotor_kv_config_free(kv);
  rotor_model_free(m);
}

TEST(CApiVocab, VocabOnlyOfAModelTokenizesAsTheModel) {
  rotor_model* full = Load(kModel, false);
  rotor_model* vocab = Load(kModel, true);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(vocab, nullptr);
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(Tokenize(vocab, text), Tokenize(full, text));
  EXPECT_EQ(rotor_model_n_vocab(vocab), rotor_model_n_vocab(full));
  EXPECT_EQ(rotor_model_n_ctx_train(vocab), rotor_model_n_ctx_train(full));  // it was 0
  EXPECT_GT(rotor_model_n_ctx_train(vocab), 0);
  EXPECT_EQ(rotor_model_token_bos(vocab), rotor_model_token_bos(full));
  EXPECT_EQ(rotor_model_token_eos(vocab), rotor_model_token_eos(full));
  rotor_model_free(vocab);
  rotor_model_free(full);
}

TEST(CApiVocab, WithoutVocabOnlyAVocabularyFileIsAnErrorNamingIt) {
  rotor_model* m = nullptr;
  St s = rotor_model_load(kGpt2Vocab.c_str(), nullptr, &m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.msg().find("ggml-vocab-gpt-2.gguf"), std::string::npos) << s.msg();
  EXPECT_EQ(m, nullptr);
  rotor_model_params p = rotor_model_default_params();
  p.vocab_only = true;
  St missing = rotor_model_load("/nonexistent/vocab.gguf", &p, &m);
  EXPECT_EQ(missing.code(), ROTOR_ERR_IO);
  EXPECT_NE(missing.msg().find("/nonexistent/vocab.gguf"), std::string::npos) << missing.msg();
  EXPECT_EQ(m, nullptr);
}

TEST(CApiVocab, TokenPieces) {
  rotor_model* m = Load(kGpt2Vocab, true);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Piece(m, 428, false), " this");
  EXPECT_EQ(Piece(m, 12520, false), " \xf0\x9f");  // part of a UTF-8 character
  EXPECT_EQ(Piece(m, 50256, false), "");
  EXPECT_EQ(Piece(m, 50256, true), "<|endoftext|>");
  size_t n = 0;
  char small[2];
  St s = rotor_token_piece(m, 50256, true, small, sizeof small, &n);
  EXPECT_EQ(s.code(), ROTOR_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, 13u);
  St bad = rotor_token_piece(m, 50257, true, small, sizeof small, &n);
  EXPECT_EQ(bad.code(), ROTOR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.msg().find("50257"), std::string::npos) << bad.msg();
  St neg = rotor_token_piece(m, -1, true, small, sizeof small, &n);
  EXPECT_EQ(neg.code(), ROTOR_ERR_INVALID_ARGUMENT);
  rotor_model_free(m);

  rotor_model* spm = Load(ROTOR_MODELS_DIR "/ggml-vocab-llama-spm.gguf", true);
  ASSERT_NE(spm, nullptr);
  EXPECT_EQ(Piece(spm, 1, true), "<s>");
  EXPECT_EQ(Piece(spm, 15043, false), " Hello");
  EXPECT_EQ(Piece(spm, 13, false), "\n");          // <0x0A>
  EXPECT_EQ(Piece(spm, 3 + 0xF0, false), "\xf0");  // <0xF0>
  rotor_model_free(spm);
}

}  // namespace capi_vocab_test
}  // namespace
