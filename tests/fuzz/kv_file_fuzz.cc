// KV files (kv/kv_file.h: `generate --prompt-cache`, the server's slot files,
// `chat`'s /save) on arbitrary bytes: the header reader, then, when the header
// is sane and small, a load into an empty cache of the file's own shape, types
// and model identity (so that mutated rows and checksums are reached, not only
// the mismatch checks). On an error the cache must be left empty.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kv/kv_cache.h"
#include "kv/kv_config.h"
#include "kv/kv_file.h"
#include "kv/kv_pool.h"

namespace {

const std::string& Path() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("rotor_fuzz_kv_" + std::to_string(::getpid())))
          .string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(Path().c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);

  auto info = rotor::ReadKvFileInfo(Path());
  if (!info.ok()) return 0;
  // Small enough to load quickly: the bundled model's shape is 5 x 4 x 8.
  if (info->n_layer > 8 || info->n_head_kv > 8 || info->head_dim > 64 || info->tokens.size() > 1024)
    return 0;
  rotor::KvShape shape{.n_layer = info->n_layer,
                       .n_head_kv = info->n_head_kv,
                       .head_dim = info->head_dim,
                       .n_ctx = 1024,
                       .rope = {.head_dim = info->head_dim, .n_rot = info->head_dim & ~1}};
  rotor::KvConfig want;
  want.types = info->types;
  want.rotate = info->rotate;
  want.rope_k = info->rope_k;
  want.positions = info->positions;
  auto config = rotor::ResolveKvConfig(want, shape);
  if (!config.ok()) return 0;
  rotor::KvBlockPool pool(shape, rotor::KvPoolOptions{.budget_bytes = 64 << 20,
                                                      .model_id = info->model_id});
  auto cache = rotor::KvCache::Create(shape, *config, &pool);
  if (!cache.ok()) return 0;
  auto loaded = rotor::LoadKvFile(Path(), **cache);
  if (!loaded.ok() && ((*cache)->n_seen() != 0 || (*cache)->n_blocks_held() != 0)) {
    std::fprintf(stderr, "kv file: a failed load left %lld tokens in the cache\n",
                 static_cast<long long>((*cache)->n_seen()));
    std::abort();
  }
  return 0;
}
