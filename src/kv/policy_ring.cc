// sink and window: a ring of the most recent tokens, after `keep` sink tokens
// that are never evicted (window: keep = 0).
//
// Cells [0, keep) hold tokens 0..keep-1; the other W = size - keep cells are a
// ring: token t >= keep lives in cell keep + (t - keep) % W. Token t sees the
// sinks and the W most recent tokens up to itself, so when it is written it
// overwrites exactly the token it no longer sees (t - W). Of a chunk longer
// than W only the last W tokens are stored: the earlier ones are attended to
// from the chunk's own K/V and never written.
//
// Compact positions: window keys and queries use text index - s0, so their
// distances are the text distances; sinks keep their index j, and query t sees
// them at distance min(t, size - 1) - j (sink_delta). s0 = Shift(first): the
// tokens evicted before the chunk, max(0, first - size), rounded down to a
// multiple of the window W = size - keep. At Commit the window moves down by
// the chunk's change of s0: W positions once every W tokens, which keeps its
// positions below size + W (plus the chunk's length while it runs). Moving it
// by every eviction, one position per token, re-rotated every cached key of
// the window at every decode step (BENCHMARKS.md, sixty-second session).
#include <algorithm>

#include "kv/kv_policy.h"

namespace rotor {
namespace {

class RingPolicy final : public KvPolicy {
 public:
  explicit RingPolicy(const KvConfig& c)
      : size_(c.size), keep_(c.keep), compact_(c.positions == KvPositions::kCompact) {}
  std::unique_ptr<KvPolicy> Clone() const override { return std::make_unique<RingPolicy>(*this); }
  int32_t n_cells() const override { return size_; }
  int64_t Remaining(const KvCells&, TextIndex) const override { return -1; }

  Status Plan(const KvCells&, TextIndex n_seen, KvPlan* plan) const override {
    const int64_t size = size_, keep = keep_, window = size - keep;
    const int32_t n_tokens = plan->n_tokens;
    const TextIndex first = n_seen, end = n_seen + n_tokens;
    plan->visibility = Visibility{keep, window};
    const int64_t s0 = Shift(first), s1 = Shift(end);
    for (int32_t i = 0; i < n_tokens; ++i) {
      const TextIndex t = first + i;
      const bool kept = t < keep || t >= end - window;
      plan->slot[i] =
          kept ? Slot{static_cast<int32_t>(t < keep ? t : keep + (t - keep) % window)} : Slot{};
      plan->pos[i] = static_cast<int32_t>(t - s0 + offset_);
      if (compact_)
        plan->sink_delta[i] = static_cast<int32_t>(std::max<int64_t>(0, t - size + 1) - s0);
    }
    plan->pos_shift = static_cast<int32_t>(s1 - s0);
    return Status::Ok();
  }

  // Compact positions: every window cell moves pos_shift positions down.
  void Commit(KvCells& cells, KvPlan& plan) override {
    if (plan.pos_shift != 0) MoveWindow(cells, -plan.pos_shift);
  }
  void Clear() override { offset_ = 0; }
  // Tokens below size sit in their own cells at their own positions, having
  // seen every earlier token: the state of any cache that ran them.
  bool SharesPrefix() const override { return true; }
  void OnAdopt(KvCells&, TextIndex) override { offset_ = 0; }

