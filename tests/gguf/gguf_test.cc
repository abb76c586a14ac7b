// Reader tests on the bundled models and test data.
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>

#include "tensor/fp16.h"

namespace rotor {
namespace {

const std::string kStories = std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf";
const std::string kStoriesF16 = std::string(ROTOR_TESTDATA_DIR) + "/stories260K-F16.gguf";
const std::string kQuant = std::string(ROTOR_TESTDATA_DIR) + "/quant-vectors.gguf";
const std::string kVocabSpm = std::string(ROTOR_MODELS_DIR) + "/ggml-vocab-llama-spm.gguf";
const std::string kVocabGpt2 = std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf";

std::unique_ptr<GgufFile> MustOpen(const std::string& path) {
  auto r = GgufFile::Open(path);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(GgufReader, Stories260KMetadata) {
  auto f = MustOpen(kStories);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->path(), kStories);
  EXPECT_EQ(f->file_size(), 1185376u);
  EXPECT_EQ(f->metadata_count(), 19u);
  EXPECT_EQ(f->metadata().front().key, "tokenizer.ggml.tokens");  // file order

  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f->GetInt("llama.block_count"), 5);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f->GetInt("llama.context_length"), 512);
  EXPECT_EQ(*f->GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.seperator_token_id"), 4294967295);
  EXPECT_NEAR(*f->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(*f->GetFloat("llama.context_length"), 512.0);  // integers are numbers too

  auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  auto scores = f->GetFloatArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok()) << scores.message();
  EXPECT_EQ(scores->size(), 512u);
  auto types = f->GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.message();
  ASSERT_EQ(types->size(), 512u);
  EXPECT_EQ((*types)[0], 2);  // unknown
  EXPECT_EQ((*types)[1], 3);  // control

  const GgufValue* v = f->Find("tokenizer.ggml.tokens");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->is_array());
  EXPECT_EQ(v->array_type(), GgufType::kString);
  EXPECT_EQ(v->StringAt(2), "</s>");
  EXPECT_TRUE(f->Has("llama.block_count"));
  EXPECT_FALSE(f->Has("llama.block"));
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST(GgufReader, GetterErrorsAndDefaults) {
  auto f = MustOpen(kStories);
  ASSERT_TRUE(f);
  auto missing = f->GetInt("llama.nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("gguf: " + kStories + ": key 'llama.nope' not found"),
            std::string::npos)
      << missing.message();
  auto wrong = f->GetInt("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("expected an integer"), std::string::npos) << wrong.message();
  EXPECT_EQ(*f->GetIntOr("llama.nope", 7), 7);
  EXPECT_FALSE(f->GetIntOr("general.architecture", 7).ok());
  EXPECT_EQ(*f->GetIntOr("llama.block_count", 7), 5);
  EXPECT_EQ(*f->GetFloatOr("llama.rope.freq_base", 10000.0), 10000.0);
  EXPECT_FALSE(f->GetFloatOr("general.name", 1.0).ok());
  EXPECT_EQ(*f->GetBoolOr("tokenizer.ggml.add_bos_token", true), true);
  EXPECT_FALSE(f->GetBoolOr("llama.block_count", true).ok());
  EXPECT_EQ(*f->GetStringOr("tokenizer.ggml.pre", "default"), "default");
  EXPECT_FALSE(f->GetStringOr("llama.block_count", "x").ok());
  EXPECT_FALSE(f->GetString("tokenizer.ggml.tokens").ok());
  EXPECT_FALSE(f->GetStringArray("tokenizer.ggml.scores").ok());
  EXPECT_FALSE(f->GetFloatArray("tokenizer.ggml.token_type").ok());
  EXPECT_FALSE(f->GetIntArray("tokenizer.ggml.scores").ok());
  auto wrong_array = f->GetIntArray("tokenizer.ggml.tokens");
  EXPECT_NE(wrong_array.message().find("array of string"), std::string::npos);
}

TEST(GgufReader, Stories260KTensors) {
  auto f = MustOpen(kStories);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->data_offset() % f->alignment(), 0u);

  const GgufTensor* emb = f->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::kF32);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->n_elements, 64 * 512);
  EXPECT_EQ(emb->rows(), 512);
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  EXPECT_EQ(emb->offset, 0u);
  EXPECT_EQ(emb->data, f->bytes() + f->data_offset());

  const GgufTensor* out = f->FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->ne, (std::vector<int64_t>{64, 512}));
  const GgufTensor* q = f->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 64}));
  const GgufTensor* k = f->FindTensor("blk.4.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne, (std::vector<int64_t>{64, 32}));
  const GgufTensor* down = f->FindTensor("blk.2.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(down->rows(), 64);
  const GgufTensor* norm = f->FindTensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->ne, (std::vector<int64_t>{64}));
  EXPECT_EQ(norm->rows(), 1);
  EXPECT_EQ(f->FindTensor("blk.5.attn_q.weight"), nullptr);

  uint64_t params = 0;
  for (const GgufTensor& t : f->tensors()) {
    EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    EXPECT_GE(t.data, f->bytes());
    EXPECT_LE(t.data + t.n_bytes, f->bytes() + f->file_size()) << t.name;
    params += t.n_elements;
  }
  EXPECT_EQ(params, 292800u);
  // Norm weights of a trained model are finite and mostly near 1.
  const float* w = reinterpret_cast<const float*>(norm->data);
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isfinite(w[i]));
}

