// Key offsets (--kv-k-offset, kv/kv_key_offsets.h): keys stored minus the
// model's mean key per channel. Exact on f32 caches under every policy (the
// shifted-sinks pass included), the same offsets whatever the thread count,
// a lower error for the 4-bit keys, the defaults and refusals of the option,
// and KV files / prefix roots that keep caches with and without apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kv/kv_file.h"
#include "kv/kv_pool.h"
#include "kv_test_util.h"
#include "model/key_offsets.h"
#include "tokenizer/tokenizer.h"

namespace rotor::testing {
namespace {
namespace kv_key_offset_test {

KvConfig With(KvConfig kv, KvType k, KvType v, std::string_view offset) {
  kv.types = {k, v};
  EXPECT_TRUE(kv.Set(KvOpt::kKeyOffset, offset).ok());
  return kv;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// Mean squared difference over every logit.
double MeanSq(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
  return s / static_cast<double>(a.size());
}

// The offsets are real: stories260K's post-RoPE keys have channels whose
// mean is far from zero (measured up to 19 against a spread of about 4).
TEST(KeyOffsets, Stories260KHasLargeOffsets) {
  const Model& m = LoadModelCached(kStories);
  const KvShape shape = m.kv_shape(64);
  ASSERT_NE(shape.k_offsets, nullptr);
  float largest = 0;
  for (int l = 0; l < m.config().n_layer; ++l) {
    const float* off = shape.k_offsets->Layer(l);
    for (int e = 0; e < m.config().n_head_kv * m.config().head_dim; ++e)
      largest = std::max(largest, std::fabs(off[e]));
  }
  EXPECT_GT(largest, 5.f);
}

// Every process agrees on the offsets: the calibration does not depend on
// the thread count (KV files and shared blocks rely on it).
TEST(KeyOffsets, SameWhateverTheThreadCount) {
  for (const char* name : {"stories260K", "gqa"}) {
    const Model& m = LoadModelCached(ModelPath(name));
    const std::vector<float> one = ComputeKeyOffsets(m, 1);
    EXPECT_EQ(one, ComputeKeyOffsets(m, 3)) << name;
    const size_t part =
        static_cast<size_t>(m.config().n_layer) * m.config().n_head_kv * m.config().head_dim;
    ASSERT_EQ(one.size(), 3 * part);  // offsets, then pre-RoPE centers and half-widths
    for (size_t i = 2 * part; i < one.size(); ++i) ASSERT_GT(one[i], 0.f) << name << " " << i;
  }
}

// The pre-RoPE ranges are real: stories260K's channels differ in width
// several fold within a head, which is why scaling them helps.
TEST(KeyOffsets, Stories260KChannelRangesDiffer) {
  const Model& m = LoadModelCached(kStories);
  const KvShape shape = m.kv_shape(64);
  ASSERT_NE(shape.k_offsets, nullptr);
  const int hd = m.config().head_dim;
  float widest_ratio = 0;
  for (int l = 0; l < m.config().n_layer; ++l)
    for (int h = 0; h < m.config().n_head_kv; ++h) {
      const float* s = shape.k_offsets->Scale(l) + h * hd;
      widest_ratio =
          std::max(widest_ratio, *std::max_element(s, s + hd) / *std::min_element(s, s + hd));
    }
  EXPECT_GT(widest_ratio, 3.f);
}

// On f32 caches the offsets change nothing but rounding, under every policy
// and both position modes: the full cache, sinks seen at a shifted distance
// (sink, original positions: the second pass's correction), re-rotated keys
// (compact positions), the per-head policies. A cell's key reads back as the
// key (the offsets added back). The same for deferred keys stored centered
// and scaled (read back in attention's folds: one-token, per-lane, GQA).
TEST(KeyOffsets, ExactOnF32CachesUnderEveryPolicy) {
  for (RopeK rope_k : {RopeK::kCached, RopeK::kDeferred})
    for (const char* name : {"stories260K", "gqa"}) {
      const Model& m = LoadModelCached(ModelPath(name));
      const std::vector<int32_t> prompt = Prompt(100, m.config().n_vocab, 53);
      struct P {
        std::string_view policy;
        int size;
        KvPositions pos;
      };
      for (const P& p :
           {P{"full", 0, KvPositions::kOriginal}, P{"sink", 40, KvPositions::kOriginal},
            P{"sink", 40, KvPositions::kCompact}, P{"window", 40, KvPositions::kOriginal},
            P{"h2o", 40, KvPositions::kCompact}, P{"tova", 40, KvPositions::kOriginal}}) {
        SCOPED_TRACE(::testing::Message() << name << " " << p.policy << " "
                                          << KvPositionsName(p.pos) << " " << RopeKName(rope_k));
        const KvConfig base = Kv(p.policy, p.size, 4, rope_k, p.pos);
        std::unique_ptr<KvCache> plain_cache, offset_cache;
        const std::vector<float> plain = AllLogits(m, With(base, KvType::kF32, KvType::kF32, "off"),
                                                   prompt, 7, 512, &plain_cache);
        const std::vector<float> offset = AllLogits(m, With(base, KvType::kF32, KvType::kF32, "on"),
                                                    prompt, 7, 512, &offset_cache);
        ASSERT_TRUE(offset_cache->config().k_offset);
        // The transform this rope mode stores is the one in force (not none).
        const KvLayerView view = offset_cache->View(0);
        if (rope_k == RopeK::kCached)
          ASSERT_TRUE(view.k_offset != nullptr && view.k_center == nullptr);
        else
          ASSERT_TRUE(view.k_offset == nullptr && view.k_center != nullptr &&
                      view.k_scale != nullptr);
        EXPECT_LT(MaxAbsDiff(plain, offset), 1e-3 * MaxAbs(plain));
        if (p.policy == "full")
          for (int l = 0; l < m.config().n_layer; ++l) {
            const std::vector<float> a = plain_cache->CellK(l, 50), b = offset_cache->CellK(l, 50);
            EXPECT_LT(MaxAbsDiff(a, b), 1e-4 * (1 + MaxAbs(a))) << "layer " << l;
          }
      }
    }
}

// What they are for: 4- and 5-bit keys round far less of the constant
// channels' size. On real text (the bundled TinyStories sample, 400 tokens)
// the mean squared logit error of stories260K's q4_0 / q5_0 keys against the
// f32 cache falls at least 1.6x under cached RoPE (measured with
// least-squares key scales, which lower the error without offsets too:
// 2.15x for q4_0, 4.1x for q5_0) and at least 20x under deferred RoPE,
// centered and scaled (measured 47x and 72x); docs/EVALUATION.md has the KL
// divergence and perplexity.
TEST(KeyOffsets, LowerTheErrorOfFourAndFiveBitKeysOnText) {
  const Model& m = LoadModelCached(kStories);
  std::ifstream f(ROTOR_TESTDATA_DIR "/tinystories-valid-8k.txt", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = Tokenizer::FromGguf(m.file());
  ASSERT_TRUE(tok.ok()) << tok.message();
  std::vector<int32_t> text = (*tok)->Encode(ss.str(), /*add_special=*/true);
  ASSERT_GT(text.size(), 400u);
  text.resize(400);
  const KvConfig cached = Kv("full", 0, 0);
  const std::vector<float> f32 =
      AllLogits(m, With(cached, KvType::kF32, KvType::kF32, "off"), text, 0);
  double with[2][2];  // [cached, deferred][q4_0, q5_0]
  for (RopeK rope_k : {RopeK::kCached, RopeK::kDeferred}) {
    const KvConfig base = Kv("full", 0, 0, rope_k);
    for (KvType k : {KvType::kQ4_0, KvType::kQ5_0}) {
      const double off = MeanSq(f32, AllLogits(m, With(base, k, KvType::kF32, "off"), text, 0));
      const double on = MeanSq(f32, AllLogits(m, With(base, k, KvType::kF32, "on"), text, 0));
      std::printf("%s %s keys: mean squared logit error %.4g without offsets, %.4g with (%.2fx)\n",
                  std::string(RopeKName(rope_k)).c_str(), std::string(KvTypeName(k)).c_str(), off,
                  on, off / on);
      EXPECT_LT(on, off / (rope_k == RopeK::kCached ? 1.6 : 20)) << KvTypeName(k);
      with[rope_k == RopeK::kDeferred][k == KvType::kQ5_0] = on;
    }
  }
  // Deferred keys centered and scaled beat cached keys with offsets
  // (measured 11x for q4_0, 8.7x for q5_0).
  for (int t = 0; t < 2; ++t) EXPECT_LT(with[1][t], with[0][t] / 4) << t;
}

// The default follows the K type and the RoPE mode; "on" where it cannot be
// exact, or without the model's offsets, is refused with the reason.
TEST(KeyOffsets, DefaultsAndRefusals) {
  const Model& m = LoadModelCached(kStories);
  const KvShape shape = m.kv_shape(256);
  auto resolve = [&](KvConfig kv, const KvShape& s) { return ResolveKvConfig(kv, s); };
  KvConfig kv = Kv("full", 0, 0);
  kv.types = {KvType::kQ4_0, KvType::kQ4_0};
  EXPECT_TRUE(resolve(kv, shape)->k_offset);
  kv.types = {KvType::kQ8_0, KvType::kF16};
  EXPECT_TRUE(resolve(kv, shape)->k_offset);
  kv.types = {KvType::kF16, KvType::kQ4_0};
  EXPECT_FALSE(resolve(kv, shape)->k_offset);  // only the keys have offsets
  kv.types = {KvType::kQ4_0, KvType::kQ4_0};
  EXPECT_FALSE(resolve(kv, m.config().kv_shape(256))->k_offset);  // no offsets: off
  // Deferred keys: centered and scaled, on by default for the block types
  // too, and on request for the others.
  KvConfig deferred = Kv("full", 0, 0, RopeK::kDeferred);
  deferred.types = {KvType::kQ4_0, KvType::kQ4_0};
  EXPECT_TRUE(resolve(deferred, shape)->k_offset);
  deferred.types = {KvType::kF16, KvType::kF16};
  EXPECT_FALSE(resolve(deferred, shape)->k_offset);
  ASSERT_TRUE(deferred.Set(KvOpt::kKeyOffset, "on").ok());
  EXPECT_TRUE(resolve(deferred, shape)->k_offset);
  EXPECT_NE(DescribeKvConfig(*resolve(deferred, shape)).find("key channels centered and scaled"),
            std::string::npos);

  ASSERT_TRUE(kv.Set(KvOpt::kKeyOffset, "on").ok());
  auto refused = resolve(kv, m.config().kv_shape(256));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("no key offsets"), std::string::npos) << refused.message();
  Status bad = kv.Set(KvOpt::kKeyOffset, "yes", KvSpelling::kField);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "kv: kv_k_offset 'yes' is not one of off or on");
}

// Blocks and files of caches with and without offsets never mix: their
// prefix roots differ, and a KV file says which it holds.
TEST(KeyOffsets, FilesAndPrefixRootsKeepThemApart) {
  const PrefixSeed with{.model = 7, .types = {KvType::kQ4_0, KvType::kQ4_0}, .k_offset = true};
  PrefixSeed without = with;
  without.k_offset = false;
  EXPECT_NE(PrefixRoot(with), PrefixRoot(without));

  const Model& m = LoadModelCached(kStories);
  const std::vector<int32_t> prompt = Prompt(40, m.config().n_vocab, 61);
  for (RopeK rope_k : {RopeK::kCached, RopeK::kDeferred}) {
    SCOPED_TRACE(RopeKName(rope_k));
    const KvConfig kv = With(Kv("full", 0, 0, rope_k), KvType::kQ4_0, KvType::kQ8_0, "on");
    std::unique_ptr<KvCache> a;
    AllLogits(m, kv, prompt, 0, 256, &a);
    const std::string path = ::testing::TempDir() + "/key_offsets.kv";
    ASSERT_TRUE(SaveKvFile(path, *a, prompt).ok());
    auto info = ReadKvFileInfo(path);
    ASSERT_TRUE(info.ok()) << info.message();
    EXPECT_TRUE(info->k_offset);
    auto same = std::move(KvCache::Create(m.kv_shape(256), kv)).value();
    ASSERT_TRUE(LoadKvFile(path, *same).ok());
    const std::vector<int32_t> more = Prompt(5, m.config().n_vocab, 62);
    EXPECT_EQ(ContinueLogits(m, *a, more, 0), ContinueLogits(m, *same, more, 0));
    auto other =
        std::move(KvCache::Create(m.kv_shape(256), With(kv, KvType::kQ4_0, KvType::kQ8_0, "off")))
            .value();
    auto refused = LoadKvFile(path, *other);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("key offsets (kv_k_offset) on; the cache's are off"),
              std::string::npos)
        << refused.message();
    std::remove(path.c_str());
  }
}

}  // namespace kv_key_offset_test
}  // namespace
}  // namespace rotor::testing
