// What a user can ask of the KV cache: the policy, its size, where RoPE is
// applied to keys, and how positions are numbered after an eviction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "ops/rope.h"

namespace rotor {

enum class KvPolicy { kFull, kSink, kWindow, kH2o };
enum class RopeK { kCached, kDeferred };      // K stored after RoPE / before RoPE
enum class KvPositions { kOriginal, kCompact };
// Element type of the stored K and V. f16 halves the cache and the bytes
// attention reads (llama.cpp's default); the current ubatch's own keys and
// values are rounded to it too, so a token sees the same K/V whatever the
// prefill step or the batch.
enum class KvType { kF32, kF16 };

// The geometry of one sequence's cache: fixed by the model.
struct KvShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;  // the largest number of tokens a sequence may have in its context
  // How keys are rotated (re-rotation of cached K). Its freq_factors, if any,
  // point into the model's config, which outlives every cache of the model.
  ops::RopeConfig rope{};
};

struct KvConfig {
  KvPolicy policy = KvPolicy::kFull;
  int size = 0;     // cells per sequence; 0 = n_ctx
  int keep = 4;     // sink tokens never evicted (sink); forced to 0 for window
  int recent = -1;  // h2o recent window; -1 = size / 2
  RopeK rope_k = RopeK::kCached;
  KvPositions positions = KvPositions::kOriginal;
  KvType type = KvType::kF32;
};

std::string_view KvPolicyName(KvPolicy p);
std::string_view RopeKName(RopeK r);
std::string_view KvPositionsName(KvPositions p);
std::string_view KvTypeName(KvType t);
size_t KvTypeBytes(KvType t);
std::optional<KvPolicy> ParseKvPolicy(std::string_view s);
std::optional<RopeK> ParseRopeK(std::string_view s);
std::optional<KvPositions> ParseKvPositions(std::string_view s);
std::optional<KvType> ParseKvType(std::string_view s);

// The configuration with defaults filled in (size, keep, recent), or a clear
// error for a combination that cannot be honoured.
Result<KvConfig> ResolveKvConfig(const KvConfig& config, const KvShape& shape);

}  // namespace rotor
