// KV files (kv/kv_file.h): a saved prefix loaded into a fresh cache continues
// exactly as the cache that computed it (every sharing policy, both K/V types,
// both RoPE modes, past the ring's first eviction); only the tokens that
// agree with a text are loaded; loaded blocks join the prefix cache and can
// be dropped; and every file or cache that does not fit is refused with a
// clear error and leaves the cache empty: another model, K/V type, RoPE mode,
// positions or policy, a cache or budget too small, a truncated file at every
// cut, each flipped byte, random garbage.
#include "kv/kv_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kv_test_util.h"

namespace rotor {
namespace {

using testing::Kv;
using testing::Prompt;

constexpr int kCtx = 256;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rotor_kv_file_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

struct TempFile {
  explicit TempFile(const std::string& name) : path(TempPath(name)) {}
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A pool of the model (its identity: what files are checked against).
std::unique_ptr<KvBlockPool> PoolOf(const Model& m, int64_t budget_bytes = 0) {
  return std::make_unique<KvBlockPool>(
      m.config().kv_shape(kCtx),
      KvPoolOptions{.budget_bytes = budget_bytes, .model_id = m.identity()});
}

std::unique_ptr<KvCache> CacheOf(const Model& m, const KvConfig& kv, KvBlockPool& pool) {
  auto c = KvCache::Create(m.config().kv_shape(kCtx), kv, &pool);
  EXPECT_TRUE(c.ok()) << c.message();
  return std::move(*c);
}

// Runs `tokens` through a new cache of `kv` on `pool` and saves them to `path`.
std::unique_ptr<KvCache> RunAndSave(const Model& m, const KvConfig& kv, KvBlockPool& pool,
                                    const std::vector<int32_t>& tokens, const std::string& path) {
  std::unique_ptr<KvCache> cache = CacheOf(m, kv, pool);
  testing::ContinueLogits(m, *cache, tokens, 16);
  Result<int64_t> bytes = SaveKvFile(path, *cache, tokens);
  EXPECT_TRUE(bytes.ok()) << bytes.message();
  return cache;
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<std::string, KvType, RopeK>> {};

TEST_P(RoundTrip, ALoadedCacheContinuesExactlyAsTheOneThatSavedIt) {
  const auto& [policy, type, rope] = GetParam();
  const Model& m = testing::LoadModelCached(testing::kStories);
  KvConfig kv = Kv(policy, policy == "full" ? 0 : 64, 4, rope);
  kv.types = KvTypes{type, type};
  const int n_vocab = m.config().n_vocab;
  const std::vector<int32_t> text = Prompt(40, n_vocab, 1);
  // 50 more tokens: the sink and window rings wrap (90 > 64) after the load.
  const std::vector<int32_t> more = Prompt(50, n_vocab, 2);
  TempFile file("roundtrip.kv");
  auto pool = PoolOf(m);
  std::unique_ptr<KvCache> saved = RunAndSave(m, kv, *pool, text, file.path);
  const std::vector<float> want = testing::ContinueLogits(m, *saved, more, 7);

  auto other_pool = PoolOf(m);  // another process: nothing shared
  std::unique_ptr<KvCache> loaded = CacheOf(m, kv, *other_pool);
  Result<KvFileLoaded> r = LoadKvFile(file.path, *loaded);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_loaded, 40);
  EXPECT_EQ(r->n_file, 40);
  EXPECT_EQ(r->tokens, text);
  EXPECT_EQ(r->bytes, static_cast<int64_t>(std::filesystem::file_size(file.path)));
  EXPECT_EQ(loaded->n_seen(), 40);
  EXPECT_EQ(testing::MaxAbsDiff(testing::ContinueLogits(m, *loaded, more, 7), want), 0.0);
  EXPECT_TRUE(other_pool->Validate().ok()) << other_pool->Validate().message();

  Result<KvFileInfo> info = ReadKvFileInfo(file.path);
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->model_id, m.identity());
  EXPECT_EQ(info->n_layer, m.config().n_layer);
  EXPECT_EQ(info->types, (KvTypes{type, type}));
  EXPECT_EQ(info->rope_k, rope);
  EXPECT_EQ(info->tokens, text);
}

INSTANTIATE_TEST_SUITE_P(KvFile, RoundTrip,
                         ::testing::Combine(::testing::Values("full", "sink", "window"),
                                            ::testing::Values(KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0),
                                            ::testing::Values(RopeK::kCached, RopeK::kDeferred)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(KvTypeName(std::get<1>(info.param))) + "_" +
                                  std::string(RopeKName(std::get<2>(info.param)));
                         });

TEST(KvFile, OnlyTheTokensThatAgreeWithTheTextAreLoaded) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const int n_vocab = m.config().n_vocab;
  const KvConfig kv = Kv("full", 0);
  const std::vector<int32_t> text = Prompt(40, n_vocab, 1);
  TempFile file("prefix.kv");
  auto pool = PoolOf(m);
  RunAndSave(m, kv, *pool, text, file.path);

