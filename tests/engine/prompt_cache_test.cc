// Prompt caches (engine/prompt_cache.h): a prompt's whole blocks saved after
// a generation and loaded by another engine give the same text, its prefix
// taken from the file; a file of another K/V type, a policy that does not
// share prefixes and an engine without a prefix cache are refused; dropping a
// text's cached blocks forgets them.
#include "engine/prompt_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace rotor {
namespace {
namespace prompt_cache_test {

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with "
    "her red ball. One day she saw a big dog under a tree.";

std::unique_ptr<Engine> NewEngine(bool prefix_cache = true) {
  auto e = Engine::Create(EngineOptions{
      .model_path = kModel, .n_threads = 2, .n_ctx = 256, .prefix_cache = prefix_cache});
  EXPECT_TRUE(e.ok()) << e.message();
  return std::move(*e);
}

GenerateOptions Greedy() {
  GenerateOptions o;
  o.prompt = kStory;
  o.sampling.temperature = 0;
  o.n_predict = 24;
  o.ignore_eos = true;
  return o;
}

struct TempFile {
  TempFile()
      : path((std::filesystem::temp_directory_path() /
              ("rotor_prompt_cache_" + std::to_string(::getpid()) + ".kv"))
                 .string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

TEST(PromptCache, SavedAfterAGenerationAndLoadedByAnotherEngine) {
  auto a = NewEngine();
  const GenerateOptions o = Greedy();
  const KvConfig kv = a->Validate(o).value();
  Result<GenerateResult> first = a->Generate(o, {});
  ASSERT_TRUE(first.ok()) << first.message();
  const std::vector<int32_t>& prompt = first->prompt_tokens;
  const int64_t n = static_cast<int64_t>(prompt.size());
  TempFile file;
  Result<PromptCacheFile> saved = SavePromptCache(*a, file.path, kv, prompt);
  ASSERT_TRUE(saved.ok()) << saved.message();
  EXPECT_EQ(saved->n_tokens, n / 16 * 16);
  EXPECT_EQ(saved->bytes, static_cast<int64_t>(std::filesystem::file_size(file.path)));

  auto b = NewEngine();
  Result<PromptCacheFile> loaded =
      LoadPromptCache(*b, file.path, kv, std::span<const int32_t>(prompt));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(loaded->n_tokens, saved->n_tokens);
  EXPECT_EQ(loaded->n_cached, saved->n_tokens);
  Result<GenerateResult> second = b->Generate(o, {});
  ASSERT_TRUE(second.ok()) << second.message();
  EXPECT_EQ(second->text, first->text);
  EXPECT_EQ(second->cached_tokens, std::min(saved->n_tokens, (n - 1) / 16 * 16));
  EXPECT_GT(second->cached_tokens, 0);

  // The file holds f32 K/V of cached keys: an f16 or deferred-keys request
  // cannot use it.
  KvConfig f16 = kv;  // (a q8_0 request: f16 is the default the file was written with)
  f16.types = KvTypes{KvType::kQ8_0, KvType::kQ8_0};
  Result<PromptCacheFile> r = LoadPromptCache(*b, file.path, f16, std::span<const int32_t>(prompt));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("K/V type (kv_type) f16; the cache's is q8_0"), std::string::npos)
      << r.message();
  Result<KvConfig> of_file = PromptCacheConfig(*b, file.path);
  ASSERT_TRUE(of_file.ok()) << of_file.message();
  EXPECT_EQ(of_file->types, (KvTypes{KvType::kF16, KvType::kF16}));
  EXPECT_EQ(of_file->rope_k, RopeK::kCached);

  // Dropped, the next run computes everything again.
  EXPECT_EQ(DropPromptCache(*b, kv, prompt), n / 16);
  second = b->Generate(o, {});
  ASSERT_TRUE(second.ok()) << second.message();
  EXPECT_EQ(second->cached_tokens, 0);
  EXPECT_EQ(DropPromptCache(*b, kv, prompt), n / 16);  // what that run left
  EXPECT_TRUE(b->kv_pool().Validate().ok());
}

TEST(PromptCache, RefusesPoliciesThatDoNotSharePrefixesAndAnEngineWithoutAPrefixCache) {
  auto e = NewEngine();
  GenerateOptions o = Greedy();
  o.kv.policy = "h2o";
  Status s = CheckPromptCache(*e, e->Validate(o).value());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the h2o cache does not share prefixes"), std::string::npos)
      << s.message();
  auto off = NewEngine(false);
  s = CheckPromptCache(*off, off->Validate(Greedy()).value());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--no-prefix-cache"), std::string::npos) << s.message();
}

}  // namespace prompt_cache_test
}  // namespace
}  // namespace rotor
