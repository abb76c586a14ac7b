// Planning for the full and ring (sink, window) policies: where each new token
// goes, which keys each query sees, and at which RoPE positions.
#include <algorithm>

#include "kv/kv_cache.h"

namespace rotor {

Status KvCache::PlanFull(int32_t n_tokens, KvPlan* plan) const {
  if (n_seen_ + n_tokens > config_.size)
    return Errorf("kv: context full: {} tokens in the cache + {} new > context size {}", n_seen_,
                  n_tokens, config_.size);
  for (int32_t i = 0; i < n_tokens; ++i) {
    plan->pos[i] = static_cast<int32_t>(n_seen_ + i);
    plan->slot[i] = Slot{static_cast<int32_t>(n_seen_ + i)};
  }
  return Status::Ok();
}

// Cells [0, keep) hold tokens 0..keep-1; the other W = size - keep cells are a
// ring: token t >= keep lives in cell keep + (t - keep) % W. Token t sees the
// sinks and the W most recent tokens up to itself, so when it is written it
// overwrites exactly the token it no longer sees (t - W). Of a chunk longer
// than W only the last W tokens are stored: the earlier ones are attended to
// from the chunk's own K/V and never written.
//
// Compact positions: s0 = tokens evicted before the chunk = max(0, first - size).
// Window keys and queries use text index - s0, so their distances are the
// text distances; sinks keep their index j, and query t sees them at distance
// min(t, size - 1) - j (sink_delta). At Commit the window is renumbered by the
// evictions of the chunk, keeping positions below size.
Status KvCache::PlanRing(int32_t n_tokens, KvPlan* plan) const {
  const int64_t size = config_.size, keep = config_.keep, window = size - keep;
  const TextIndex first = n_seen_, end = n_seen_ + n_tokens;
  plan->visibility = Visibility{keep, window};
  const bool compact = config_.positions == KvPositions::kCompact;
  const int64_t s0 = compact ? std::max<int64_t>(0, first - size) : 0;
  const int64_t s1 = compact ? std::max<int64_t>(0, end - size) : 0;
  for (int32_t i = 0; i < n_tokens; ++i) {
    const TextIndex t = first + i;
    const bool kept = t < keep || t >= end - window;
    plan->slot[i] = kept ? Slot{static_cast<int32_t>(t < keep ? t : keep + (t - keep) % window)}
                         : Slot{};
    plan->pos[i] = static_cast<int32_t>(t - s0);
    if (compact) plan->sink_delta[i] = static_cast<int32_t>(std::max<int64_t>(0, t - size + 1) - s0);
  }
  plan->pos_shift = static_cast<int32_t>(s1 - s0);
  return Status::Ok();
}

}  // namespace rotor