  // A prompt that differs from token 23 on: tokens 0..22 come from the file,
  // and the rest runs as it would in a fresh cache.
  std::vector<int32_t> prompt = text;
  prompt[23] = (prompt[23] + 1) % n_vocab;
  auto fresh_pool = PoolOf(m);
  std::unique_ptr<KvCache> a = CacheOf(m, kv, *fresh_pool);
  Result<KvFileLoaded> r =
      LoadKvFile(file.path, *a, KvFileLoadOptions{.text = std::span<const int32_t>(prompt)});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_loaded, 23);
  const std::vector<int32_t> rest(prompt.begin() + 23, prompt.end());
  std::unique_ptr<KvCache> b = CacheOf(m, kv, *fresh_pool);
  b->DisablePublishing();
  const std::vector<float> all = testing::ContinueLogits(m, *b, prompt, 0);
  const std::vector<float> tail(all.begin() + 23 * n_vocab, all.end());
  EXPECT_EQ(testing::MaxAbsDiff(testing::ContinueLogits(m, *a, rest, 0), tail), 0.0);

  // A shorter text takes what it has; one that differs at once takes none.
  std::unique_ptr<KvCache> c = CacheOf(m, kv, *fresh_pool);
  r = LoadKvFile(file.path, *c,
                 KvFileLoadOptions{.text = std::span<const int32_t>(text).subspan(0, 10)});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_loaded, 10);
  std::unique_ptr<KvCache> d = CacheOf(m, kv, *fresh_pool);
  const std::vector<int32_t> other = {text[0] + 1};
  r = LoadKvFile(file.path, *d, KvFileLoadOptions{.text = std::span<const int32_t>(other)});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_loaded, 0);
  EXPECT_EQ(d->n_seen(), 0);
}

TEST(KvFile, LoadedBlocksJoinThePrefixCacheAndCanBeDropped) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const KvConfig kv = Kv("full", 0);
  const std::vector<int32_t> text = Prompt(40, m.config().n_vocab, 1);
  TempFile file("publish.kv");
  {
    auto pool = PoolOf(m);
    RunAndSave(m, kv, *pool, text, file.path);
  }
  auto pool = PoolOf(m);
  {
    std::unique_ptr<KvCache> vehicle = CacheOf(m, kv, *pool);
    ASSERT_TRUE(LoadKvFile(file.path, *vehicle).ok());
  }
  EXPECT_EQ(pool->stats().blocks_cached, 2);  // the two whole blocks; the partial one is free
  EXPECT_EQ(pool->stats().blocks_free, 1);
  std::unique_ptr<KvCache> next = CacheOf(m, kv, *pool);
  EXPECT_EQ(next->AttachPrefix(text, 40), 32);
  next.reset();
  const uint64_t root = PrefixRoot(PrefixSeed{m.identity(), kv.types, kv.rotate, kv.rope_k});
  EXPECT_EQ(pool->DropCachedChain(root, text), 2);
  EXPECT_EQ(pool->stats().blocks_cached, 0);
  EXPECT_EQ(pool->stats().blocks, pool->stats().blocks_free);
  EXPECT_EQ(CacheOf(m, kv, *pool)->AttachPrefix(text, 40), 0);
  EXPECT_TRUE(pool->Validate().ok()) << pool->Validate().message();
}

// Loads `path` into a new cache of `kv` on `pool`: the error, and the cache empty.
std::string LoadError(const Model& m, const KvConfig& kv, KvBlockPool& pool,
                      const std::string& path, KvFileLoadOptions options = {}) {
  std::unique_ptr<KvCache> cache = CacheOf(m, kv, pool);
  Result<KvFileLoaded> r = LoadKvFile(path, *cache, options);
  EXPECT_EQ(cache->n_seen(), 0);
  EXPECT_EQ(cache->n_blocks_held(), 0);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate().message();
  return r.ok() ? "(loaded)" : r.message();
}

