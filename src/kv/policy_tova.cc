// tova (Oren et al. 2024, "Transformers are Multi-State RNNs"), per layer:
// token t attends to the layer's cached tokens and itself; then, when the
// layer holds more than `size` tokens, the one with the lowest attention
// weight of t's query, averaged over every head of the layer, is evicted
// (ties: the oldest; t itself may be the one). One spare cell holds t while
// it is weighed, so a layer never keeps more than `size` tokens between steps.
#include <algorithm>
#include <limits>

#include "kv/lane_policy.h"

namespace rotor {
namespace {

class TovaPolicy final : public LanePolicy {
 public:
  TovaPolicy(const KvShape& shape, const KvConfig& c)
      : LanePolicy(shape, c, KvLanes::kPerLayer, c.size + 1), evicted_(n_lanes_, 0) {}
  std::unique_ptr<KvPolicy> Clone() const override { return std::make_unique<TovaPolicy>(*this); }
  int64_t Remaining(const KvCells&, TextIndex) const override { return -1; }
  void Clear() override { std::fill(evicted_.begin(), evicted_.end(), 0); }

  Status Plan(const KvCells& cells, TextIndex n_seen, KvPlan* plan) const override {
    PlanPositions(cells, n_seen, plan);
    return Status::Ok();
  }

  void BeforeToken(KvCells& cells, int lane, int i, KvPlan& plan) override {
    Admit(cells, lane, i, plan);
  }

  // AfterToken evicts once the lane holds more than size tokens.
  int32_t AdmitsWithoutEviction(const KvCells& cells, int lane, int, const KvPlan&) const override {
    return std::max(0, size_ - cells.used(lane));
  }

  bool WantsWeights(const KvCells& cells, int lane, int, const KvPlan&) const override {
    return cells.used(lane) > size_;  // AfterToken evicts
  }

  void AfterToken(KvCells& cells, int lane, int, std::span<const int32_t> keys,
                  std::span<const float> weights, KvPlan& plan) override {
    if (!WantsWeights(cells, lane, 0, plan)) return;
    int32_t victim = -1;
    float best = std::numeric_limits<float>::infinity();
    TextIndex best_index = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      const TextIndex idx = cells.index(lane, keys[k]);
      if (weights[k] < best || (weights[k] == best && idx < best_index))
        victim = keys[k], best = weights[k], best_index = idx;
    }
    CHECK(victim >= 0);
    Evict(cells, lane, victim, plan);
    evicted_[lane] = 1;
  }

  // Before the first eviction the cache is the full one: a prefix can be kept.
  Status CanDrop(const KvCells& cells, TextIndex n_seen, TextIndex from,
                 TextIndex to) const override {
    const bool evicted = std::find(evicted_.begin(), evicted_.end(), 1) != evicted_.end();
    if (!evicted && to >= n_seen) return Status::Ok();
    return LanePolicy::CanDrop(cells, n_seen, from, to);
  }

 private:
  std::vector<uint8_t> evicted_;  // [n_lanes] the lane has evicted a token
};

}  // namespace

namespace {
// Compact positions by default: with original ones tokens kept for long end
// up past the trained range (docs/EVALUATION.md: 31 vs 4.01 at 256 cells);
// with them, keys before RoPE (DeferKeysWhenCompact).
Status ResolveTova(KvConfig& c, const KvShape&, KvSpelling) {
  if (!c.Given(KvOpt::kPositions)) c.positions = KvPositions::kCompact;
  DeferKeysWhenCompact(c, /*all_types=*/true);
  return Status::Ok();
}
}  // namespace

extern const KvPolicyInfo kTovaPolicy = {
    .name = "tova",
    .help = "per layer, drops the token the current query attends to least (averaged over heads)",
    .options = KvOptBit(KvOpt::kSize) | KvOptBit(KvOpt::kPositions),
    .resolve = ResolveTova,
    .create = [](const KvShape& shape, const KvConfig& c) -> std::unique_ptr<KvPolicy> {
      return std::make_unique<TovaPolicy>(shape, c);
    },
};

}  // namespace rotor
