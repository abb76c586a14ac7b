// Writer round trips: every value type, nested arrays, tensors with padding.
#include "gguf/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <random>

#include "tensor/fp16.h"

namespace rotor {
namespace {
namespace gguf_writer_test {

const std::string kStories = std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf";

std::unique_ptr<GgufFile> RoundTrip(const GgufWriter& w) {
  auto bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok()) << bytes.message();
  if (!bytes.ok()) return nullptr;
  auto f = GgufFile::FromBytes(std::move(bytes).value(), "roundtrip");
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? std::move(f).value() : nullptr;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/gguf_writer_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(GgufWriter, EveryValueType) {
  GgufWriter w;
  w.SetU8("t.u8", 250);
  w.SetI8("t.i8", -100);
  w.SetU16("t.u16", 65000);
  w.SetI16("t.i16", -32000);
  w.SetU32("t.u32", 4000000000u);
  w.SetI32("t.i32", -2000000000);
  w.SetU64("t.u64", ~0ull);
  w.SetI64("t.i64", std::numeric_limits<int64_t>::min());
  w.SetF32("t.f32", 1.5e-5f);
  w.SetF64("t.f64", -2.25e100);
  w.SetBool("t.bool_true", true);
  w.SetBool("t.bool_false", false);
  w.SetString("t.string", std::string("utf-8 \xe2\x96\x81 and a NUL \0 inside", 29));
  w.SetString("t.empty_string", "");
  const std::vector<uint8_t> u8s = {0, 1, 255};
  const std::vector<int8_t> i8s = {-128, 0, 127};
  const std::vector<uint16_t> u16s = {0, 65535};
  const std::vector<int16_t> i16s = {-32768, 32767};
  const std::vector<uint32_t> u32s = {1, 2, 4294967295u};
  const std::vector<int32_t> i32s = {-1, 0, 1, 2147483647};
  const std::vector<uint64_t> u64s = {~0ull, 0};
  const std::vector<int64_t> i64s = {-1, std::numeric_limits<int64_t>::max()};
  const std::vector<float> f32s = {0.0f, -1.5f, 3.25f};
  const std::vector<double> f64s = {1e-300, -0.0};
  const bool bools[] = {true, false, true};
  const std::vector<std::string> strs = {"<unk>", "", "\xe2\x96\x81the", "a b"};
  w.SetU8Array("a.u8", u8s);
  w.SetI8Array("a.i8", i8s);
  w.SetU16Array("a.u16", u16s);
  w.SetI16Array("a.i16", i16s);
  w.SetU32Array("a.u32", u32s);
  w.SetI32Array("a.i32", i32s);
  w.SetU64Array("a.u64", u64s);
  w.SetI64Array("a.i64", i64s);
  w.SetF32Array("a.f32", f32s);
  w.SetF64Array("a.f64", f64s);
  w.SetBoolArray("a.bool", bools);
  w.SetStringArray("a.string", strs);
  w.SetF32Array("a.empty", std::vector<float>{});
  // [[1, 2, 3], ["x", "y"], [[-1], []]]
  GgufValue nested = GgufValue::ArrayOfArrays(
      {GgufValue::ArrayOf(std::vector<uint8_t>{1, 2, 3}),
       GgufValue::StringArray(std::vector<std::string>{"x", "y"}),
       GgufValue::ArrayOfArrays({GgufValue::ArrayOf(std::vector<int32_t>{-1}),
                                 GgufValue::ArrayOf(std::vector<double>{})})});
  w.Set("a.nested", nested);

  auto f = RoundTrip(w);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata_count(), w.metadata().size());
  for (size_t i = 0; i < f->metadata_count(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, w.metadata()[i].key);
    EXPECT_TRUE(f->metadata()[i].value == w.metadata()[i].value) << w.metadata()[i].key;
    EXPECT_EQ(f->metadata()[i].value.type(), w.metadata()[i].value.type());
  }
  EXPECT_EQ(*f->GetInt("t.u8"), 250);
  EXPECT_EQ(*f->GetInt("t.i8"), -100);
  EXPECT_EQ(*f->GetInt("t.u16"), 65000);
  EXPECT_EQ(*f->GetInt("t.i16"), -32000);
  EXPECT_EQ(*f->GetInt("t.u32"), 4000000000);
  EXPECT_EQ(*f->GetInt("t.i32"), -2000000000);
  auto big = f->GetInt("t.u64");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("out of int64 range"), std::string::npos);
  EXPECT_EQ(f->Find("t.u64")->AsUint(), ~0ull);
  EXPECT_EQ(*f->GetInt("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->GetFloat("t.f32"), static_cast<double>(1.5e-5f));
  EXPECT_EQ(*f->GetFloat("t.f64"), -2.25e100);
  EXPECT_EQ(*f->GetBoolOr("t.bool_true", false), true);
  EXPECT_EQ(*f->GetBoolOr("t.bool_false", true), false);
  EXPECT_EQ(f->GetString("t.string")->size(), 29u);
  EXPECT_EQ(*f->GetString("t.empty_string"), "");
  EXPECT_EQ(*f->GetIntArray("a.u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(*f->GetIntArray("a.i8"), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(*f->GetIntArray("a.u16"), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(*f->GetIntArray("a.i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(*f->GetIntArray("a.u32"), (std::vector<int64_t>{1, 2, 4294967295}));
  EXPECT_EQ(*f->GetIntArray("a.i32"), (std::vector<int64_t>{-1, 0, 1, 2147483647}));
  EXPECT_FALSE(f->GetIntArray("a.u64").ok());  // ~0 does not fit
  EXPECT_EQ(f->Find("a.u64")->UintAt(0), ~0ull);
  EXPECT_EQ(*f->GetIntArray("a.i64"), i64s);
  EXPECT_EQ(*f->GetFloatArray("a.f32"), f32s);
  auto f64_back = f->GetFloatArray("a.f64");
  ASSERT_TRUE(f64_back.ok());
  EXPECT_EQ((*f64_back)[0], static_cast<float>(1e-300));
  EXPECT_EQ(f->Find("a.f64")->FloatAt(0), 1e-300);
  EXPECT_TRUE(f->Find("a.bool")->BoolAt(0));
  EXPECT_FALSE(f->Find("a.bool")->BoolAt(1));
  EXPECT_EQ(*f->GetStringArray("a.string"), strs);
  EXPECT_TRUE(f->GetFloatArray("a.empty")->empty());
  const GgufValue* n = f->Find("a.nested");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->array_type(), GgufType::kArray);
  ASSERT_EQ(n->size(), 3u);
  EXPECT_EQ(n->ArrayAt(0).IntAt(2), 3);
  EXPECT_EQ(n->ArrayAt(1).StringAt(1), "y");
  EXPECT_EQ(n->ArrayAt(2).ArrayAt(0).IntAt(0), -1);
  EXPECT_EQ(n->ArrayAt(2).ArrayAt(1).array_type(), GgufType::kF64);
  EXPECT_EQ(n->ArrayAt(2).ArrayAt(1).size(), 0u);
}

TEST(GgufWriter, SetReplacesInPlaceAndRemove) {
  GgufWriter w;
  w.SetU32("a", 1);
  w.SetString("b", "x");
  w.SetU32("a", 2);
  ASSERT_EQ(w.metadata().size(), 2u);
  EXPECT_EQ(w.metadata()[0].key, "a");
  EXPECT_EQ(w.Find("a")->AsInt(), 2);
  EXPECT_TRUE(w.Remove("a"));
  EXPECT_FALSE(w.Remove("a"));
  EXPECT_EQ(w.Find("a"), nullptr);
  auto f = RoundTrip(w);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->metadata_count(), 1u);
}

// Tensors of each runnable type with sizes that need padding.
TEST(GgufWriter, TensorsWithPadding) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(byte(rng));
    return v;
  };
  struct Case {
    const char* name;
    DType type;
    std::vector<int64_t> ne;
  };
  const std::vector<Case> cases = {
      {"t.f32", DType::kF32, {3, 5}},           // 60 bytes
      {"t.f16", DType::kF16, {7}},              // 14 bytes
      {"t.bf16", DType::kBF16, {5, 3, 1}},      // 30 bytes
      {"t.q8_0", DType::kQ8_0, {64, 3}},        // 204 bytes
      {"t.q4_0", DType::kQ4_0, {32, 1, 3, 1}},  // 54 bytes
      {"t.one", DType::kF32, {1}},
  };
  for (uint32_t align : {0u, 64u, 1u}) {
    GgufWriter w;
    w.SetString("general.architecture", "test");
    if (align) w.SetU32("general.alignment", align);
    const uint64_t expect_align = align ? align : 32;
    std::vector<std::vector<uint8_t>> data;
    for (const Case& c : cases) {
      int64_t n = 1;
      for (int64_t d : c.ne) n *= d;
      data.push_back(random_bytes(RowBytes(c.type, c.ne[0]) * (n / c.ne[0])));
      ASSERT_TRUE(w.AddTensor(c.name, c.type, c.ne, data.back().data(), data.back().size()).ok());
    }
    auto bytes = w.WriteToBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    EXPECT_EQ(bytes->size() % expect_align, 0u);
    auto r = GgufFile::FromBytes(std::move(bytes).value());
    ASSERT_TRUE(r.ok()) << r.message();
    const GgufFile& f = **r;
    EXPECT_EQ(f.alignment(), expect_align);
    EXPECT_EQ(f.data_offset() % expect_align, 0u);
    ASSERT_EQ(f.tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const GgufTensor& t = f.tensors()[i];
      EXPECT_EQ(t.name, cases[i].name);
      EXPECT_EQ(t.type, cases[i].type);
      EXPECT_EQ(t.ne, cases[i].ne);
      EXPECT_EQ(t.offset % expect_align, 0u);
      ASSERT_EQ(t.n_bytes, data[i].size());
      EXPECT_EQ(0, std::memcmp(t.data, data[i].data(), t.n_bytes)) << t.name;
      if (i > 0) {
        const GgufTensor& prev = f.tensors()[i - 1];
        EXPECT_EQ(t.offset,
                  (prev.offset + prev.n_bytes + expect_align - 1) / expect_align * expect_align);
      }
    }
  }
}

TEST(GgufWriter, TensorViewAndFile) {
  std::vector<float> x(64 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = F32ToBF16(x[i]);
  GgufWriter w;
  w.SetString("general.architecture", "test");
  ASSERT_TRUE(w.AddTensorView("x", DType::kF32, {64, 4}, x.data(), x.size() * 4).ok());
  ASSERT_TRUE(w.AddTensorView("h", DType::kBF16, {64, 4}, h.data(), h.size() * 2).ok());
  const std::string path = TempPath("view.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_NE(access(path.c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".tmp").c_str(), F_OK), -1);
  auto r = GgufFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.message();
  const GgufTensor* t = (*r)->FindTensor("h");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(BF16ToF32(reinterpret_cast<const uint16_t*>(t->data)[10]), 5.0f);
  EXPECT_EQ(reinterpret_cast<const float*>((*r)->FindTensor("x")->data)[255], 127.5f);
  std::remove(path.c_str());

  auto bad = w.Write("/nonexistent/dir/out.gguf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("cannot create"), std::string::npos) << bad.message();
}

TEST(GgufWriter, TensorErrors) {
  GgufWriter w;
  std::vector<uint8_t> buf(4096);
  auto msg = [&](std::string_view name, DType type, std::vector<int64_t> ne, size_t n) {
    Status s = w.AddTensor(name, type, std::move(ne), buf.data(), n);
    return s.ok() ? std::string("ok") : s.message();
  };
  EXPECT_EQ(msg("a", DType::kF32, {4}, 16), "ok");
  EXPECT_NE(msg("a", DType::kF32, {4}, 16).find("duplicate tensor name"), std::string::npos);
  EXPECT_NE(msg("", DType::kF32, {4}, 16).find("empty tensor name"), std::string::npos);
  EXPECT_NE(msg(std::string(64, 'n'), DType::kF32, {4}, 16).find("name longer than 63"),
            std::string::npos);
  EXPECT_EQ(msg(std::string(63, 'n'), DType::kF32, {4}, 16), "ok");
  EXPECT_NE(msg("b", DType::kF32, {}, 0).find("n_dims 0"), std::string::npos);
  EXPECT_NE(msg("b", DType::kF32, {1, 1, 1, 1, 1}, 4).find("n_dims 5"), std::string::npos);
  EXPECT_NE(msg("b", DType::kF32, {4, 0}, 0).find("ne[1] = 0"), std::string::npos);
  EXPECT_NE(msg("b", DType::kF32, {4, -2}, 0).find("ne[1] = -2"), std::string::npos);
  EXPECT_NE(msg("b", DType::kQ8_0, {16}, 17).find("block size 32"), std::string::npos);
  EXPECT_NE(msg("b", DType::kF32, {4}, 15).find("15 bytes given, shape needs 16"),
            std::string::npos);
  EXPECT_NE(msg("b", DType::kF32, {1ll << 62, 4}, 16).find("overflows"), std::string::npos);
  Status null_data = w.AddTensor("b", DType::kF32, {4}, nullptr, 16);
  EXPECT_NE(null_data.message().find("no data"), std::string::npos);
  EXPECT_EQ(w.tensor_count(), 2u);
}

TEST(GgufWriter, AlignmentErrors) {
  GgufWriter w;
  w.SetU32("general.alignment", 48);
  auto r = w.WriteToBytes();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("general.alignment 48 is not a nonzero power of two"),
            std::string::npos);
  w.SetU32("general.alignment", 0);
  EXPECT_FALSE(w.WriteToBytes().ok());
  w.SetU64("general.alignment", 64);
  r = w.WriteToBytes();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("must be u32"), std::string::npos);
  w.SetU32("general.alignment", 128);
  EXPECT_TRUE(w.WriteToBytes().ok());
}

// Rewriting a llama.cpp-written model (same keys, tensors and alignment) must
// reproduce it byte for byte: the strongest check that other readers accept ours.
TEST(GgufWriter, RewritesStories260KByteIdentical) {
  auto src = GgufFile::Open(kStories);
  ASSERT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.CopyMetadata(**src);
  for (const GgufTensor& t : (*src)->tensors()) {
    ASSERT_TRUE(w.AddTensorView(t.name, t.type, t.ne, t.data, t.n_bytes).ok());
  }
  auto bytes = w.WriteToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  ASSERT_EQ(bytes->size(), (*src)->file_size());
  EXPECT_EQ(0, std::memcmp(bytes->data(), (*src)->bytes(), bytes->size()));
}

TEST(GgufWriter, CopiesVocabularyBetweenFiles) {
  auto src = GgufFile::Open(kStories);
  ASSERT_TRUE(src.ok()) << src.message();
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"}) {
    ASSERT_TRUE(w.CopyKey(**src, key).ok()) << key;
  }
  Status missing = w.CopyKey(**src, "tokenizer.ggml.merges");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("not found"), std::string::npos);
  auto f = RoundTrip(w);
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->GetStringArray("tokenizer.ggml.tokens"),
            *(*src)->GetStringArray("tokenizer.ggml.tokens"));
  EXPECT_EQ(*f->GetFloatArray("tokenizer.ggml.scores"),
            *(*src)->GetFloatArray("tokenizer.ggml.scores"));
  EXPECT_EQ(*f->GetIntArray("tokenizer.ggml.token_type"),
            *(*src)->GetIntArray("tokenizer.ggml.token_type"));
}

}  // namespace gguf_writer_test
}  // namespace
}  // namespace rotor
