// One sequence's KV cache: K/V storage and the cell table (which token of the
// text each cell holds, and at which RoPE position), with a policy
// (kv_policy.h) deciding what goes where.
//
// A ubatch goes through the cache in three steps, as in llama.cpp's memory
// module: Plan (positions for the new tokens, and for shared-lane policies a
// cell each and a visibility rule; mutates nothing and fails cleanly), Write
// (per layer, after attention has read the cache: store the ubatch's K/V in
// the planned cells) and Commit (the end of the ubatch: shared-lane cells take
// their tokens, positions may be renumbered). Per-lane policies place tokens
// while attention runs, through the policy's hooks; their plan is then filled
// by the time Write reads it. Text indices grow forever; cells are bounded by
// the cache size: they are different types.
//
// Sequence operations (llama.cpp's seq_rm / seq_keep / seq_cp / seq_add):
// KeepPrefix, RemoveRange, Fork and ShiftPositions, each refused with a clear
// error where the policy cannot honour it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/memory.h"
#include "base/status.h"
#include "kv/kv_config.h"
#include "kv/kv_policy.h"

namespace rotor {

// What attention reads for one layer.
struct KvLayerView {
  const void* k = nullptr;  // [n_cells, n_head_kv, head_dim] of `type`
  const void* v = nullptr;  // [n_cells, n_head_kv, head_dim] of `type`
  KvType type = KvType::kF32;
  size_t row_bytes = 0;              // bytes of one cell's K (or V) row
  const TextIndex* index = nullptr;  // [n_cells] shared lane: text index per cell, -1 = empty
  const int32_t* pos = nullptr;      // [n_cells] shared lane: RoPE position per cell
  int32_t n_cells = 0;               // shared lane: every occupied cell is below this
  int layer = 0;
  TextIndex keep = 0;             // text indices below this are sinks
  RopeK rope_k = RopeK::kCached;  // keys stored rotated (cached) or not (deferred)
  // Per-lane policies: the layer's lanes are first_lane .. first_lane +
  // n_lanes - 1 of `cells`, each covering lane_heads kv heads.
  KvCells* cells = nullptr;  // null for shared-lane policies
  int first_lane = 0;
  int n_lanes = 1;
  int lane_heads = 0;
  const void* KRow(int32_t cell) const { return static_cast<const uint8_t*>(k) + cell * row_bytes; }
  const void* VRow(int32_t cell) const { return static_cast<const uint8_t*>(v) + cell * row_bytes; }
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> Create(const KvShape& shape, const KvConfig& config);
  ~KvCache();

  const KvShape& shape() const { return shape_; }
  const KvConfig& config() const { return config_; }  // resolved: size, keep, recent set
  int32_t n_cells() const { return n_cells_; }        // cells per lane (storage rows per layer)
  // Occupied cells of the fullest lane: at most the policy's size between ubatches.
  int32_t n_used() const { return cells_.max_used(); }
  TextIndex n_seen() const { return n_seen_; }  // tokens committed: the next token's index
  // Bytes of K/V storage, cell table and policy state: allocated once, never grows.
  size_t memory_bytes() const;

  // Tokens that can still be appended; -1 = unbounded (evicting policies).
  int64_t Remaining() const;
  // The next n tokens are a prompt: errors when the cache cannot take it
  // (the full cache's room, snapkv's whole-prompt hold).
  Status ExpectPrompt(int64_t n_tokens);

  // Plans n_tokens new tokens. Mutates nothing. Errors if they cannot fit.
  Status Plan(int32_t n_tokens, KvPlan* plan) const;
  KvLayerView View(int layer);
  // Stores the planned tokens' K and V for one layer.
  // k, v: [plan.n_tokens, n_head_kv * head_dim], rows `row_stride` floats apart.
  void Write(int layer, const KvPlan& plan, const float* k, const float* v, int64_t row_stride);
  void Commit(KvPlan& plan);
  // Forgets every token (storage stays allocated).
  void Clear();

  // Sequence operations. Each checks its range and asks the policy first; on
  // an error the cache is unchanged.
  // Drops tokens [n, n_seen): the text continues at token n, as if only the
  // first n tokens had been run.
  Status KeepPrefix(TextIndex n);
  // Drops tokens [from, to) (to <= n_seen); later tokens keep their positions.
  Status RemoveRange(TextIndex from, TextIndex to);
  // Moves the RoPE positions of tokens [from, to) by delta (cached keys are
  // re-rotated); new tokens continue from the last token's position.
  Status ShiftPositions(TextIndex from, TextIndex to, int32_t delta);
  // A copy of this sequence's cache (storage, cells and policy state): the
  // copy continues exactly as this one would.
  Result<std::unique_ptr<KvCache>> Fork() const;

  // Inspection (tests, metrics): the text index / position held by a cell of
  // a lane (lane 0 = the only lane of shared policies).
  const KvCells& cells() const { return cells_; }
  TextIndex CellIndex(int32_t cell, int lane = 0) const { return cells_.index(lane, cell); }
  int32_t CellPos(int32_t cell, int lane = 0) const { return cells_.pos(lane, cell); }
  int n_lanes() const { return cells_.n_lanes(); }
  // A cell's K (V) row of one layer in f32: [n_head_kv * head_dim].
  std::vector<float> CellK(int layer, int32_t cell) const;
  std::vector<float> CellV(int layer, int32_t cell) const;

 private:
  KvCache(const KvShape& shape, const KvConfig& config, std::unique_ptr<KvPolicy> policy);
  size_t RowFloats() const { return static_cast<size_t>(shape_.n_head_kv) * shape_.head_dim; }
  // Byte offset of a cell's row in k_ / v_.
  size_t Offset(int layer, int32_t cell) const {
    return (static_cast<size_t>(layer) * n_cells_ + cell) * RowFloats() * elem_bytes_;
  }
  // Stores n f32 values at byte offset `at` of k_ or v_, in the cache's type.
  void Store(AlignedBuffer<uint8_t>& dst, size_t at, const float* src, size_t n);
  // Re-rotates the stored keys a lane keeps in a cell by delta positions.
  void RotateLane(int lane, int32_t cell, int32_t delta);
  void ShiftKey(size_t at, int n_heads, int32_t delta);
  // The layer and kv-head range a lane covers.
  void LaneHeads(int lane, int* layer_begin, int* layer_end, int* head, int* n_heads) const;
  Status CheckRange(const char* op, TextIndex from, TextIndex to) const;
  void DropCells(TextIndex from, TextIndex to);

  KvShape shape_;
  KvConfig config_;
  std::unique_ptr<KvPolicy> policy_;
  int32_t n_cells_ = 0;
  size_t elem_bytes_ = 4;         // KvTypeBytes(config_.type)
  AlignedBuffer<uint8_t> k_;      // [n_layer, n_cells, n_head_kv, head_dim] of config_.type
  AlignedBuffer<uint8_t> v_;      // [n_layer, n_cells, n_head_kv, head_dim] of config_.type
  std::vector<float> shift_row_;  // [n_head_kv * head_dim] f16 re-rotation scratch
  KvCells cells_;
  TextIndex n_seen_ = 0;
};

}  // namespace rotor