  // The text may continue at `from` only if every token it would see there
  // is still held: the sinks and the W - 1 tokens before it.
  Status CanDrop(const KvCells& cells, TextIndex n_seen, TextIndex from,
                 TextIndex to) const override {
    if (to < n_seen) return Status::Ok();  // a range inside: those keys simply go
    const TextIndex window = size_ - keep_;
    const TextIndex lo = std::max<TextIndex>(keep_, from - window + 1);
    int64_t need = std::min<TextIndex>(keep_, from) + std::max<TextIndex>(0, from - lo), held = 0;
    for (int32_t c = 0; c < cells.hi(0); ++c) {
      const TextIndex idx = cells.index(0, c);
      if (idx >= 0 && idx < from && (idx < keep_ || idx >= lo)) ++held;
    }
    if (held < need)
      return Errorf(
          "kv: cannot continue the text at token {}: the {} cache of {} cells has "
          "already evicted tokens it would need (it holds {} of {})",
          from, keep_ > 0 ? "sink" : "window", size_, held, need);
    return Status::Ok();
  }
  void OnDrop(KvCells& cells, TextIndex n_seen, TextIndex from, TextIndex to) override {
    if (to < n_seen) return;
    if (!compact_) {
      // The text continues after the last kept token's position (CanDrop
      // made sure it is held): a shift of the dropped tail no longer applies.
      offset_ = 0;
      for (int32_t c = 0; c < cells.hi(0); ++c)
        if (cells.index(0, c) == from - 1) offset_ = cells.pos(0, c) + 1 - from;
      return;
    }
    const int64_t shift = Shift(n_seen) - Shift(from);
    if (shift != 0) MoveWindow(cells, static_cast<int32_t>(shift));
  }
  Status CanShift(TextIndex, TextIndex, TextIndex) const override {
    if (compact_)
      return Status::Error(
          "kv: positions cannot be shifted with compact positions (the policy "
          "renumbers them itself)");
    return Status::Ok();
  }
  void OnShift(TextIndex n_seen, TextIndex, TextIndex to, int32_t delta) override {
    if (to >= n_seen) offset_ += delta;
  }

 private:
  // Compact positions: how far the window's positions sit below the text
  // indices once n tokens are seen (the comment at the top of this file); 0
  // with original ones.
  int64_t Shift(TextIndex n) const {
    if (!compact_) return 0;
    const int64_t window = size_ - keep_, evicted = std::max<int64_t>(0, n - size_);
    return evicted / window * window;
  }
  void MoveWindow(KvCells& cells, int32_t delta) {
    for (int32_t c = 0; c < cells.hi(0); ++c)
      if (cells.index(0, c) >= keep_) cells.Move(0, c, cells.pos(0, c) + delta);
  }

  int32_t size_, keep_;
  bool compact_;
  int64_t offset_ = 0;  // positions moved by shifts of the tail (original positions)
};

std::unique_ptr<KvPolicy> CreateRing(const KvShape&, const KvConfig& c) {
  return std::make_unique<RingPolicy>(c);
}

// Compact positions by default: past the trained context, original positions
// put the sinks at distances the model never saw (docs/EVALUATION.md: a
// 20,000-token stream, perplexity 48 with original positions, 3.96 compact).
Status ResolveSink(KvConfig& c, const KvShape&, KvSpelling s) {
  if (!c.Given(KvOpt::kPositions)) c.positions = KvPositions::kCompact;
  const std::string_view keep = KvOption(KvOpt::kKeep).Name(s);
  if (c.keep >= c.size)
    return Errorf("kv: {} {}{} must be smaller than {} {}", keep, c.keep,
                  DefaultMark(c, KvOpt::kKeep), KvOption(KvOpt::kSize).Name(s), c.size);
  return Status::Ok();
}

Status ResolveWindow(KvConfig& c, const KvShape&, KvSpelling) {
  c.keep = 0;
  return Status::Ok();
}

}  // namespace

extern const KvPolicyInfo kSinkPolicy = {
    .name = "sink",
    .help = "the first tokens (--kv-keep) and a ring of the most recent ones",
    .options = KvOptBit(KvOpt::kSize) | KvOptBit(KvOpt::kKeep) | KvOptBit(KvOpt::kPositions),
    .resolve = ResolveSink,
    .create = CreateRing,
};

extern const KvPolicyInfo kWindowPolicy = {
    .name = "window",
    .help = "a ring of the most recent tokens",
    .options = KvOptBit(KvOpt::kSize) | KvOptBit(KvOpt::kPositions),
    .recent_only = true,
    .resolve = ResolveWindow,
    .create = CreateRing,
};

}  // namespace rotor
