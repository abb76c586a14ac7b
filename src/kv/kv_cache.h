// One sequence's KV cache: cell metadata (which token of the text each
// physical cell holds, and at which RoPE position) kept apart from K/V storage.
//
// A ubatch goes through the cache in three steps, as in llama.cpp's memory
// module: Plan (find a cell for every new token, decide evictions and
// positions; mutates nothing and fails cleanly), Write (per layer, after
// attention has read the cache: store the ubatch's K/V in the planned cells)
// and Commit (the only change of cell metadata; renumbers positions in compact
// mode, re-rotating cached keys). Text indices grow forever; cells are bounded
// by the cache size: they are different types.
//
// Policies (kv_plan.cc):
//   full   cell = text index; fails when the context is full.
//   sink   cells [0, keep) hold the first `keep` tokens forever; the other
//          size - keep cells are a ring of the most recent tokens. Token t sees
//          the sinks and the tokens t - (size - keep) + 1 .. t: itself and at
//          least size - 1 predecessors once that many exist.
//   window sink with keep = 0.
//   h2o    heavy hitters + a recent window (kv_h2o.cc).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "base/memory.h"
#include "base/status.h"
#include "kv/kv_config.h"

namespace rotor {

// Index of a token in its sequence's text (0 = first token, BOS). Grows forever.
using TextIndex = int64_t;

// Physical cell of the cache, in [0, size).
struct Slot {
  int32_t v = -1;
  bool valid() const { return v >= 0; }
  friend bool operator==(Slot a, Slot b) = default;
};

// Which keys a query may attend to, by text index: key j is visible to query t
// iff j <= t and (j < keep or t - j < window). Full cache: keep 0, window inf.
struct Visibility {
  TextIndex keep = 0;
  TextIndex window = std::numeric_limits<TextIndex>::max();
  bool Visible(TextIndex query, TextIndex key) const {
    return key <= query && (key < keep || query - key < window);
  }
};

// The plan for appending n_tokens to the sequence. Reused across ubatches.
struct KvPlan {
  TextIndex first = 0;             // text index of the ubatch's first token
  int32_t n_tokens = 0;
  std::vector<int32_t> pos;        // [n_tokens] RoPE position of each new token (q and k)
  // [n_tokens] extra position of sink keys as seen by each query: compact
  // positions renumber the window after evictions while sinks keep theirs, so
  // a query t sees sink j at distance min(t, size - 1) - j. 0 otherwise.
  std::vector<int32_t> sink_delta;
  std::vector<Slot> slot;          // [n_tokens] destination cell; invalid = not kept
  Visibility visibility;
  int32_t pos_shift = 0;           // at Commit, window positions decrease by this (compact)

  // h2o: cells are chosen per lane (layer, kv head) by attention mass during
  // attention itself. The plan starts from copies of the cache's lane state,
  // attention evicts and admits tokens in them, and Commit swaps them in.
  bool per_lane = false;
  int32_t n_lanes = 0;
  int32_t lane_cells = 0;             // cells per lane (the cache size)
  std::vector<int32_t> lane_slot;     // [n_lanes, n_tokens] cell of each new token, -1 = not kept
  std::vector<TextIndex> lane_index;  // [n_lanes, lane_cells] text index per cell after the ubatch
  std::vector<int32_t> lane_pos;      // [n_lanes, lane_cells]
  std::vector<float> lane_mass;       // [n_lanes, lane_cells] accumulated attention mass
  int32_t recent = 0;                 // h2o: the most recent tokens are never evicted
};

// What attention reads for one layer. Cells whose index is -1 are empty.
struct KvLayerView {
  const void* k = nullptr;            // [n_cells, n_head_kv, head_dim] of `type`
  const void* v = nullptr;            // [n_cells, n_head_kv, head_dim] of `type`
  KvType type = KvType::kF32;
  size_t row_bytes = 0;               // bytes of one cell's K (or V) row
  const TextIndex* index = nullptr;   // [n_cells] text index held by each cell, -1 = empty
  const int32_t* pos = nullptr;       // [n_cells] RoPE position of each cell
  int32_t n_cells = 0;                // cells to scan: every occupied cell is below this
  int layer = 0;
  TextIndex keep = 0;                 // text indices below this are sinks
  RopeK rope_k = RopeK::kCached;      // keys stored rotated (cached) or not (deferred)
  const void* KRow(int32_t cell) const { return static_cast<const uint8_t*>(k) + cell * row_bytes; }
  const void* VRow(int32_t cell) const { return static_cast<const uint8_t*>(v) + cell * row_bytes; }
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> Create(const KvShape& shape, const KvConfig& config);

