#include "kv/kv_config.h"

#include <fmt/format.h>

#include <charconv>

#include "kv/kv_policy.h"
#include "kv/kv_quant.h"

namespace rotor {

std::string_view RopeKName(RopeK r) { return r == RopeK::kCached ? "cached" : "deferred"; }
std::string_view KvPositionsName(KvPositions p) {
  return p == KvPositions::kOriginal ? "original" : "compact";
}
std::string_view KvTypeName(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kBF16: return "bf16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
    case KvType::kQ5_0: return "q5_0";
  }
  return "?";
}

std::string KvTypesName(KvTypes t) {
  if (t.k == t.v) return std::string(KvTypeName(t.k));
  return fmt::format("{}/{}", KvTypeName(t.k), KvTypeName(t.v));
}

std::optional<RopeK> ParseRopeK(std::string_view s) {
  for (RopeK r : {RopeK::kCached, RopeK::kDeferred})
    if (s == RopeKName(r)) return r;
  return std::nullopt;
}

std::optional<KvPositions> ParseKvPositions(std::string_view s) {
  for (KvPositions p : {KvPositions::kOriginal, KvPositions::kCompact})
    if (s == KvPositionsName(p)) return p;
  return std::nullopt;
}

std::optional<KvType> ParseKvType(std::string_view s) {
  for (int i = 0; i < kKvTypeCount; ++i)
    if (s == KvTypeName(static_cast<KvType>(i))) return static_cast<KvType>(i);
  return std::nullopt;
}

namespace {

constexpr int kMaxCells = 1 << 24;

// Options every policy uses.
constexpr uint32_t KvCommonOptions() {
  return KvOptBit(KvOpt::kPolicy) | KvOptBit(KvOpt::kRopeK) | KvOptBit(KvOpt::kType) |
         KvOptBit(KvOpt::kTypeK) | KvOptBit(KvOpt::kTypeV) | KvOptBit(KvOpt::kRotate) |
         KvOptBit(KvOpt::kKeyOffset);
}

// The option table: one row per option, in display order.
constexpr KvOptionSpec kTable[] = {
    {KvOpt::kPolicy, "--kv", "", "kv", false, 0, 0, "full", "KV cache policy"},
    {KvOpt::kSize, "--kv-size", "", "kv_size", true, 0, kMaxCells, "0 = the context size",
     "cells per sequence (tokens the cache keeps)"},
    {KvOpt::kKeep, "--kv-keep", "", "kv_keep", true, 0, kMaxCells, "4",
     "first tokens never evicted (sink)"},
    {KvOpt::kRecent, "--kv-recent", "", "kv_recent", true, 1, kMaxCells, "4/5 of the size",
     "most recent tokens never evicted (h2o)"},
    {KvOpt::kWindow, "--kv-window", "", "kv_window", true, 1, kMaxCells, "32",
     "last prompt queries whose attention chooses the kept tokens (snapkv)"},
    {KvOpt::kRopeK, "--rope-k", "", "rope_k", false, 0, 0,
     "cached; with compact positions deferred for h2o and tova, and for snapkv with "
     "block-type keys",
     "keys stored after RoPE (cached), or before it and rotated in attention (deferred)"},
    {KvOpt::kPositions, "--kv-positions", "", "kv_positions", false, 0, 0,
     "compact; original for window",
     "positions after eviction (compact: renumbered inside the cache)"},
    {KvOpt::kType, "--kv-type", "", "kv_type", false, 0, 0, "f16",
     "element type of stored K and V (q8_0: about half of f16's memory and reads; q4_0, "
     "q5_0: about a quarter, a third)"},
    {KvOpt::kTypeK, "--kv-type-k", "--cache-type-k", "kv_type_k", false, 0, 0, "--kv-type",
     "element type of stored K alone (also -ctk)"},
    {KvOpt::kTypeV, "--kv-type-v", "--cache-type-v", "kv_type_v", false, 0, 0, "--kv-type",
     "element type of stored V alone (also -ctv)"},
    {KvOpt::kRotate, "--kv-rotate", "", "kv_rotate", false, 0, 0,
     "on for q8_0 / q4_0 / q5_0 K or V, else off",
     "Hadamard rotation of the stored heads (V, and K under cached RoPE): spreads outliers "
     "before quantization"},
    {KvOpt::kKeyOffset, "--kv-k-offset", "", "kv_k_offset", false, 0, 0,
     "on for q8_0 / q4_0 / q5_0 K, else off",
     "cached RoPE: store keys minus the model's mean key per channel (exact: softmax ignores "
     "the shift); deferred RoPE: store each channel centered and scaled to its range (read "
     "back in attention). The widest channels of a key stop setting its block scales"},
};
static_assert(std::size(kTable) == kKvOptCount);

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += i + 1 == v.size() ? " or " : ", ";
    s += v[i];
  }
  return s;
}

}  // namespace

