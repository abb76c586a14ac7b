// The quantizer's errors, requantization, alignment, the rules on real files,
// and the streaming writer it uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../kv/kv_test_util.h"
#include "gguf/gguf_writer.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "ops/quant.h"

namespace rotor {
namespace {

using ::testing::HasSubstr;

class TempFiles {
 public:
  ~TempFiles() {
    for (const std::string& p : paths_) std::filesystem::remove(p);
  }
  std::string Path(const std::string& name) {
    paths_.push_back((std::filesystem::temp_directory_path() /
                      ("rotor_qerr_" + std::to_string(::getpid()) + "_" + name))
                         .string());
    return paths_.back();
  }

 private:
  std::vector<std::string> paths_;
};

QuantizeOptions Opts(std::string_view target, bool allow_requantize = false) {
  Result<QuantTarget> t = ParseQuantTarget(target);
  EXPECT_TRUE(t.ok());
  return {.target = *t, .allow_requantize = allow_requantize};
}

Result<QuantizeStats> Quant(const std::string& in, const std::string& out,
                            const QuantizeOptions& o) {
  ThreadPool pool(2);
  return QuantizeModel(in, out, o, pool);
}

TEST(QuantizeErrorsTest, MissingInput) {
  auto r = Quant("/nonexistent/model.gguf", "/tmp/x.gguf", Opts("q8_0"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("input '/nonexistent/model.gguf' does not exist"));
}

TEST(QuantizeErrorsTest, InputNotGguf) {
  TempFiles tmp;
  const std::string in = tmp.Path("text.gguf");
  std::ofstream(in) << "hello, not a model\n";
  auto r = Quant(in, tmp.Path("out.gguf"), Opts("q8_0"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("not a valid GGUF file"));
  EXPECT_THAT(r.message(), HasSubstr(in));
}

TEST(QuantizeErrorsTest, OutputUnwritable) {
  auto r = Quant(testing::kStories, "/nonexistent-dir/out.gguf", Opts("q8_0"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("'/nonexistent-dir/out.gguf'"));
  EXPECT_THAT(r.message(), HasSubstr("does not exist"));
  TempFiles tmp;
  // A directory as the output: refused before any tensor is converted.
  const std::string out_dir = tmp.Path("a-dir");
  std::filesystem::create_directory(out_dir);
  auto d = Quant(testing::kStories, out_dir, Opts("q8_0"));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.message(), HasSubstr("is a directory"));
  const std::string dir = tmp.Path("readonly");
  std::filesystem::create_directory(dir);
  std::filesystem::permissions(
      dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (::geteuid() != 0) {  // root writes anywhere
    auto r2 = Quant(testing::kStories, dir + "/out.gguf", Opts("q8_0"));
    ASSERT_FALSE(r2.ok());
    EXPECT_THAT(r2.message(), HasSubstr("cannot write output"));
  }
  r = Quant(testing::kStories, "/proc/out.gguf", Opts("q8_0"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("cannot write output '/proc/out.gguf'"));
  std::filesystem::remove(dir);
}

TEST(QuantizeErrorsTest, RequantizeNeedsPermission) {
  TempFiles tmp;
  const std::string q8 = tmp.Path("q8.gguf");
  ASSERT_TRUE(Quant(testing::kStories, q8, Opts("q8_0")).ok());
  auto r = Quant(q8, tmp.Path("q4.gguf"), Opts("q4_0"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("already quantized (q8_0)"));
  EXPECT_THAT(r.message(), HasSubstr("--allow-requantize"));
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("q4.gguf")));
  // Allowed: requantizing with the flag, dequantizing to a float type, the same type.
  EXPECT_TRUE(Quant(q8, tmp.Path("q4b.gguf"), Opts("q4_0", true)).ok());
  auto f16 = Quant(q8, tmp.Path("f16.gguf"), Opts("f16"));
  ASSERT_TRUE(f16.ok()) << f16.message();
  auto same = Quant(q8, tmp.Path("q8b.gguf"), Opts("q8_0"));
  ASSERT_TRUE(same.ok()) << same.message();
  EXPECT_EQ(same->n_converted, 0);
  auto requant = GgufFile::Open(tmp.Path("q4b.gguf"));
  ASSERT_TRUE(requant.ok());
  EXPECT_EQ((*requant)->FindTensor("blk.0.attn_q.weight")->type, DType::kQ4_0);
}

TEST(QuantizeErrorsTest, UnsupportedTypeIsNamed) {
  if (ops::IsSupported(DType::kQ4_K) && ops::IsSupported(DType::kQ6_K))
    GTEST_SKIP() << "q4_K and q6_K are supported by ops in this build";
  TempFiles tmp;
  auto r = Quant(rotor::testing::GqaModelPath(), tmp.Path("out.gguf"), Opts("Q4_K_M"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("not yet supported by this build of rotor"));
}

// The rules on the tensors of real files (no conversion: works in any build).
TEST(QuantizeErrorsTest, MixRulesOnFiles) {
  TempFiles tmp;
  const std::string synth = tmp.Path("synth.gguf");
  SynthSpec s;
  s.n_embd = 256, s.n_ff = 512, s.n_layer = 8, s.n_head = 4, s.n_head_kv = 1, s.n_vocab = 300;
  s.tied_output = true;
  ThreadPool pool(2);
  ASSERT_TRUE(WriteSynthModel(s, nullptr, synth, pool).ok());
  auto file = GgufFile::Open(synth);
  ASSERT_TRUE(file.ok());
  const QuantModelInfo info = QuantModelInfoOf(**file);
  EXPECT_EQ(info.n_layer, 8);
  EXPECT_EQ(info.n_gqa, 4);
  EXPECT_FALSE(info.has_output);
  auto type = [&](const GgufFile& f, const QuantModelInfo& m, std::string_view target,
                  const std::string& name) {
    const GgufTensor* t = f.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return ChooseTensorType(*ParseQuantTarget(target), m, {}, name, t->ne, t->type).type;
  };
  const GgufFile& f = **file;
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.0.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.0.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.1.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.2.ffn_down.weight"), DType::kQ4_K);  // (2 - 1) % 3 != 2
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.3.ffn_down.weight"), DType::kQ6_K);  // (3 - 1) % 3 == 2
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.7.attn_v.weight"), DType::kQ6_K);    // >= 7 * 8 / 8
  EXPECT_EQ(type(f, info, "Q4_K_M", "blk.0.attn_norm.weight"), DType::kF32);
  EXPECT_EQ(type(f, info, "Q4_K_M", "token_embd.weight"), DType::kQ6_K);  // tied output
  EXPECT_EQ(type(f, info, "Q2_K", "blk.3.attn_v.weight"), DType::kQ4_K);  // GQA 4
  // stories260K: 5 layers (use_more_bits: layers 2 and 4), rows of 64 and 172.
  auto stories = GgufFile::Open(testing::kStories);
  ASSERT_TRUE(stories.ok());
  const GgufFile& g = **stories;
  const QuantModelInfo si = QuantModelInfoOf(g);
  EXPECT_EQ(si.n_layer, 5);
  EXPECT_EQ(si.n_gqa, 2);
  EXPECT_EQ(type(g, si, "Q4_K_M", "blk.0.attn_v.weight"), DType::kQ5_0);   // q4_K does not fit 64
  EXPECT_EQ(type(g, si, "Q4_K_M", "blk.2.attn_v.weight"), DType::kQ8_0);   // q6_K does not fit 64
  EXPECT_EQ(type(g, si, "Q4_K_M", "blk.0.ffn_down.weight"), DType::kF16);  // 172
  EXPECT_EQ(type(g, si, "Q4_K_M", "output.weight"), DType::kQ8_0);
  EXPECT_EQ(type(g, si, "Q4_K_M", "output_norm.weight"), DType::kF32);
}

TEST(QuantizeErrorsTest, KeepsTheInputsAlignment) {
  TempFiles tmp;
  auto src = GgufFile::Open(testing::kStories);
  ASSERT_TRUE(src.ok());
  GgufWriter w;
  w.CopyMetadata(**src);
  w.SetU32("general.alignment", 64);
  for (const GgufTensor& t : (*src)->tensors())
    ASSERT_TRUE(w.AddTensorView(t.name, t.type, t.ne, t.data, t.n_bytes).ok());
  const std::string in = tmp.Path("a64.gguf"), out = tmp.Path("a64-q8.gguf");
  ASSERT_TRUE(w.Write(in).ok());
  ASSERT_TRUE(Quant(in, out, Opts("q8_0")).ok());
  auto q = GgufFile::Open(out);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ((*q)->alignment(), 64u);
  for (const GgufTensor& t : (*q)->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

TEST(QuantizeErrorsTest, FilledTensorsStreamInOrderAndMatchCopiedOnes) {
  std::vector<float> a(64 * 3), b(32 * 2);  // [3, 64], [2, 32]
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * static_cast<float>(i);
  GgufWriter copied, filled;
  ASSERT_TRUE(copied.AddTensor("a", DType::kF32, {64, 3}, a.data(), a.size() * 4).ok());
  ASSERT_TRUE(copied.AddTensor("b", DType::kF32, {32, 2}, b.data(), b.size() * 4).ok());
  std::vector<std::string> order;
  auto fill = [&](const std::string& name, const std::vector<float>& v) {
    return [&order, name, &v](uint8_t* dst) {
      order.push_back(name);
      std::memcpy(dst, v.data(), v.size() * 4);
      return Status::Ok();
    };
  };
  ASSERT_TRUE(filled.AddTensorFilled("a", DType::kF32, {64, 3}, a.size() * 4, fill("a", a)).ok());
  ASSERT_TRUE(filled.AddTensorFilled("b", DType::kF32, {32, 2}, b.size() * 4, fill("b", b)).ok());
  EXPECT_FALSE(filled.AddTensorFilled("c", DType::kF32, {32}, 100, fill("c", b)).ok());
  auto x = copied.WriteToBytes();
  auto y = filled.WriteToBytes();
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x, *y);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b"}));
  // A fill error stops the write.
  GgufWriter bad;
  ASSERT_TRUE(
      bad.AddTensorFilled("a", DType::kF32, {4}, 16, [](uint8_t*) { return Status::Error("boom"); })
          .ok());
  auto z = bad.WriteToBytes();
  ASSERT_FALSE(z.ok());
  EXPECT_THAT(z.message(), HasSubstr("boom"));
}

TEST(QuantizeErrorsTest, ReleasedPagesReadBackTheSame) {
  auto f = GgufFile::Open(testing::kStories);
  ASSERT_TRUE(f.ok());
  const GgufTensor* t = (*f)->FindTensor("blk.1.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> before(t->data, t->data + t->n_bytes);
  (*f)->ReleasePages(t->data, t->n_bytes);
  EXPECT_EQ(std::memcmp(before.data(), t->data, t->n_bytes), 0);
  (*f)->ReleasePages((*f)->bytes(), (*f)->file_size());
  EXPECT_EQ(std::memcmp(before.data(), t->data, t->n_bytes), 0);
}

}  // namespace
}  // namespace rotor