TEST(GgufReader, F16ModelMatchesF32Model) {
  auto f32 = MustOpen(kStories);
  auto f16 = MustOpen(kStoriesF16);
  ASSERT_TRUE(f32 && f16);
  EXPECT_EQ(f16->tensors().size(), 48u);
  EXPECT_EQ(*f16->GetInt("general.file_type"), 1);
  for (const GgufTensor& t : f16->tensors()) {
    const GgufTensor* ref = f32->FindTensor(t.name);
    ASSERT_NE(ref, nullptr) << t.name;
    EXPECT_EQ(t.ne, ref->ne) << t.name;
    if (t.ne.size() == 1) {
      EXPECT_EQ(t.type, DType::kF32) << t.name;
      continue;
    }
    ASSERT_EQ(t.type, DType::kF16) << t.name;
    ASSERT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements) * 2);
    const auto* h = reinterpret_cast<const uint16_t*>(t.data);
    const auto* x = reinterpret_cast<const float*>(ref->data);
    for (int64_t i = 0; i < t.n_elements; i += 97) {
      EXPECT_NEAR(F16ToF32(h[i]), x[i], 1e-3f * std::fabs(x[i]) + 1e-6f) << t.name << " " << i;
    }
  }
}

TEST(GgufReader, QuantVectorsLoadEveryBlockType) {
  auto f = MustOpen(kQuant);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->tensors().size(), 33u);
  EXPECT_EQ(*f->GetString("general.architecture"), "quant-vectors");
  const GgufTensor* q4k = f->FindTensor("Q4_K.q");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->type, DType::kQ4_K);
  EXPECT_TRUE(Traits(q4k->type).supported);
  EXPECT_EQ(q4k->ne, (std::vector<int64_t>{768, 8}));
  EXPECT_EQ(q4k->n_bytes, static_cast<size_t>(RowBytes(DType::kQ4_K, 768) * 8));
  int quantized = 0;
  for (const GgufTensor& t : f->tensors()) {
    if (t.name.ends_with(".q")) {
      ++quantized;
      EXPECT_NE(t.type, DType::kF32) << t.name;
      EXPECT_TRUE(Traits(t.type).supported) << t.name;
      const GgufTensor* deq = f->FindTensor(t.name.substr(0, t.name.size() - 1) + "deq");
      ASSERT_NE(deq, nullptr) << t.name;
      EXPECT_EQ(deq->type, DType::kF32);
      EXPECT_EQ(deq->ne, t.ne);
    }
    EXPECT_EQ(t.n_bytes, static_cast<size_t>(RowBytes(t.type, t.ne[0]) * t.rows())) << t.name;
  }
  EXPECT_EQ(quantized, 11);
  EXPECT_NE(f->FindTensor("Q8_0.q"), nullptr);
  EXPECT_NE(f->FindTensor("IQ4_NL.q"), nullptr);
}