std::span<const KvOptionSpec> KvOptions() { return kTable; }
const KvOptionSpec& KvOption(KvOpt id) { return kTable[static_cast<int>(id)]; }

std::vector<std::string> KvChoices(KvOpt id) {
  switch (id) {
    case KvOpt::kPolicy: {
      std::vector<std::string> v;
      for (const KvPolicyInfo* p : KvPolicyRegistry()) v.emplace_back(p->name);
      return v;
    }
    case KvOpt::kRopeK:
      return {"cached", "deferred"};
    case KvOpt::kPositions:
      return {"original", "compact"};
    case KvOpt::kType:
    case KvOpt::kTypeK:
    case KvOpt::kTypeV: {
      std::vector<std::string> v;
      for (int i = 0; i < kKvTypeCount; ++i) v.emplace_back(KvTypeName(static_cast<KvType>(i)));
      return v;
    }
    case KvOpt::kRotate:
    case KvOpt::kKeyOffset:
      return {"off", "on"};
    default:
      return {};
  }
}

std::string KvChoicesText(KvOpt id) { return Join(KvChoices(id)); }

Status KvConfig::SetInt(KvOpt o, int64_t value, KvSpelling spelling) {
  const KvOptionSpec& spec = KvOption(o);
  if (!spec.is_int) return Set(o, std::to_string(value), spelling);
  if (value < spec.min || value > spec.max)
    return Errorf("kv: {} {} is out of range [{}, {}]", spec.Name(spelling), value, spec.min,
                  spec.max);
  const int v = static_cast<int>(value);
  switch (o) {
    case KvOpt::kSize:
      size = v;
      break;
    case KvOpt::kKeep:
      keep = v;
      break;
    case KvOpt::kRecent:
      recent = v;
      break;
    case KvOpt::kWindow:
      window = v;
      break;
    default:
      break;
  }
  given |= KvOptBit(o);
  return Status::Ok();
}

