// The KV policy interface: a policy decides where each new token goes, what is
// evicted and which positions tokens get; the cache (kv_cache.h) owns the K/V
// storage and the cell table, and attention reads both.
//
// A policy keeps one cell map per *lane*:
//   kShared    one map for every layer and kv head (full, sink, window): a
//              ubatch is planned ahead (a cell and a position per token and a
//              visibility rule) and attention runs its fast batched path.
//   kPerLayer  one map per layer (tova), or
//   kPerHead   one per (layer, kv head) (h2o, snapkv): the policy needs the
//              attention weights to decide. Attention then runs each lane of a
//              layer token by token and calls the policy's two hooks around
//              each token: BeforeToken (evict, admit the token to a cell) and
//              AfterToken (the token's attention weights over the lane's
//              cells). Attention never chooses a victim or writes cell state.
//              Tokens the policy admits without evicting
//              (AdmitsWithoutEviction: a prompt while there is room) run as
//              prefill tiles, their BeforeToken calls first.
//
// Writing a policy: docs/WRITING_A_KV_POLICY.md. Registering one is one line
// in kv_registry.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"

namespace rotor {

// Index of a token in its sequence's text (0 = first token, BOS). Grows forever.
using TextIndex = int64_t;

// Physical cell of the cache, in [0, n_cells).
struct Slot {
  int32_t v = -1;
  bool valid() const { return v >= 0; }
  friend bool operator==(Slot a, Slot b) = default;
};

enum class KvLanes { kShared, kPerLayer, kPerHead };

// The cell table: per lane, which token of the text each cell holds (-1 =
// empty) and at which RoPE position. Owned by the cache; policies edit it.
class KvCells {
 public:
  // rotate(lane, cell, delta): re-rotates the keys the lane stores in `cell`
  // by delta positions (set by the cache when keys are stored after RoPE).
  using Rotate = std::function<void(int lane, int32_t cell, int32_t delta)>;
  KvCells(int n_lanes, int32_t n_cells, Rotate rotate);

  int n_lanes() const { return n_lanes_; }
  int32_t n_cells() const { return n_cells_; }
  TextIndex index(int lane, int32_t c) const { return index_[At(lane, c)]; }
  int32_t pos(int lane, int32_t c) const { return pos_[At(lane, c)]; }
  const TextIndex* lane_index(int lane) const { return index_.data() + At(lane, 0); }
  const int32_t* lane_pos(int lane) const { return pos_.data() + At(lane, 0); }
  int32_t used(int lane) const { return used_[lane]; }
  // One past the highest occupied cell of the lane (0 when empty).
  int32_t hi(int lane) const { return hi_[lane]; }
  int32_t max_used() const;
  int32_t max_hi() const;

  void Set(int lane, int32_t c, TextIndex index, int32_t pos);  // the cell must be empty
  void Free(int lane, int32_t c);
  // Gives a cell a new position, re-rotating stored keys when they are rotated.
  void Move(int lane, int32_t c, int32_t pos);
  // The lowest empty cell of a lane at or after `from`, or -1.
  int32_t FirstFree(int lane, int32_t from = 0) const;
  // Compact positions: the lane's tokens renumbered 0..n-1 in text order.
  // While the lane's positions rise with text index (tokens appended in
  // order, some freed, none moved from outside) that is one pass: each
  // token's new position is the count of positions below its own, and
  // nothing when they are already 0..n-1. Else a sort by text index.
  void RenumberByRank(int lane);
  // While on, position changes that re-rotate keys are recorded (in order)
  // instead of calling the hook; TakeRotations hands them over (the cache
  // applies them, each lane's in order, lanes on several threads).
  struct Rotation {
    int lane;
    int32_t cell, delta;
  };
  void DeferRotations(bool on) { defer_rotations_ = on; }
  std::vector<Rotation> TakeRotations() { return std::move(rotations_); }
  // move(lane, from, to): copies the K/V the lane stores in cell `from` to
  // the empty cell `to` (set by the cache).
  using MoveData = std::function<void(int lane, int32_t from, int32_t to)>;
  void set_move_data(MoveData move) { move_data_ = std::move(move); }
  // The lane's tokens into cells 0..used-1, in their order: each occupied
  // cell above a hole moves down, with its K/V, index and position, to the
  // lowest empty cell; moved(from, to) is called after each move. The order
  // is kept because deferred keys read faster in it (BENCHMARKS.md,
  // sixty-second session: moving the highest cells into the lowest holes
  // slowed snapkv's prefill with deferred q8_0 keys by 10%). Not while
  // rotations are deferred (they name cells).
  void CompactLane(int lane, const std::function<void(int32_t from, int32_t to)>& moved);
  void Clear();
  size_t bytes() const { return index_.size() * (sizeof(TextIndex) + sizeof(int32_t)); }