TEST(GgufReader, VocabOnlyFiles) {
  auto spm = MustOpen(kVocabSpm);
  ASSERT_TRUE(spm);
  EXPECT_TRUE(spm->tensors().empty());
  EXPECT_EQ(*spm->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(spm->GetStringArray("tokenizer.ggml.tokens")->size(), 32000u);
  EXPECT_EQ(spm->GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);
  EXPECT_EQ(*spm->GetBoolOr("tokenizer.ggml.add_bos_token", false), true);
  EXPECT_EQ(*spm->GetBoolOr("tokenizer.ggml.add_eos_token", true), false);
  EXPECT_EQ(*spm->GetInt("llama.vocab_size"), 32000);

  auto gpt2 = MustOpen(kVocabGpt2);
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(*gpt2->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(gpt2->GetStringArray("tokenizer.ggml.tokens")->size(), 50257u);
  EXPECT_EQ(gpt2->GetStringArray("tokenizer.ggml.merges")->size(), 50000u);
}

void ExpectSameMetadata(const GgufFile& f, const GgufFile& want) {
  ASSERT_EQ(f.metadata_count(), want.metadata_count());
  for (size_t i = 0; i < f.metadata_count(); ++i) {
    EXPECT_EQ(f.metadata()[i].key, want.metadata()[i].key);
    EXPECT_TRUE(f.metadata()[i].value == want.metadata()[i].value);
  }
}

TEST(GgufReader, FromBytesMatchesOpen) {
  auto opened = MustOpen(kStories);
  ASSERT_TRUE(opened);
  std::vector<uint8_t> bytes(opened->bytes(), opened->bytes() + opened->file_size());
  auto r = GgufFile::FromBytes(std::move(bytes), "copy");
  ASSERT_TRUE(r.ok()) << r.message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.path(), "copy");
  ExpectSameMetadata(f, *opened);
  ASSERT_EQ(f.tensors().size(), opened->tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    EXPECT_EQ(f.tensors()[i].offset, opened->tensors()[i].offset);
    EXPECT_EQ(0,
              std::memcmp(f.tensors()[i].data, opened->tensors()[i].data, f.tensors()[i].n_bytes));
  }
}

// A view parses the caller's bytes in place: the same file as Open's, its
// tensors pointing into the caller's buffer; a short view fails as a short
// file does, naming the view.
TEST(GgufReader, FromViewParsesInPlace) {
  auto opened = MustOpen(kStories);
  ASSERT_TRUE(opened);
  const std::vector<uint8_t> bytes(opened->bytes(), opened->bytes() + opened->file_size());
  auto r = GgufFile::FromView(bytes, "view");
  ASSERT_TRUE(r.ok()) << r.message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.path(), "view");
  EXPECT_EQ(f.bytes(), bytes.data());
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_FALSE(f.mapped());
  ExpectSameMetadata(f, *opened);
  ASSERT_EQ(f.tensors().size(), opened->tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    EXPECT_EQ(f.tensors()[i].data, bytes.data() + (opened->tensors()[i].data - opened->bytes()));
    EXPECT_EQ(f.tensors()[i].n_bytes, opened->tensors()[i].n_bytes);
  }
  // Not a mapping: nothing to drop (MADV_DONTNEED on the caller's heap
  // pages would zero them).
  f.ReleasePages(bytes.data(), bytes.size());
  EXPECT_EQ(0, std::memcmp(bytes.data(), opened->bytes(), bytes.size()));

  auto short_view = GgufFile::FromView(std::span<const uint8_t>(bytes).first(100), "head");
  ASSERT_FALSE(short_view.ok());
  EXPECT_EQ(short_view.message().rfind("gguf: head: ", 0), 0u) << short_view.message();
  EXPECT_NE(short_view.message().find("past end"), std::string::npos) << short_view.message();
  auto empty = GgufFile::FromView({}, "empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.message().rfind("gguf: empty: ", 0), 0u) << empty.message();
  // Bytes that do not start aligned: an error, not a misaligned read later.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  auto odd = GgufFile::FromView(std::span<const uint8_t>(shifted).subspan(1), "odd");
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.message().rfind("gguf: odd: the bytes start at ", 0), 0u) << odd.message();
  EXPECT_NE(odd.message().find("not at a multiple of 16"), std::string::npos) << odd.message();
}