Status KvConfig::Set(KvOpt o, std::string_view text, KvSpelling spelling) {
  const KvOptionSpec& spec = KvOption(o);
  if (spec.is_int) {
    int64_t v = 0;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || p != end || text.empty())
      return Errorf("kv: {} '{}' is not an integer", spec.Name(spelling), text);
    return SetInt(o, v, spelling);
  }
  auto bad = [&] {
    return Errorf("kv: {} '{}' is not one of {}", spec.Name(spelling), text, KvChoicesText(o));
  };
  switch (o) {
    case KvOpt::kPolicy: {
      if (FindKvPolicy(text) == nullptr) return bad();
      // A new policy starts from its defaults: options given for another
      // policy do not carry over; rope_k and type (every policy's) do.
      KvConfig fresh;
      fresh.rope_k = rope_k;
      fresh.types = types;
      fresh.rotate = rotate;
      fresh.k_offset = k_offset;
      fresh.given = given & (KvOptBit(KvOpt::kRopeK) | KvOptBit(KvOpt::kType) |
                             KvOptBit(KvOpt::kTypeK) | KvOptBit(KvOpt::kTypeV) |
                             KvOptBit(KvOpt::kRotate) | KvOptBit(KvOpt::kKeyOffset));
      if (text != policy) *this = fresh;
      policy = std::string(text);
      break;
    }
    case KvOpt::kRopeK: {
      auto r = ParseRopeK(text);
      if (!r) return bad();
      rope_k = *r;
      break;
    }
    case KvOpt::kPositions: {
      auto p = ParseKvPositions(text);
      if (!p) return bad();
      positions = *p;
      break;
    }
    case KvOpt::kType:
    case KvOpt::kTypeK:
    case KvOpt::kTypeV: {
      auto t = ParseKvType(text);
      if (!t) return bad();
      if (o != KvOpt::kTypeV) types.k = *t;
      if (o != KvOpt::kTypeK) types.v = *t;
      break;
    }
    case KvOpt::kRotate:
      if (text != "on" && text != "off") return bad();
      rotate = text == "on";
      break;
    case KvOpt::kKeyOffset:
      if (text != "on" && text != "off") return bad();
      k_offset = text == "on";
      break;
    default:
      return bad();
  }
  given |= KvOptBit(o);
  return Status::Ok();
}

std::string KvConfig::Get(KvOpt o) const {
  switch (o) {
    case KvOpt::kPolicy:
      return policy;
    case KvOpt::kSize:
      return std::to_string(size);
    case KvOpt::kKeep:
      return std::to_string(keep);
    case KvOpt::kRecent:
      return std::to_string(recent);
    case KvOpt::kWindow:
      return std::to_string(window);
    case KvOpt::kRopeK:
      return std::string(RopeKName(rope_k));
    case KvOpt::kPositions:
      return std::string(KvPositionsName(positions));
    case KvOpt::kType:
      return KvTypesName(types);
    case KvOpt::kTypeK:
      return std::string(KvTypeName(types.k));
    case KvOpt::kTypeV:
      return std::string(KvTypeName(types.v));
    case KvOpt::kRotate:
      return rotate ? "on" : "off";
    case KvOpt::kKeyOffset:
      return k_offset ? "on" : "off";
  }
  return "";
}