 private:
  size_t At(int lane, int32_t c) const { return static_cast<size_t>(lane) * n_cells_ + c; }
  int n_lanes_;
  int32_t n_cells_;
  Rotate rotate_;
  std::vector<TextIndex> index_;  // [n_lanes, n_cells]
  std::vector<int32_t> pos_;      // [n_lanes, n_cells]
  std::vector<int32_t> used_;     // [n_lanes]
  std::vector<int32_t> hi_;       // [n_lanes]
  // [n_lanes] whether the lane's positions rise with text index, and the
  // largest index and position set since (RenumberByRank).
  std::vector<uint8_t> ordered_;
  std::vector<TextIndex> max_index_;
  std::vector<int32_t> max_pos_;
  std::vector<int32_t> below_;      // RenumberByRank's count of positions below each
  std::vector<int32_t> free_from_;  // [n_lanes] no empty cell of the lane lies below it
  bool defer_rotations_ = false;
  std::vector<Rotation> rotations_;  // recorded while defer_rotations_
  MoveData move_data_;
  void MoveTo(int lane, int32_t c, int32_t pos);
};

// Which keys a query may attend to, by text index (shared lanes): key j is
// visible to query t iff j <= t and (j < keep or t - j < window).
struct Visibility {
  TextIndex keep = 0;
  TextIndex window = std::numeric_limits<TextIndex>::max();
  bool Visible(TextIndex query, TextIndex key) const {
    return key <= query && (key < keep || query - key < window);
  }
};

class KvLaneHooks;

// The plan for appending n_tokens to the sequence. Reused across ubatches.
struct KvPlan {
  TextIndex first = 0;  // text index of the ubatch's first token
  int32_t n_tokens = 0;
  std::vector<int32_t> pos;  // [n_tokens] RoPE position of each new token (q and k)
  // [n_tokens] extra position of sink keys as seen by each query: compact
  // positions renumber the window after evictions while sinks keep theirs, so
  // a query t sees sink j at distance min(t, size - 1) - j. 0 otherwise.
  std::vector<int32_t> sink_delta;
  std::vector<Slot> slot;  // [n_tokens] shared lanes: destination cell; invalid = not kept
  Visibility visibility;   // shared lanes
  int32_t pos_shift = 0;   // shared lanes: at Commit, window positions decrease by this
  // Per-lane policies: attention calls these hooks, which fill lane_slot.
  KvLaneHooks* hooks = nullptr;
  std::vector<int32_t> lane_slot;  // [n_lanes, n_tokens] cell of each new token, -1 = not kept
  // Blocks (filled by the cache): the block-table entries the ubatch writes,
  // and how many of them need a new block from the pool.
  std::vector<int32_t> writes;
  int32_t n_new_blocks = 0;
  std::span<const int32_t> tokens;  // [n_tokens] token ids, set by the caller before Commit
  int32_t* LaneSlots(int lane) { return lane_slot.data() + static_cast<size_t>(lane) * n_tokens; }
};

// What attention calls for a per-lane policy, for token i of the ubatch in a
// lane. A lane's calls come in token order from one thread; different lanes
// run in parallel and must touch only their own state. The hooks may free
// cells and admit token i (BeforeToken), nothing else: attention folds a
// tile of tokens over the lane's cells before their hooks run and corrects
// each token for the cells freed since (attention_lane_replay.cc relies on
// it).
class KvLaneHooks {
 public:
  virtual ~KvLaneHooks() = default;
  // Before token i attends: evict if the policy must, and admit token i to a
  // cell (KvCells::Set with its index and plan.pos[i]) if it will be seen.
  // Afterwards the lane's occupied cells are exactly the keys token i sees;
  // cells holding tokens of this ubatch (index >= plan.first) are read from
  // the ubatch's own K/V. Records admissions and evictions in plan.LaneSlots.
  virtual void BeforeToken(KvCells& cells, int lane, int i, KvPlan& plan) = 0;
  // weights[k]: token i's attention probability on the key in cells[k],
  // summed over the query heads of the lane.
  virtual void AfterToken(KvCells& cells, int lane, int i, std::span<const int32_t> keys,
                          std::span<const float> weights, KvPlan& plan) = 0;
  // How many tokens from token i on (i, i + 1, ...) the lane takes without
  // evicting anything, whatever their weights: attention may then call
  // BeforeToken for all of them before their AfterToken calls (each in token
  // order) and fold those tokens together, as prefill tiles. The run ends
  // where an AfterToken must come before the next BeforeToken (an eviction
  // or selection that a later token's admission would see). 0: token by
  // token (the default, always correct).
  virtual int32_t AdmitsWithoutEviction(const KvCells& cells, int lane, int i,
                                        const KvPlan& plan) const {
    (void)cells, (void)lane, (void)i, (void)plan;
    return 0;
  }
  // Whether AfterToken of token i reads its weights; asked after token i's
  // BeforeToken (in a run, after every BeforeToken of the run). False:
  // attention does not compute them, and AfterToken gets empty weights.
  virtual bool WantsWeights(const KvCells& cells, int lane, int i, const KvPlan& plan) const {
    (void)cells, (void)lane, (void)i, (void)plan;
    return true;
  }
};

class KvPolicy : public KvLaneHooks {
 public:
  ~KvPolicy() override = default;
  virtual std::unique_ptr<KvPolicy> Clone() const = 0;
  virtual KvLanes lanes() const { return KvLanes::kShared; }
  // Cells each lane needs (storage rows per layer).
  virtual int32_t n_cells() const = 0;

