// snapkv (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before
// Generation"), per lane = (layer, kv head). A prompt is held whole while it is
// prefilled (the cache has the context's cells). At its end, the attention
// weights of its last `window` queries (summed over those queries and the
// query heads sharing the kv head) are pooled over text neighbours (a sum over
// 7 tokens, SnapKV's kernel size; the same order as its average pooling), and
// each lane keeps the size - window prompt tokens with the largest pooled
// score (ties: the older) plus the window's own tokens: exactly `size` tokens.
// Generation then appends, and once a lane holds `size` tokens each new token
// evicts the oldest token that was not selected, as the sink ring evicts its
// oldest non-sink. Without a prompt announced (KvCache::ExpectPrompt), tokens
// are appended the same way as after one.
#include <algorithm>
#include <numeric>

#include "kv/lane_policy.h"

namespace rotor {
namespace {

constexpr int kPoolRadius = 3;  // kernel 7

class SnapKvPolicy final : public LanePolicy {
 public:
  SnapKvPolicy(const KvShape& shape, const KvConfig& c)
      : LanePolicy(shape, c, KvLanes::kPerHead, shape.n_ctx),
        window_(c.window),
        score_(static_cast<size_t>(n_lanes_) * n_cells_, 0.f),
        selected_(static_cast<size_t>(n_lanes_) * n_cells_, 0),
        lane_changed_(n_lanes_, 0) {}
  std::unique_ptr<KvPolicy> Clone() const override { return std::make_unique<SnapKvPolicy>(*this); }
  size_t state_bytes() const override { return score_.size() * (sizeof(float) + 1); }

  void Clear() override {
    std::fill(score_.begin(), score_.end(), 0.f);
    std::fill(selected_.begin(), selected_.end(), 0);
    prompt_end_ = -1;
    selected_end_ = -1;
    changed_ = false;
    std::fill(lane_changed_.begin(), lane_changed_.end(), 0);
  }

  int64_t Remaining(const KvCells& cells, TextIndex) const override {
    return prompt_end_ >= 0 ? n_cells_ - cells.max_used() : -1;
  }

  Status ExpectPrompt(const KvCells& cells, TextIndex n_seen, int64_t n) override {
    if (n <= 0) return Status::Ok();
    if (cells.max_used() + n > n_cells_)
      return Errorf(
          "kv: snapkv holds a whole prompt before compressing it: {} prompt tokens + {} "
          "held > context size {}",
          n, cells.max_used(), n_cells_);
    prompt_end_ = n_seen + n;
    return Status::Ok();
  }

  Status Plan(const KvCells& cells, TextIndex n_seen, KvPlan* plan) const override {
    PlanPositions(cells, n_seen, plan);
    if (prompt_end_ < 0) return Status::Ok();
    const int64_t held = std::clamp<int64_t>(prompt_end_ - n_seen, 0, plan->n_tokens);
    if (cells.max_used() + held > n_cells_)
      return Errorf("kv: context full: snapkv holds {} tokens + {} of the prompt > context size {}",
                    cells.max_used(), held, n_cells_);
    return Status::Ok();
  }

  void BeforeToken(KvCells& cells, int lane, int i, KvPlan& plan) override {
    const TextIndex t = plan.first + i;
    const bool in_prompt = prompt_end_ >= 0 && t < prompt_end_;
    if (!in_prompt && cells.used(lane) >= size_) {
      // The oldest token that was not selected at the last prompt's end.
      const TextIndex* index = cells.lane_index(lane);
      const uint8_t* selected = Selected(lane);
      int32_t victim = -1;
      for (int32_t c = 0; c < cells.hi(lane); ++c)
        if (index[c] >= 0 && !selected[c] && (victim < 0 || index[c] < index[victim])) victim = c;
      CHECK(victim >= 0);
      Evict(cells, lane, victim, plan);
      lane_changed_[lane] = 1;
    }
    const int32_t c = Admit(cells, lane, i, plan);
    Selected(lane)[c] = 0;
    Score(lane)[c] = 0.f;
  }

  // A prompt's tokens are all admitted, up to its last, whose AfterToken
  // selects; after it, a lane below its size admits without evicting.
  int32_t AdmitsWithoutEviction(const KvCells& cells, int lane, int i,
                                const KvPlan& plan) const override {
    const TextIndex t = plan.first + i;
    if (prompt_end_ >= 0 && t < prompt_end_)
      return static_cast<int32_t>(std::min<TextIndex>(prompt_end_ - t, plan.n_tokens - i));
    return std::max(0, size_ - cells.used(lane));
  }

  // Only the prompt's last `window` queries are scored.
  bool WantsWeights(const KvCells&, int, int i, const KvPlan& plan) const override {
    const TextIndex t = plan.first + i;
    return prompt_end_ >= 0 && t >= prompt_end_ - window_ && t < prompt_end_;
  }

  void AfterToken(KvCells& cells, int lane, int i, std::span<const int32_t> keys,
                  std::span<const float> weights, KvPlan& plan) override {
    const TextIndex t = plan.first + i;
    if (!WantsWeights(cells, lane, i, plan)) return;
    float* score = Score(lane);
    for (size_t k = 0; k < keys.size(); ++k) score[keys[k]] += weights[k];
    if (t == prompt_end_ - 1) Compress(cells, lane, plan);
  }

