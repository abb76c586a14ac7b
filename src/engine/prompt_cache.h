// Prompt caches: KV files (kv_file.h) moved between a file and the engine's
// prefix cache (kv_pool.h), for `rotor generate --prompt-cache` and the
// server's slot files.
//
// Loading goes through a temporary full cache on the engine's block pool: its
// whole blocks are published, and stay cached when it goes, so the next
// sequence whose prompt starts with those tokens takes them as it takes any
// cached prefix (Scheduler::Start, ChatSession::Send). Saving collects,
// through a temporary cache's AttachPrefix, the whole blocks of a text the
// prefix cache holds: a file holds a text's whole blocks of 16 tokens (a
// sequence that ran the text published them), the rest is computed again.
//
// The pool is not thread-safe: call these on the thread that runs the
// engine's sequences (the server's engine thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "kv/kv_config.h"

namespace rotor {

struct PromptCacheFile {
  int64_t n_tokens = 0;         // load: tokens read into the pool; save: tokens written
  int64_t n_cached = 0;         // load: of which in whole blocks, now in the prefix cache
  int64_t bytes = 0;            // the file's size
  std::vector<int32_t> tokens;  // load: the tokens read
};

// Loads the tokens of the KV file at `path` that start `text` (all of them
// when text is unset) into the engine's prefix cache, as blocks of kv's K/V
// type and RoPE mode: the file must have been written with those, its
// positions mode, and the engine's model. `kv` is a resolved request config.
Result<PromptCacheFile> LoadPromptCache(Engine& engine, const std::string& path, const KvConfig& kv,
                                        std::optional<std::span<const int32_t>> text);

// Writes to `path` the whole blocks of `text` that the prefix cache holds
// under kv's K/V type and RoPE mode: its first tokens, up to the first block
// not cached (possibly none: a file of 0 tokens).
Result<PromptCacheFile> SavePromptCache(Engine& engine, const std::string& path, const KvConfig& kv,
                                        std::span<const int32_t> text);

// Drops the cached blocks of `text` (those no sequence holds); returns how many.
int64_t DropPromptCache(Engine& engine, const KvConfig& kv, std::span<const int32_t> text);

// The config a KV file was written with (K/V type, RoPE mode, positions) as a
// resolved config of the full policy, for LoadPromptCache of any file.
Result<KvConfig> PromptCacheConfig(const Engine& engine, const std::string& path);

// Whether a request config can use prompt caches: a policy that shares
// prefixes, an engine whose prefix cache is on. The error names why not.
Status CheckPromptCache(const Engine& engine, const KvConfig& kv);

}  // namespace rotor