TEST(KvFile, RefusesAnotherModelTypeRopeModePositionsOrPolicy) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const std::vector<int32_t> text = Prompt(40, m.config().n_vocab, 1);
  TempFile file("refuse.kv");
  auto pool = PoolOf(m);
  RunAndSave(m, Kv("sink", 64), *pool, text, file.path);

  const Model& gqa = testing::LoadModelCached(testing::GqaModelPath());
  auto gqa_pool = PoolOf(gqa);
  std::string e = LoadError(gqa, Kv("sink", 64), *gqa_pool, file.path);
  EXPECT_NE(e.find("another model"), std::string::npos) << e;
  EXPECT_NE(e.find(file.path), std::string::npos) << e;

  KvConfig f16 = Kv("sink", 64);
  f16.types = KvTypes{KvType::kF16, KvType::kF16};
  e = LoadError(m, f16, *pool, file.path);
  EXPECT_NE(e.find("K/V type (kv_type) f32; the cache's is f16"), std::string::npos) << e;
  e = LoadError(m, Kv("sink", 64, 4, RopeK::kDeferred), *pool, file.path);
  EXPECT_NE(e.find("RoPE mode (rope_k) cached; the cache's is deferred"), std::string::npos) << e;
  e = LoadError(m, Kv("sink", 64, 4, RopeK::kCached, KvPositions::kCompact), *pool, file.path);
  EXPECT_NE(e.find("positions (kv_positions) original; the cache's are compact"), std::string::npos)
      << e;
  e = LoadError(m, Kv("h2o", 64), *pool, file.path);
  EXPECT_NE(e.find("the h2o cache cannot start from saved K/V"), std::string::npos) << e;
  e = LoadError(m, Kv("window", 32), *pool, file.path);
  EXPECT_NE(e.find("40 tokens, more than the cache's 32 cells"), std::string::npos) << e;
  // A budget of one block has no room for three.
  KvBlockPool probe(m.config().kv_shape(kCtx), {});
  auto tiny = PoolOf(m, static_cast<int64_t>(probe.BlockBytes(KvTypes{KvType::kF32, KvType::kF32})));
  e = LoadError(m, Kv("full", 0), *tiny, file.path);
  EXPECT_NE(e.find("no room for 40 tokens"), std::string::npos) << e;
  // The window policy loads what the sink policy saved.
  std::unique_ptr<KvCache> window = CacheOf(m, Kv("window", 64), *pool);
  EXPECT_TRUE(LoadKvFile(file.path, *window).ok());
  e = LoadError(m, Kv("full", 0), *pool, TempPath("missing.kv"));
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST(KvFile, SavingRefusesACacheThatNoLongerHoldsItsFirstTokens) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const int n_vocab = m.config().n_vocab;
  const std::vector<int32_t> text = Prompt(80, n_vocab, 1);
  auto pool = PoolOf(m);
  TempFile file("refuse_save.kv");
  std::unique_ptr<KvCache> sink = CacheOf(m, Kv("sink", 64), *pool);
  testing::ContinueLogits(m, *sink, text, 16);  // 80 > 64: the ring wrapped
  Result<int64_t> r = SaveKvFile(file.path, *sink, text);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no longer holds its first 80 tokens"), std::string::npos)
      << r.message();
  EXPECT_FALSE(std::filesystem::exists(file.path));
  EXPECT_FALSE(std::filesystem::exists(file.path + ".tmp"));
  // Its first 4 tokens (the sinks) it still holds.
  EXPECT_TRUE(SaveKvFile(file.path, *sink, std::span<const int32_t>(text).subspan(0, 4)).ok());

  std::unique_ptr<KvCache> h2o = CacheOf(m, Kv("h2o", 64), *pool);
  testing::ContinueLogits(m, *h2o, std::vector<int32_t>(text.begin(), text.begin() + 20), 16);
  r = SaveKvFile(file.path, *h2o, std::span<const int32_t>(text).subspan(0, 20));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cannot be saved"), std::string::npos) << r.message();

  std::unique_ptr<KvCache> full = CacheOf(m, Kv("full", 0), *pool);
  testing::ContinueLogits(m, *full, std::vector<int32_t>(text.begin(), text.begin() + 20), 16);
  std::vector<int32_t> wrong(text.begin(), text.begin() + 20);
  wrong[5] += 1;
  r = SaveKvFile(file.path, *full, wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("token 5 to save"), std::string::npos) << r.message();
  r = SaveKvFile(file.path, *full, text);  // more than it ran
  ASSERT_FALSE(r.ok());
  r = SaveKvFile(TempPath("no/such/dir.kv"), *full, std::span<const int32_t>(text).subspan(0, 20));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cannot create"), std::string::npos) << r.message();
}