Result<KvConfig> ResolveKvConfig(const KvConfig& config, const KvShape& shape,
                                 KvSpelling spelling) {
  const KvPolicyInfo* info = FindKvPolicy(config.policy);
  const std::string_view kv = KvOption(KvOpt::kPolicy).Name(spelling);
  if (info == nullptr)
    return Errorf("kv: {} '{}' is not one of {}", kv, config.policy, KvChoicesText(KvOpt::kPolicy));
  if (shape.n_ctx <= 0) return Errorf("kv: context size {} must be positive", shape.n_ctx);
  const uint32_t common = KvCommonOptions();
  for (const KvOptionSpec& spec : KvOptions()) {
    const uint32_t bit = KvOptBit(spec.id);
    if ((config.given & bit) && !(common & bit) && !(info->options & bit))
      return Errorf("kv: {} is not used by {} {}", spec.Name(spelling), kv, info->name);
  }
  KvConfig c = config;
  const std::string_view size = KvOption(KvOpt::kSize).Name(spelling);
  if (c.size < 0) return Errorf("kv: {} {} must not be negative", size, c.size);
  if (c.size == 0) c.size = shape.n_ctx;
  if (c.size > shape.n_ctx)
    return Errorf("kv: {} {} is larger than the context size {} (raise the context or lower {})",
                  size, c.size, shape.n_ctx, size);
  // A resolved config says 0 for the counts its policy does not use.
  if (!(info->options & KvOptBit(KvOpt::kKeep))) c.keep = 0;
  if (!(info->options & KvOptBit(KvOpt::kRecent))) c.recent = 0;
  if (!(info->options & KvOptBit(KvOpt::kWindow))) c.window = 0;
  if (info->resolve != nullptr) RETURN_IF_ERROR(info->resolve(c, shape, spelling));
  // The rotation's default follows the types: on when K or V is a block
  // type (it lowers their KL divergence: docs/EVALUATION.md), else off.
  if (!c.Given(KvOpt::kRotate)) c.rotate = KvTypeQuantized(c.types.k) || KvTypeQuantized(c.types.v);
  for (KvType t : {c.types.k, c.types.v})
    if (KvTypeQuantized(t) && KvQuantBlock(shape.head_dim) == 0)
      return Errorf(
          "kv: {} {} needs a head size that is a multiple of 8 (quantization blocks of 32, 16 or "
          "8 elements); this model's is {}",
          KvOption(KvOpt::kType).Name(spelling), KvTypeName(t), shape.head_dim);
  if (c.rotate && KvQuantBlock(shape.head_dim) == 0)
    return Errorf("kv: {} on needs a head size that is a multiple of 8; this model's is {}",
                  KvOption(KvOpt::kRotate).Name(spelling), shape.head_dim);
  // Key offsets: on by default for block-type keys (they lower the 4- and
  // 5-bit types' KL divergence several fold: docs/EVALUATION.md) when the
  // model has them. Under cached RoPE keys are stored minus the model's
  // offsets; under deferred RoPE as channels centered and scaled to their
  // ranges (kv_key_offsets.h).
  const std::string_view offset = KvOption(KvOpt::kKeyOffset).Name(spelling);
  if (!c.Given(KvOpt::kKeyOffset)) c.k_offset = KvTypeQuantized(c.types.k) && shape.k_offsets;
  if (c.k_offset && shape.k_offsets == nullptr)
    return Errorf("kv: {} on: this cache's model has no key offsets", offset);
  return c;
}

bool KvPolicyExists(std::string_view name) { return FindKvPolicy(name) != nullptr; }

bool KvPolicyUses(std::string_view policy, KvOpt o) {
  const KvPolicyInfo* info = FindKvPolicy(policy);
  if (info == nullptr) return false;
  if (KvCommonOptions() & KvOptBit(o)) return true;
  return (info->options & KvOptBit(o)) != 0;
}

bool KvPolicyEvicts(std::string_view policy) {
  const KvPolicyInfo* info = FindKvPolicy(policy);
  return info != nullptr && info->evicts;
}

int64_t KvMaxPrompt(const KvConfig& resolved, const KvShape& shape) {
  const KvPolicyInfo* info = FindKvPolicy(resolved.policy);
  if (info == nullptr || info->max_prompt == nullptr) return -1;
  return info->max_prompt(resolved, shape);
}

std::string DescribeKvConfig(const KvConfig& c) {
  std::string s = fmt::format("{}, {} cells", c.policy, c.size);
  if (KvPolicyUses(c.policy, KvOpt::kKeep))
    s += fmt::format(" ({} sinks + {} recent)", c.keep, c.size - c.keep);
  if (KvPolicyUses(c.policy, KvOpt::kRecent))
    s += fmt::format(" ({} heavy hitters + {} recent)", c.size - c.recent, c.recent);
  if (KvPolicyUses(c.policy, KvOpt::kWindow)) s += fmt::format(" (window {})", c.window);
  if (KvPolicyUses(c.policy, KvOpt::kPositions))
    s += fmt::format(", {} positions", KvPositionsName(c.positions));
  s += fmt::format(", {} keys, {} K/V", RopeKName(c.rope_k), KvTypesName(c.types));
  if (c.rotate) s += " (rotated)";
  if (c.k_offset)
    s += c.rope_k == RopeK::kCached ? " (key offsets)" : " (key channels centered and scaled)";
  return s;
}

}  // namespace rotor
