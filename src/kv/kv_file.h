// KV files: the K/V of a text's first tokens, saved so that a later process
// continues from them instead of computing them again (`rotor generate
// --prompt-cache`, the server's slot files, `rotor chat`'s /save).
//
// What a file holds is what any cache whose policy shares prefixes (full,
// sink, window; kv_policy.h) holds for tokens 0..n-1 before it evicts: token
// t in cell t at position t, having attended to tokens 0..t. So a file is
// independent of the policy; it depends on the model, the K and V element
// types, the rotation and the RoPE mode (as a published block does, kv_pool.h's PrefixSeed) and,
// by declaration, the positions mode.
//
// Layout, little-endian:
//   char[8]  magic "ROTORKV\0"
//   u32      version (2; version 1 files, f32 or f16 for both, are read too)
//   u32      n_layer, n_head_kv, head_dim
//   u32      K type (KvType: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q5_0),
//            rope_k (0 cached, 1 deferred), positions (0 original, 1 compact)
//   u32      V type (bits 0-7; version 1: 0, the K type is both's) and
//            rotation (bit 8: heads stored Hadamard-rotated), key offsets
//            (bit 9: keys stored minus the model's key offsets, kv_key_offsets.h)
//   u64      model identity (Model::identity())
//   u64      n: tokens
//   i32[n]   token ids
//   rows     per layer: K of tokens 0..n-1, then V of tokens 0..n-1,
//            [n, n_head_kv] heads of the K (V) type each (kv_quant.h)
//   u64      FNV-1a (64 bits) of every byte before it
//
// Reading checks, before any large read or allocation, that every field is
// sane and the file's size is exactly the one the header implies; the checksum
// is checked as the rows stream into the cache's blocks, and a mismatch gives
// them back. A file is written to PATH.tmp and renamed over PATH.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache.h"
#include "kv/kv_config.h"

namespace rotor {

inline constexpr uint32_t kKvFileVersion = 2;

struct KvFileInfo {
  uint64_t model_id = 0;
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  KvTypes types;
  bool rotate = false;
  bool k_offset = false;  // keys stored minus the model's key offsets
  RopeK rope_k = RopeK::kCached;
  KvPositions positions = KvPositions::kOriginal;
  std::vector<int32_t> tokens;
  int64_t bytes = 0;  // the file's size
};

// The header and token ids of a KV file: the magic, version, field values and
// the file's size are checked, the checksum is not (LoadKvFile reads every
// byte and checks it).
Result<KvFileInfo> ReadKvFileInfo(const std::string& path);

// Writes tokens 0..n-1 of `cache`, n = tokens.size(), to `path`; the model
// identity is the cache's pool's. KvCache::ExportPrefix says which caches
// can (cells 0..n-1 holding tokens 0..n-1 at their own positions). Returns
// the bytes written.
Result<int64_t> SaveKvFile(const std::string& path, const KvCache& cache,
                           std::span<const int32_t> tokens);

struct KvFileLoadOptions {
  // Set: only the file's first tokens that agree with these are loaded (the
  // longest common prefix; possibly none). Unset: all of them.
  std::optional<std::span<const int32_t>> text;
};

struct KvFileLoaded {
  int64_t n_loaded = 0;         // tokens now in the cache
  int64_t n_file = 0;           // tokens in the file
  int64_t bytes = 0;            // the file's size
  std::vector<int32_t> tokens;  // [n_loaded] the tokens loaded
};

// Loads a KV file into an empty cache whose policy shares prefixes
// (KvCache::ImportPrefix: the tokens count as run, full blocks join the
// pool's prefix cache). Refused, with both values named, when the file is for
// another model (the cache's pool's identity), shape, K/V type, RoPE mode or
// positions mode; when it is truncated, too long, of another format or
// version, or its checksum fails; when the tokens to load exceed the cache or
// the pool's budget. On an error the cache stays empty.
Result<KvFileLoaded> LoadKvFile(const std::string& path, KvCache& cache,
                                const KvFileLoadOptions& options = {});

}  // namespace rotor
