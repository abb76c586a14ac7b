#include "kv/kv_config.h"

namespace rotor {

std::string_view KvPolicyName(KvPolicy p) {
  switch (p) {
    case KvPolicy::kFull: return "full";
    case KvPolicy::kSink: return "sink";
    case KvPolicy::kWindow: return "window";
    case KvPolicy::kH2o: return "h2o";
  }
  return "?";
}

std::string_view RopeKName(RopeK r) { return r == RopeK::kCached ? "cached" : "deferred"; }
std::string_view KvPositionsName(KvPositions p) {
  return p == KvPositions::kOriginal ? "original" : "compact";
}

std::string_view KvTypeName(KvType t) { return t == KvType::kF32 ? "f32" : "f16"; }
size_t KvTypeBytes(KvType t) { return t == KvType::kF32 ? 4 : 2; }

std::optional<KvPolicy> ParseKvPolicy(std::string_view s) {
  for (KvPolicy p : {KvPolicy::kFull, KvPolicy::kSink, KvPolicy::kWindow, KvPolicy::kH2o})
    if (s == KvPolicyName(p)) return p;
  return std::nullopt;
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
  for (KvType t : {KvType::kF32, KvType::kF16})
    if (s == KvTypeName(t)) return t;
  return std::nullopt;
}

Result<KvConfig> ResolveKvConfig(const KvConfig& config, const KvShape& shape) {
  KvConfig c = config;
  if (shape.n_ctx <= 0) return Errorf("kv: context size {} must be positive", shape.n_ctx);
  if (c.size < 0) return Errorf("kv: --kv-size {} must not be negative", c.size);
  if (c.size == 0) c.size = shape.n_ctx;
  if (c.size > shape.n_ctx)
    return Errorf("kv: --kv-size {} is larger than the context size {} (raise -c or lower --kv-size)",
                  c.size, shape.n_ctx);
  switch (c.policy) {
    case KvPolicy::kFull:
      if (c.size != shape.n_ctx && config.size != 0)
        return Errorf("kv: --kv full keeps every token of the context: --kv-size {} must equal -c {}",
                      c.size, shape.n_ctx);
      c.keep = 0;
      c.recent = 0;
      break;
    case KvPolicy::kWindow:
      if (config.keep != 4 && config.keep != 0)
        return Errorf("kv: --kv window has no sink tokens: --kv-keep {} is not allowed (use --kv sink)",
                      config.keep);
      c.keep = 0;
      if (c.size < 1) return Errorf("kv: --kv-size {} too small for --kv window", c.size);
      c.recent = c.size;
      break;
    case KvPolicy::kSink:
      if (c.keep < 0) return Errorf("kv: --kv-keep {} must not be negative", c.keep);
      if (c.keep >= c.size)
        return Errorf("kv: --kv-keep {} must be smaller than --kv-size {}", c.keep, c.size);
      c.recent = c.size - c.keep;
      break;
    case KvPolicy::kH2o:
      if (c.recent == -1) c.recent = c.size / 2;
      if (c.recent < 1 || c.recent >= c.size)
        return Errorf("kv: --kv-recent {} must be in [1, --kv-size {})", c.recent, c.size);
      c.keep = 0;
      break;
  }
  if (c.positions == KvPositions::kCompact && c.policy == KvPolicy::kFull)
    return Status::Error("kv: --kv-positions compact needs an evicting policy (sink, window or h2o)");
  return c;
}

}  // namespace rotor