TEST(GgufReader, OpenErrors) {
  auto missing = GgufFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("gguf: /nonexistent/x.gguf: cannot open"), std::string::npos)
      << missing.message();
  auto dir = GgufFile::Open(ROTOR_MODELS_DIR);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos) << dir.message();
  const std::string empty = ::testing::TempDir() + "/gguf_test_empty_" + std::to_string(getpid());
  std::FILE* fp = std::fopen(empty.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  auto e = GgufFile::Open(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("past end of file (size 0)"), std::string::npos) << e.message();
  std::remove(empty.c_str());
  auto text = GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf.inp");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("bad magic"), std::string::npos) << text.message();
}

TEST(GgufValue, ScalarsAndArrays) {
  EXPECT_EQ(GgufValue::Of(uint8_t{200}).AsInt(), 200);
  EXPECT_EQ(GgufValue::Of(int8_t{-3}).AsInt(), -3);
  EXPECT_EQ(GgufValue::Of(int16_t{-300}).AsInt(), -300);
  EXPECT_EQ(GgufValue::Of(int32_t{-70000}).AsInt(), -70000);
  EXPECT_EQ(GgufValue::Of(int32_t{-1}).AsUint(), std::nullopt);
  EXPECT_EQ(GgufValue::Of(uint64_t{~0ull}).AsInt(), std::nullopt);
  EXPECT_EQ(GgufValue::Of(uint64_t{~0ull}).AsUint(), ~0ull);
  EXPECT_EQ(GgufValue::Of(int64_t{-5}).AsFloat(), -5.0);
  EXPECT_EQ(GgufValue::Of(0.5f).AsFloat(), 0.5);
  EXPECT_EQ(GgufValue::Of(0.25).type(), GgufType::kF64);
  EXPECT_EQ(GgufValue::Of(0.5f).AsInt(), std::nullopt);
  EXPECT_EQ(GgufValue::Of(true).AsBool(), true);
  EXPECT_EQ(GgufValue::Of(true).AsInt(), std::nullopt);
  EXPECT_EQ(GgufValue::Of("hi").AsString(), "hi");
  EXPECT_EQ(GgufValue::Of("hi").AsInt(), std::nullopt);

  std::vector<int16_t> shorts = {-1, 2, -32768};
  GgufValue a = GgufValue::ArrayOf(shorts);
  EXPECT_EQ(a.array_type(), GgufType::kI16);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.IntAt(0), -1);
  EXPECT_EQ(a.IntAt(2), -32768);
  EXPECT_EQ(a.FloatAt(1), 2.0);
  std::vector<std::string> strs = {"a", "", "ccc"};
  GgufValue s = GgufValue::StringArray(strs);
  EXPECT_EQ(s.StringAt(1), "");
  EXPECT_EQ(s.StringAt(2), "ccc");
  GgufValue nested = GgufValue::ArrayOfArrays({a, s});
  EXPECT_EQ(nested.ArrayAt(1).StringAt(0), "a");
  EXPECT_TRUE(nested == GgufValue::ArrayOfArrays({a, s}));
  EXPECT_FALSE(nested == GgufValue::ArrayOfArrays({s, a}));
  EXPECT_FALSE(GgufValue::Of(uint32_t{1}) == GgufValue::Of(int32_t{1}));
}

}  // namespace
}  // namespace rotor
