// One sequence's KV cache: cell metadata (which token of the text each
// physical slot holds, and at which RoPE position) kept apart from K/V storage.
//
// A ubatch goes through the cache in three steps, as in llama.cpp's memory
// module: Plan (find a slot for every new token, decide evictions; mutates
// nothing and fails cleanly), Write (per layer, after attention has read the
// cache: store the ubatch's K/V in the planned slots) and Commit (the only
// change of cell metadata). Logical token indices grow forever; physical
// slots are bounded by the cache size: they are different types.
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

// Physical cell of the cache, in [0, n_cells).
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
  TextIndex first = 0;          // text index of the ubatch's first token
  int32_t n_tokens = 0;
  std::vector<int32_t> pos;      // [n_tokens] RoPE position of each new token (q and k)
  std::vector<Slot> slot;        // [n_tokens] destination slot; invalid = not kept
  Visibility visibility;
};

// What attention reads for one layer. Cells whose index is -1 are empty.
struct KvLayerView {
  const float* k = nullptr;      // [n_head_kv, n_cells, head_dim]
  const float* v = nullptr;      // [n_head_kv, n_cells, head_dim]
  const TextIndex* index = nullptr;  // [n_cells] text index held by each cell, -1 = empty
  const int32_t* pos = nullptr;  // [n_cells] RoPE position of each cell
  int32_t n_cells = 0;           // cells to scan: every occupied cell is below this
  int32_t cell_stride = 0;       // cells per head in k/v (the capacity)
  int head_dim = 0;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> Create(const KvShape& shape, const KvConfig& config);

  const KvShape& shape() const { return shape_; }
  const KvConfig& config() const { return config_; }
  int32_t n_cells() const { return config_.size; }  // capacity
  int32_t n_used() const { return n_used_; }        // occupied cells
  TextIndex n_seen() const { return n_seen_; }     // tokens committed: the next token's index
  size_t storage_bytes() const { return k_.bytes() + v_.bytes(); }

  // Tokens that can still be appended; -1 = unbounded (evicting policies).
  int64_t Remaining() const;

  // Plans n_tokens new tokens. Mutates nothing. Errors if they cannot fit.
  Status Plan(int32_t n_tokens, KvPlan* plan) const;
  KvLayerView View(int layer) const;
  // Stores the planned tokens' K and V for one layer.
  // k, v: [plan.n_tokens, n_head_kv * head_dim], rows `row_stride` floats apart.
  void Write(int layer, const KvPlan& plan, const float* k, const float* v, int64_t row_stride);
  void Commit(const KvPlan& plan);
  // Forgets every token (storage stays allocated).
  void Clear();

 private:
  KvCache(const KvShape& shape, const KvConfig& config);
  float* KData(int layer, int head) { return k_.data() + LayerHeadOffset(layer, head); }
  float* VData(int layer, int head) { return v_.data() + LayerHeadOffset(layer, head); }
  size_t LayerHeadOffset(int layer, int head) const {
    return (static_cast<size_t>(layer) * shape_.n_head_kv + head) * config_.size * shape_.head_dim;
  }

  KvShape shape_;
  KvConfig config_;
  AlignedBuffer<float> k_;           // [n_layer, n_head_kv, n_cells, head_dim]
  AlignedBuffer<float> v_;           // [n_layer, n_head_kv, n_cells, head_dim]
  std::vector<TextIndex> index_;    // [n_cells]
  std::vector<int32_t> pos_;         // [n_cells]
  int32_t n_used_ = 0;
  int32_t hi_ = 0;                   // one past the highest occupied cell
  TextIndex n_seen_ = 0;
};

}  // namespace rotor
