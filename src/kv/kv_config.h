// What a user can ask of the KV cache, declared once.
//
// Every KV option (policy, size, keep, recent, window, RoPE mode, positions,
// element type) is one row of the option table (KvOptions()): its command-line
// flag, its JSON field, its range or choices, its default and its help. The CLI
// of every command, the `--prompts` JSON lines, the server's request fields and
// the comma-separated lists of `perplexity` and `bench` all set options through
// KvConfig::Set, so a value is checked, and an error worded, the same way
// everywhere, naming the option as the caller spelled it (`--kv-size` on the
// command line, `kv_size` in JSON).
//
// An option has no sentinel value: the config remembers which options were
// given, and an option the chosen policy does not use, given explicitly, is an
// error that says so. Which options a policy uses is declared by the policy
// (kv_policy.h); nothing outside src/kv names a policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ops/rope.h"

namespace rotor {

class KvKeyOffsets;

enum class RopeK { kCached, kDeferred };  // K stored after RoPE / before RoPE
enum class KvPositions { kOriginal, kCompact };
// Element type of the stored K (or V). f16 halves the cache and the bytes
// attention reads (llama.cpp's default); bf16 the same with f32's range; q8_0,
// q4_0 and q5_0 are GGML's 32-element blocks (an f16 scale and 8-, 4- or
// 5-bit integers; kv_quant.h: blocks of 16 or 8 for head sizes that are not a
// multiple of 32), read by attention in place. The current ubatch's own keys
// and values are rounded to it too, so a token sees the same K/V whatever the
// prefill step or the batch. Values are stored in KV files: never renumber.
enum class KvType { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4, kQ5_0 = 5 };
inline constexpr int kKvTypeCount = 6;
// The element types of K and V (they may differ: --kv-type-k, --kv-type-v).
struct KvTypes {
  KvType k = KvType::kF16;
  KvType v = KvType::kF16;
  bool operator==(const KvTypes&) const = default;
  int index() const { return static_cast<int>(k) * kKvTypeCount + static_cast<int>(v); }
};

std::string_view RopeKName(RopeK r);
std::string_view KvPositionsName(KvPositions p);
std::string_view KvTypeName(KvType t);
// "q8_0" when K and V agree, else "q8_0/q4_0" (K/V).
std::string KvTypesName(KvTypes t);
std::optional<RopeK> ParseRopeK(std::string_view s);
std::optional<KvPositions> ParseKvPositions(std::string_view s);
std::optional<KvType> ParseKvType(std::string_view s);

// The geometry of one sequence's cache: fixed by the model.
struct KvShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;  // the largest number of tokens a sequence may have in its context
  // How keys are rotated (re-rotation of cached K). Its freq_factors, if any,
  // point into the model's config, which outlives every cache of the model.
  ops::RopeConfig rope{};
  // The model's per-channel key offsets (kv_key_offsets.h), computed on first
  // use; null when the model has none (then --kv-k-offset on is an error).
  // Owned by the model, which outlives every cache of it.
  const KvKeyOffsets* k_offsets = nullptr;
};

// The rows of the option table.
enum class KvOpt : int {
  kPolicy, kSize, kKeep, kRecent, kWindow, kRopeK, kPositions,
  kType,    // K and V
  kTypeK,   // K only (after kType: `--kv-type q8_0 --kv-type-v q4_0`)
  kTypeV,   // V only
  kRotate,  // Hadamard rotation of the heads (kv_quant.h)
  kKeyOffset,  // per-channel key offsets subtracted before storing (kv_key_offsets.h)
};
inline constexpr int kKvOptCount = 12;
constexpr uint32_t KvOptBit(KvOpt o) { return 1u << static_cast<int>(o); }

// How the caller spells option names: errors use the caller's spelling.
enum class KvSpelling { kFlag, kField };

struct KvOptionSpec {
  KvOpt id;
  std::string_view flag;   // "--kv-size"
  std::string_view alias;  // another spelling of the flag ("--cache-type-k"), or empty
  std::string_view field;  // "kv_size"
  bool is_int = true;      // an integer in [min, max], else one of choices()
  int min = 0, max = 0;
  std::string_view default_text;  // as shown in help ("4", "size / 2", "f32")
  std::string_view help;
  std::string_view Name(KvSpelling s) const { return s == KvSpelling::kFlag ? flag : field; }
};

// The whole table, in display order.
std::span<const KvOptionSpec> KvOptions();
const KvOptionSpec& KvOption(KvOpt id);
// The accepted values of a choice option ("full", "sink", ... for kPolicy).
std::vector<std::string> KvChoices(KvOpt id);
// "full, sink, window or h2o".
std::string KvChoicesText(KvOpt id);

struct KvConfig {
  std::string policy = "full";
  int size = 0;     // cells per sequence; 0 = the context size
  int keep = 4;     // sink: first tokens never evicted
  int recent = 0;   // h2o: most recent tokens never evicted; default 4/5 of size
  int window = 32;  // snapkv: observation window (last prompt queries)
  RopeK rope_k = RopeK::kCached;
  KvPositions positions = KvPositions::kOriginal;  // the evicting policies' resolve: compact
  KvTypes types;        // element types of K and V (default f16)
  bool rotate = false;  // Hadamard-rotated K (cached RoPE) and V heads
  bool k_offset =
      false;  // keys stored minus the key offsets (cached RoPE) or centered and scaled (deferred)
  uint32_t given = 0;  // KvOptBit of every option set explicitly

  bool Given(KvOpt o) const { return (given & KvOptBit(o)) != 0; }
  // Sets an option from text (a flag's value, a JSON string or number as
  // text) and marks it given; the error names the option in `spelling`.
  // Setting the policy resets the options it does not use to their defaults.
  Status Set(KvOpt o, std::string_view text, KvSpelling spelling = KvSpelling::kFlag);
  Status SetInt(KvOpt o, int64_t value, KvSpelling spelling = KvSpelling::kFlag);
  // The option's value as text ("sink", "128", "deferred").
  std::string Get(KvOpt o) const;
};

// " (the default)" when `o` was not set explicitly, else "": for errors about
// a value the user may not have chosen ("kv_keep 4 (the default) must be ...").
inline std::string_view DefaultMark(const KvConfig& c, KvOpt o) {
  return c.Given(o) ? std::string_view() : std::string_view(" (the default)");
}

// The configuration with the policy's defaults filled in (size, keep, recent,
// window), or a clear error naming the option as `spelling` writes it: a value
// out of range for the context, an option the policy does not use.
Result<KvConfig> ResolveKvConfig(const KvConfig& config, const KvShape& shape,
                                 KvSpelling spelling = KvSpelling::kFlag);

// What callers may ask of a policy by name (no policy is named outside src/kv).
bool KvPolicyExists(std::string_view name);
bool KvPolicyUses(std::string_view policy, KvOpt o);
// True when the policy evicts: memory bounded by --kv-size, any text length.
bool KvPolicyEvicts(std::string_view policy);
// The longest prompt a cache of this config can take from empty (the full
// cache's size, snapkv's context), or -1 when any length fits.
int64_t KvMaxPrompt(const KvConfig& resolved, const KvShape& shape);
// A one-line description of a resolved config:
// "sink, 128 cells (4 sinks + 124 recent), compact positions, cached keys, f16 K/V".
std::string DescribeKvConfig(const KvConfig& resolved);

}  // namespace rotor