  void Commit(KvCells& cells, KvPlan& plan) override {
    if (prompt_end_ >= 0 && plan.first + plan.n_tokens >= prompt_end_) {
      selected_end_ = prompt_end_;
      prompt_end_ = -1;
      // The compression left holes up to the prompt's end: the kept tokens
      // move down into cells 0..size-1, so attention walks size cells, not
      // the prompt's, and the cache gives the blocks above back. Their
      // selection moves with them (the scores are all 0 since Compress).
      for (int lane = 0; lane < n_lanes_; ++lane) {
        uint8_t* selected = Selected(lane);
        cells.CompactLane(lane, [&](int32_t from, int32_t to) {
          selected[to] = selected[from], selected[from] = 0;
        });
      }
    }
    for (uint8_t& l : lane_changed_) changed_ = changed_ || l, l = 0;
    LanePolicy::Commit(cells, plan);
  }

  // Before anything was evicted or scored, the cache is the full one. A
  // selection made at a prompt's end (even one that evicted nothing) was made
  // by that prompt's last queries: a prefix without them cannot keep it.
  Status CanDrop(const KvCells& cells, TextIndex n_seen, TextIndex from,
                 TextIndex to) const override {
    const bool scored = prompt_end_ >= 0 && n_seen > prompt_end_ - window_;
    if (!changed_ && !scored && from >= selected_end_ && to >= n_seen) return Status::Ok();
    return LanePolicy::CanDrop(cells, n_seen, from, to);
  }
  void OnDrop(KvCells&, TextIndex, TextIndex from, TextIndex) override {
    if (prompt_end_ > from) prompt_end_ = -1;  // that prompt is no longer the text
  }

 private:
  float* Score(int lane) { return score_.data() + static_cast<size_t>(lane) * n_cells_; }
  uint8_t* Selected(int lane) { return selected_.data() + static_cast<size_t>(lane) * n_cells_; }

  // Keeps the size - window prompt tokens before the window with the largest
  // pooled score, and the window.
  void Compress(KvCells& cells, int lane, KvPlan& plan) {
    const TextIndex window_start = prompt_end_ - window_;
    const TextIndex* index = cells.lane_index(lane);
    float* score = Score(lane);
    uint8_t* selected = Selected(lane);
    std::vector<int32_t> cand;  // cells of the tokens before the window, in text order
    for (int32_t c = 0; c < cells.hi(lane); ++c)
      if (index[c] >= 0 && index[c] < window_start) cand.push_back(c);
    std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return index[a] < index[b]; });
    const int n = static_cast<int>(cand.size());
    std::vector<float> pooled(n, 0.f);
    for (int j = 0; j < n; ++j)
      for (int d = std::max(0, j - kPoolRadius); d <= std::min(n - 1, j + kPoolRadius); ++d)
        pooled[j] += score[cand[d]];
    const int keep = std::min(n, size_ - window_);
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return pooled[a] > pooled[b]; });
    for (int r = 0; r < n; ++r) {
      const int32_t c = cand[order[r]];
      if (r < keep) {
        selected[c] = 1;
      } else {
        selected[c] = 0;
        Evict(cells, lane, c, plan);
        lane_changed_[lane] = 1;
      }
    }
    // The window's tokens are the ring's, whatever an earlier prompt chose.
    for (int32_t c = 0; c < cells.hi(lane); ++c) {
      if (index[c] >= window_start) selected[c] = 0;
      score[c] = 0.f;
    }
  }

  int32_t window_;
  std::vector<float> score_;           // [n_lanes, n_cells] window queries' summed weights
  std::vector<uint8_t> selected_;      // [n_lanes, n_cells] chosen at the last prompt's end
  TextIndex prompt_end_ = -1;          // end of the announced prompt, -1 = none pending
  TextIndex selected_end_ = -1;        // end of the prompt the selection was made at, -1 = none
  bool changed_ = false;               // something was evicted (a prefix can no longer be kept)
  std::vector<uint8_t> lane_changed_;  // [n_lanes] a lane evicted during this ubatch
};

// Compact positions by default: the kept selection drifts out of the trained
// range with original ones (docs/EVALUATION.md: 74 vs 4.5 in the stream);
// with them, block-type keys before RoPE (DeferKeysWhenCompact).
Status ResolveSnapKv(KvConfig& c, const KvShape&, KvSpelling s) {
  if (!c.Given(KvOpt::kPositions)) c.positions = KvPositions::kCompact;
  DeferKeysWhenCompact(c, /*all_types=*/false);
  if (c.window >= c.size)
    return Errorf("kv: {} {}{} must be smaller than {} {}", KvOption(KvOpt::kWindow).Name(s),
                  c.window, DefaultMark(c, KvOpt::kWindow), KvOption(KvOpt::kSize).Name(s),
                  c.size);
  return Status::Ok();
}

}  // namespace

extern const KvPolicyInfo kSnapKvPolicy = {
    .name = "snapkv",
    .help = "at a prompt's end, the tokens its last queries attend to most; then a ring",
    .options = KvOptBit(KvOpt::kSize) | KvOptBit(KvOpt::kWindow) | KvOptBit(KvOpt::kPositions),
    .resolve = ResolveSnapKv,
    .create = [](const KvShape& shape, const KvConfig& c) -> std::unique_ptr<KvPolicy> {
      return std::make_unique<SnapKvPolicy>(shape, c);
    },
    .max_prompt = [](const KvConfig&, const KvShape& shape) -> int64_t { return shape.n_ctx; },
};

}  // namespace rotor
