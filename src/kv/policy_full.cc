// full: every token of the context is kept; fails when the context is full.
// Token t normally sits in cell t. After a sequence operation has dropped
// tokens, new tokens take the lowest free cells; positions continue from the
// last token's (moved by a shift of the tail).
#include <algorithm>

#include "kv/kv_policy.h"

namespace rotor {
namespace {

class FullPolicy final : public KvPolicy {
 public:
  explicit FullPolicy(int32_t size) : size_(size) {}
  std::unique_ptr<KvPolicy> Clone() const override { return std::make_unique<FullPolicy>(*this); }
  int32_t n_cells() const override { return size_; }

  int64_t Remaining(const KvCells& cells, TextIndex) const override {
    return size_ - cells.used(0);
  }

  Status Plan(const KvCells& cells, TextIndex, KvPlan* plan) const override {
    const int32_t n = plan->n_tokens;
    if (cells.used(0) + n > size_)
      return Errorf("kv: context full: {} tokens in the cache + {} new > context size {}",
                    cells.used(0), n, size_);
    // Without holes the free cells are hi, hi + 1, ...; else the lowest free
    // ones (there are at least n: used + n <= size).
    const bool dense = cells.used(0) == cells.hi(0);
    int32_t c = -1;
    for (int32_t i = 0; i < n; ++i) {
      c = dense ? cells.hi(0) + i : cells.FirstFree(0, c + 1);
      plan->slot[i] = Slot{c};
      plan->pos[i] = static_cast<int32_t>(next_pos_ + i);
    }
    return Status::Ok();
  }

  void Commit(KvCells&, KvPlan& plan) override { next_pos_ += plan.n_tokens; }
  void Clear() override { next_pos_ = 0; }
  bool SharesPrefix() const override { return true; }
  void OnAdopt(KvCells&, TextIndex n) override { next_pos_ = n; }

  void OnDrop(KvCells& cells, TextIndex n_seen, TextIndex from, TextIndex to) override {
    if (to < n_seen) return;
    // The text continues after the prefix: its last kept token's position + 1.
    int64_t last = -1;
    for (int32_t c = 0; c < cells.hi(0); ++c)
      if (cells.index(0, c) >= 0 && cells.index(0, c) < from)
        last = std::max<int64_t>(last, cells.pos(0, c));
    next_pos_ = last + 1;
  }
  void OnShift(TextIndex n_seen, TextIndex, TextIndex to, int32_t delta) override {
    if (to >= n_seen) next_pos_ += delta;
  }

 private:
  int32_t size_;
  int64_t next_pos_ = 0;
};

Status ResolveFull(KvConfig& c, const KvShape& shape, KvSpelling) {
  c.size = shape.n_ctx;
  return Status::Ok();
}

}  // namespace

extern const KvPolicyInfo kFullPolicy = {
    .name = "full",
    .help = "every token of the context",
    .options = 0,
    .evicts = false,
    .resolve = ResolveFull,
    .create = [](const KvShape&, const KvConfig& c) -> std::unique_ptr<KvPolicy> {
      return std::make_unique<FullPolicy>(c.size);
    },
    .max_prompt = [](const KvConfig& c, const KvShape&) -> int64_t { return c.size; },
};

}  // namespace rotor
