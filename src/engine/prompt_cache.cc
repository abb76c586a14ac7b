#include "engine/prompt_cache.h"

#include <memory>

#include "kv/kv_cache.h"
#include "kv/kv_file.h"

namespace rotor {
namespace {

// A full cache on the engine's pool with kv's K/V type, RoPE mode and
// positions: the vehicle between a file and the prefix cache.
Result<std::unique_ptr<KvCache>> Vehicle(Engine& engine, const KvConfig& kv) {
  KvConfig c;
  c.types = kv.types;
  c.rotate = kv.rotate;
  c.k_offset = kv.k_offset;
  c.given |= KvOptBit(KvOpt::kRotate) | KvOptBit(KvOpt::kKeyOffset);
  c.rope_k = kv.rope_k;
  c.positions = kv.positions;  // the full policy ignores it; the file records it
  return KvCache::Create(engine.model().kv_shape(engine.n_ctx()), c, &engine.kv_pool());
}

}  // namespace

Status CheckPromptCache(const Engine& engine, const KvConfig& kv) {
  if (!engine.prefix_cache())
    return Status::Error("prompt cache: the prefix cache is off (--no-prefix-cache)");
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> probe,
                   KvCache::Create(engine.model().kv_shape(engine.n_ctx()), kv));
  if (!probe->SharesPrefix())
    return Errorf(
        "prompt cache: the {} cache does not share prefixes (what it keeps depends on "
        "attention); full, sink and window do",
        kv.policy);
  return Status::Ok();
}

Result<PromptCacheFile> LoadPromptCache(Engine& engine, const std::string& path, const KvConfig& kv,
                                        std::optional<std::span<const int32_t>> text) {
  RETURN_IF_ERROR(CheckPromptCache(engine, kv));
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, Vehicle(engine, kv));
  ASSIGN_OR_RETURN(KvFileLoaded loaded, LoadKvFile(path, *cache, KvFileLoadOptions{.text = text}));
  PromptCacheFile out;
  out.n_tokens = loaded.n_loaded;
  const int64_t b = engine.kv_pool().block_cells();
  out.n_cached = loaded.n_loaded / b * b;
  out.bytes = loaded.bytes;
  out.tokens = std::move(loaded.tokens);
  // The cache goes now: its published blocks stay cached, a partial last one is freed.
  return out;
}

Result<PromptCacheFile> SavePromptCache(Engine& engine, const std::string& path, const KvConfig& kv,
                                        std::span<const int32_t> text) {
  RETURN_IF_ERROR(CheckPromptCache(engine, kv));
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, Vehicle(engine, kv));
  // Not a prompt's lookup: the prefix cache's hit figures stay as they were.
  KvBlockPool::Stats& stats = engine.kv_pool().mutable_stats();
  const int64_t query = stats.query_tokens, hit = stats.hit_tokens;
  const int64_t n = cache->AttachPrefix(text, static_cast<int64_t>(text.size()));
  stats.query_tokens = query, stats.hit_tokens = hit;
  PromptCacheFile out;
  out.n_tokens = n;
  ASSIGN_OR_RETURN(out.bytes, SaveKvFile(path, *cache, text.subspan(0, n)));
  return out;
}

int64_t DropPromptCache(Engine& engine, const KvConfig& kv, std::span<const int32_t> text) {
  KvBlockPool& pool = engine.kv_pool();
  return pool.DropCachedChain(PrefixRoot(PrefixSeed{pool.model_id(), kv.types, kv.rotate, kv.rope_k, kv.k_offset}), text);
}

Result<KvConfig> PromptCacheConfig(const Engine& engine, const std::string& path) {
  ASSIGN_OR_RETURN(KvFileInfo info, ReadKvFileInfo(path));
  KvConfig c;
  c.types = info.types;
  c.rotate = info.rotate;
  c.k_offset = info.k_offset;
  c.given |= KvOptBit(KvOpt::kRotate) | KvOptBit(KvOpt::kKeyOffset);
  c.rope_k = info.rope_k;
  c.positions = info.positions;
  return ResolveKvConfig(c, engine.model().kv_shape(engine.n_ctx()));
}

}  // namespace rotor