  const KvShape& shape() const { return shape_; }
  const KvConfig& config() const { return config_; }  // resolved: size, keep, recent set
  int32_t n_cells() const { return config_.size; }    // capacity
  int32_t n_used() const { return n_used_; }          // occupied cells
  TextIndex n_seen() const { return n_seen_; }        // tokens committed: the next token's index
  // Bytes of K/V storage and cell metadata: allocated once, never grows.
  size_t memory_bytes() const;

  // Tokens that can still be appended; -1 = unbounded (evicting policies).
  int64_t Remaining() const;

  // Plans n_tokens new tokens. Mutates nothing. Errors if they cannot fit.
  Status Plan(int32_t n_tokens, KvPlan* plan) const;
  KvLayerView View(int layer) const;
  // Stores the planned tokens' K and V for one layer.
  // k, v: [plan.n_tokens, n_head_kv * head_dim], rows `row_stride` floats apart.
  void Write(int layer, const KvPlan& plan, const float* k, const float* v, int64_t row_stride);
  void Commit(KvPlan& plan);  // under h2o, takes the plan's lane state
  // Forgets every token (storage stays allocated).
  void Clear();

  // Inspection (tests, metrics): the text index / position held by a cell
  // (of lane 0, or of a lane = layer * n_head_kv + kv head under h2o).
  TextIndex CellIndex(int32_t cell, int lane = 0) const { return index_[Lane(lane) + cell]; }
  int32_t CellPos(int32_t cell, int lane = 0) const { return pos_[Lane(lane) + cell]; }
  float CellMass(int32_t cell, int lane) const { return mass_.empty() ? 0.f : mass_[Lane(lane) + cell]; }
  int n_lanes() const { return n_lanes_; }
  // A cell's K (V) row of one layer in f32: [n_head_kv * head_dim].
  std::vector<float> CellK(int layer, int32_t cell) const;
  std::vector<float> CellV(int layer, int32_t cell) const;

 private:
  KvCache(const KvShape& shape, const KvConfig& config);
  size_t RowFloats() const { return static_cast<size_t>(shape_.n_head_kv) * shape_.head_dim; }
  // Byte offset of a cell's row in k_ / v_.
  size_t Offset(int layer, int32_t cell) const {
    return (static_cast<size_t>(layer) * config_.size + cell) * RowFloats() * elem_bytes_;
  }
  // Stores n f32 values at byte offset `at` of k_ or v_, in the cache's type.
  void Store(AlignedBuffer<uint8_t>& dst, size_t at, const float* src, size_t n);
  // Re-rotates the stored key at byte offset `at` (n_heads heads) by delta positions.
  void ShiftKey(size_t at, int n_heads, int32_t delta);
  size_t Lane(int lane) const { return static_cast<size_t>(lane) * config_.size; }
  Status PlanFull(int32_t n_tokens, KvPlan* plan) const;
  Status PlanRing(int32_t n_tokens, KvPlan* plan) const;
  Status PlanH2o(int32_t n_tokens, KvPlan* plan) const;
  void WriteLanes(int layer, const KvPlan& plan, const float* k, const float* v, int64_t row_stride);
  void CommitLanes(KvPlan& plan);
  void RenumberWindow(int32_t shift);
  void RenumberLanesByRank();

  KvShape shape_;
  KvConfig config_;
  size_t elem_bytes_ = 4;            // KvTypeBytes(config_.type)
  AlignedBuffer<uint8_t> k_;         // [n_layer, n_cells, n_head_kv, head_dim] of config_.type
  AlignedBuffer<uint8_t> v_;         // [n_layer, n_cells, n_head_kv, head_dim] of config_.type
  std::vector<float> shift_row_;     // [n_head_kv * head_dim] f16 re-rotation scratch
  int n_lanes_ = 1;                  // h2o: n_layer * n_head_kv; else every lane is the same
  std::vector<TextIndex> index_;     // [n_lanes, n_cells]
  std::vector<int32_t> pos_;         // [n_lanes, n_cells]
  std::vector<float> mass_;          // [n_lanes, n_cells] h2o only
  int32_t n_used_ = 0;
  int32_t hi_ = 0;                   // one past the highest occupied cell
  TextIndex n_seen_ = 0;
};

}  // namespace rotor