TEST(KvFile, ATruncatedFileIsRefusedAtEveryCut) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const std::vector<int32_t> text = Prompt(20, m.config().n_vocab, 1);
  TempFile file("whole.kv"), cut("cut.kv");
  auto pool = PoolOf(m);
  RunAndSave(m, Kv("full", 0), *pool, text, file.path);
  const std::string bytes = ReadBytes(file.path);
  for (size_t n = 0; n < bytes.size(); n += n < 200 ? 1 : 97) {
    WriteBytes(cut.path, bytes.substr(0, n));
    const std::string e = LoadError(m, Kv("full", 0), *pool, cut.path);
    EXPECT_NE(e.find("kv file " + cut.path + ": "), std::string::npos) << n << ": " << e;
    EXPECT_TRUE(e.find("truncated") != std::string::npos ||
                e.find("too short") != std::string::npos)
        << n << ": " << e;
    EXPECT_FALSE(ReadKvFileInfo(cut.path).ok()) << n;
  }
  WriteBytes(cut.path, bytes + "x");
  const std::string e = LoadError(m, Kv("full", 0), *pool, cut.path);
  EXPECT_NE(e.find("1 more than its 20 tokens"), std::string::npos) << e;
}

TEST(KvFile, EveryFlippedByteIsRefused) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const std::vector<int32_t> text = Prompt(20, m.config().n_vocab, 1);
  TempFile file("flip_src.kv"), flipped("flip.kv");
  auto pool = PoolOf(m);
  RunAndSave(m, Kv("full", 0), *pool, text, file.path);
  const std::string bytes = ReadBytes(file.path);
  int checksum_errors = 0;
  for (size_t i = 0; i < bytes.size(); i += i < 160 ? 1 : 61) {
    std::string b = bytes;
    b[i] ^= static_cast<char>(1 << (i % 8));
    WriteBytes(flipped.path, b);
    const std::string e = LoadError(m, Kv("full", 0), *pool, flipped.path);
    EXPECT_NE(e.find("kv file " + flipped.path + ": "), std::string::npos) << i << ": " << e;
    checksum_errors += e.find("checksum") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(checksum_errors, 10);
  // The text-matching load reads the whole file too.
  std::string b = bytes;
  b[bytes.size() - 20] ^= 4;
  WriteBytes(flipped.path, b);
  const std::string e = LoadError(m, Kv("full", 0), *pool, flipped.path,
                                  KvFileLoadOptions{.text = std::span<const int32_t>(text)});
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
}

// Random garbage, random headers over a valid file, and a header that
// declares absurd sizes: errors, never a crash or a large allocation.
TEST(KvFile, GarbageAndHostileHeadersAreRefused) {
  const Model& m = testing::LoadModelCached(testing::kStories);
  const std::vector<int32_t> text = Prompt(20, m.config().n_vocab, 1);
  TempFile file("fuzz_src.kv"), bad("fuzz.kv");
  auto pool = PoolOf(m);
  RunAndSave(m, Kv("full", 0), *pool, text, file.path);
  const std::string bytes = ReadBytes(file.path);
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    std::string b;
    if (round % 3 == 0) {
      b.resize(rng() % 400);
      for (char& c : b) c = static_cast<char>(rng());
    } else {
      b = bytes;
      const int n = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < n; ++k)
        b[rng() % (round % 3 == 1 ? 64 : b.size())] = static_cast<char>(rng());
    }
    WriteBytes(bad.path, b);
    const std::string e = LoadError(m, Kv("full", 0), *pool, bad.path);
    if (b != bytes) {
      EXPECT_NE(e, "(loaded)") << round;
    }
    (void)ReadKvFileInfo(bad.path);
  }
  // n = 2^62 tokens: refused by the size check before anything is read.
  std::string b = bytes;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(b.data() + 48, &huge, sizeof huge);
  WriteBytes(bad.path, b);
  std::string e = LoadError(m, Kv("full", 0), *pool, bad.path);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_FALSE(ReadKvFileInfo(bad.path).ok());
  // A directory is not a file.
  e = LoadError(m, Kv("full", 0), *pool, std::filesystem::temp_directory_path().string());
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
}

}  // namespace
}  // namespace rotor