  // Fills plan->pos, and for shared lanes slot, visibility, sink_delta and
  // pos_shift. Mutates nothing; errors when the tokens cannot fit.
  virtual Status Plan(const KvCells& cells, TextIndex n_seen, KvPlan* plan) const = 0;
  // After the ubatch ran (shared lanes: after the cache stored the new cells).
  virtual void Commit(KvCells& cells, KvPlan& plan) { (void)cells, (void)plan; }
  // Tokens that can still be appended; -1 = unbounded.
  virtual int64_t Remaining(const KvCells& cells, TextIndex n_seen) const = 0;
  // The next n tokens are a prompt (snapkv compresses at its end); an error
  // when the policy cannot take a prompt that long.
  virtual Status ExpectPrompt(const KvCells& cells, TextIndex n_seen, int64_t n) {
    (void)cells, (void)n_seen, (void)n;
    return Status::Ok();
  }
  virtual void Clear() {}
  virtual size_t state_bytes() const { return 0; }

  // Prefix sharing. True when the state after tokens 0..n-1 were appended in
  // order to cells 0..n-1 at positions 0..n-1, with nothing evicted, depends
  // on n alone (not on attention weights): such a cache publishes its full
  // blocks and may start from published ones (kv_pool.h).
  virtual bool SharesPrefix() const { return false; }
  // An empty cache now holds tokens [0, n) so (n <= n_cells(), set by the
  // cache): take the state running them would have left.
  virtual void OnAdopt(KvCells& cells, TextIndex n) { (void)cells, (void)n; }

  // Sequence operations. Drop: tokens [from, to) leave the cache (to == n_seen
  // keeps the prefix [0, from) and the text continues at `from`). Shift: the
  // positions of tokens [from, to) move by delta. The cache checks the range
  // and edits the cells; the policy says whether it can honour the operation
  // (an error names why: a token already evicted, scores that include the
  // dropped tokens) and updates its own state.
  virtual Status CanDrop(const KvCells& cells, TextIndex n_seen, TextIndex from,
                         TextIndex to) const;
  virtual void OnDrop(KvCells& cells, TextIndex n_seen, TextIndex from, TextIndex to) {
    (void)cells, (void)n_seen, (void)from, (void)to;
  }
  virtual Status CanShift(TextIndex n_seen, TextIndex from, TextIndex to) const;
  virtual void OnShift(TextIndex n_seen, TextIndex from, TextIndex to, int32_t delta) {
    (void)n_seen, (void)from, (void)to, (void)delta;
  }

  void BeforeToken(KvCells&, int, int, KvPlan&) override {}
  void AfterToken(KvCells&, int, int, std::span<const int32_t>, std::span<const float>,
                  KvPlan&) override {}
};

// A registered policy: its name, the options it uses, and its factory.
struct KvPolicyInfo {
  std::string_view name;
  std::string_view help;
  uint32_t options = 0;  // KvOptBit of each option it uses besides rope_k and type
  bool evicts = true;    // memory bounded by its size, any text length
  // Keeps only the most recent tokens, so no kept token is farther than its
  // size from the newest, whatever the positions mode (window).
  bool recent_only = false;
  // Fills the policy's defaults in a config whose policy is this one and
  // checks its values; errors name options in `spelling`.
  Status (*resolve)(KvConfig& c, const KvShape& shape, KvSpelling spelling) = nullptr;
  std::unique_ptr<KvPolicy> (*create)(const KvShape& shape, const KvConfig& resolved) = nullptr;
  // The longest prompt it takes from empty; null = any length.
  int64_t (*max_prompt)(const KvConfig& resolved, const KvShape& shape) = nullptr;
};

// Every registered policy, in display order (kv_registry.cc).
std::span<const KvPolicyInfo* const> KvPolicyRegistry();
const KvPolicyInfo* FindKvPolicy(std::string_view name);

}  // namespace rotor
