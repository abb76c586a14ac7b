// One sequence's KV cache: the cell table (which token of the text each cell
// holds, and at which RoPE position), the block table (which block of the
// process's pool, kv_pool.h, stores each run of block_cells cells), and a
// policy (kv_policy.h) deciding what goes where.
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
// Blocks: between Plan and the forward pass, Prepare takes the blocks the
// ubatch writes (a new block where the table has none, a private copy of a
// block another sequence or the prefix cache shares: copy-on-write);
// Plan counts them (KvPlan::n_new_blocks) so a caller can check the pool
// first. Under a policy that shares prefixes (full, sink, window) Commit
// publishes every block that fills with tokens [b*B, (b+1)*B) at their own
// positions, and AttachPrefix starts a new sequence from published blocks;
// ExportPrefix and ImportPrefix move a text's first tokens out of the blocks
// and into an empty cache's (KV files, kv_file.h).
//
// Sequence operations (llama.cpp's seq_rm / seq_keep / seq_cp / seq_add):
// KeepPrefix, RemoveRange, Fork and ShiftPositions, each refused with a clear
// error where the policy cannot honour it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/memory.h"
#include "base/thread_pool.h"
#include "base/status.h"
#include "kv/kv_config.h"
#include "kv/kv_quant.h"
#include "kv/kv_policy.h"
#include "kv/kv_pool.h"

namespace rotor {

// What attention reads for one layer.
struct KvLayerView {
  // [n_blocks]: the storage of cells [b << block_shift, (b + 1) << block_shift)
  // (kv_pool.h layout), null where no cell of the block is occupied.
  uint8_t* const* blocks = nullptr;
  int block_shift = 0;
  size_t k_off = 0, v_off = 0;  // this layer's K and V rows within a block
  KvTypes types;
  bool rotate_k = false, rotate_v = false;  // heads stored Hadamard-rotated (kv_quant.h)
  size_t k_row_bytes = 0, v_row_bytes = 0;  // bytes of one cell's K (V) row
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
  // Cached RoPE: [n_head_kv, head_dim] what stored keys have subtracted
  // (kv_key_offsets.h), or null.
  const float* k_offset = nullptr;
  // Deferred RoPE: keys stored as (k - k_center) / k_scale, [n_head_kv,
  // head_dim] each (kv_key_offsets.h), or both null.
  const float* k_center = nullptr;
  const float* k_scale = nullptr;
  const void* KRow(int32_t cell) const {
    return blocks[cell >> block_shift] + k_off + (cell & ((1 << block_shift) - 1)) * k_row_bytes;
  }
  const void* VRow(int32_t cell) const {
    return blocks[cell >> block_shift] + v_off + (cell & ((1 << block_shift) - 1)) * v_row_bytes;
  }
};

class KvCache {
 public:
  // Blocks come from `pool` (which must outlive the cache), or without one
  // from a private pool of unlimited budget.
  static Result<std::unique_ptr<KvCache>> Create(const KvShape& shape, const KvConfig& config,
                                                 KvBlockPool* pool = nullptr);
  ~KvCache();

  const KvShape& shape() const { return shape_; }
  const KvConfig& config() const { return config_; }  // resolved: size, keep, recent set
  int32_t n_cells() const { return n_cells_; }        // cells per lane (storage rows per layer)
  // Occupied cells of the fullest lane: at most the policy's size between ubatches.
  int32_t n_used() const { return cells_.max_used(); }
  TextIndex n_seen() const { return n_seen_; }  // tokens committed: the next token's index
  // Bytes of the cache when all its cells hold tokens: K/V blocks, cell
  // table and policy state. Blocks are taken as tokens arrive: held_bytes().
  size_t memory_bytes() const;
  // Bytes of the blocks the table holds now (shared ones counted in full).
  size_t held_bytes() const;
  int64_t n_blocks_held() const;
  KvBlockPool& pool() const { return *pool_; }

  // Tokens that can still be appended; -1 = unbounded (evicting policies).
  int64_t Remaining() const;
  // The next n tokens are a prompt: errors when the cache cannot take it
  // (the full cache's room, snapkv's whole-prompt hold).
  Status ExpectPrompt(int64_t n_tokens);

  // Plans n_tokens new tokens. Mutates nothing. Errors if they cannot fit.
  // plan->n_new_blocks: the pool blocks Prepare will take.
  Status Plan(int32_t n_tokens, KvPlan* plan) const;
  // Blocks the next n tokens need beyond this cache's reservation (0 when
  // they cannot be planned: the runner's FitsCache says why).
  int64_t BlocksFor(int32_t n_tokens) const;
  int64_t Unreserved(const KvPlan& plan) const {
    return std::max<int64_t>(0, plan.n_new_blocks - reserved_);
  }
  // The blocks this cache may still take: a block for every table entry it
  // does not hold alone and unpublished (a published one may be shared by
  // the time it must be written).
  int64_t BlocksToFill() const;
  // Sets aside every block the cache can still need (BlocksToFill), now and
  // from now on, so it never waits for memory (bounded policies); false when
  // the pool has not that many available.
  bool ReserveAll();
  // Takes the blocks the planned ubatch writes; errors (changing nothing the
  // text depends on) when the pool cannot give plan.n_new_blocks.
  Status Prepare(const KvPlan& plan);
  KvLayerView View(int layer);
  // Stores the planned tokens' K and V for one layer.
  // k, v: [plan.n_tokens, n_head_kv * head_dim], rows `row_stride` floats apart.
  void Write(int layer, const KvPlan& plan, const float* k, const float* v, int64_t row_stride);
  // The same from rows already in the stored form (KRowBytes / VRowBytes each:
  // minus the key offsets, rotated, rounded to the types, as Write would store
  // them): attention makes them for the ubatch's own K/V, so the cache copies
  // them instead of quantizing each row a second time.
  // k, v: [plan.n_tokens] rows, k_row_bytes (v_row_bytes) apart.
  void WriteStored(int layer, const KvPlan& plan, const uint8_t* k, size_t k_row_bytes,
                   const uint8_t* v, size_t v_row_bytes);
  // plan.tokens: the ubatch's token ids (prefix publishing), may be empty.
  // pool: where compact positions re-rotate stored keys, the lanes' keys are
  // re-rotated on its threads (each lane's in order: the same bytes).
  void Commit(KvPlan& plan, ThreadPool* pool = nullptr);
  // Forgets every token and returns every block to the pool.
  void Clear();

  // Automatic prefix caching. An empty cache whose policy shares prefixes
  // takes the longest run of published blocks holding the first tokens of
  // `text`, up to max_tokens tokens: they count as run (n_seen). Returns the
  // tokens taken (0 when the policy does not share prefixes).
  int64_t AttachPrefix(std::span<const int32_t> text, int64_t max_tokens);
  // Stops publishing this sequence's blocks (cache_prompt: false).
  void DisablePublishing() { publish_ = publish_allowed_ = false; }
  // True when the policy shares prefixes (kv_policy.h): full, sink, window.
  bool SharesPrefix() const { return policy_->SharesPrefix(); }
  // Token ids kept for publishing: at most one per cell, however long a ring
  // generates (it kept one per token, 4 bytes each, without end).
  size_t publish_ids() const { return text_.size(); }

  // KV files (kv_file.h, kv_cache_io.cc). The rows of one layer's K (is_v
  // false) or V for cells [first, first + rows.size() / row_bytes(is_v)), all
  // in one block: [n, n_head_kv] heads of the cache's K (V) type. Both calls go
  // layer by layer, K then V, cells in order, and stop at the first error.
  using RowsOut =
      std::function<Status(int layer, bool is_v, int32_t first, std::span<const uint8_t> rows)>;
  using RowsIn =
      std::function<Status(int layer, bool is_v, int32_t first, std::span<uint8_t> rows)>;
  size_t row_bytes(bool is_v) const { return is_v ? VRowBytes() : KRowBytes(); }
  // Hands `out` the K/V of tokens [0, n), n = tokens.size(). An error when
  // cells [0, n) do not hold tokens 0..n-1 at positions 0..n-1 (per-lane
  // policies; a ring that wrapped; a sequence operation) or when the cache
  // knows the ids it ran and `tokens` are not those.
  Status ExportPrefix(std::span<const int32_t> tokens, const RowsOut& out) const;
  // An empty cache whose policy shares prefixes takes tokens it did not run:
  // blocks for cells [0, n) from the pool, rows filled by `in`, then the
  // tokens count as run (as AttachPrefix: cells, OnAdopt) and full blocks are
  // published. On an error (from `in`; a policy that does not share
  // prefixes; n beyond the cache or the pool's budget) the cache stays empty.
  Status ImportPrefix(std::span<const int32_t> tokens, const RowsIn& in);

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
  // copy continues exactly as this one would. Under a policy that shares
  // prefixes the copy shares the blocks (copy-on-write); else it copies them.
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
  KvCache(const KvShape& shape, const KvConfig& config, std::unique_ptr<KvPolicy> policy,
          KvBlockPool* pool, std::shared_ptr<KvBlockPool> own_pool);
  // A sequence operation's OnDrop may re-rotate cached keys (compact positions).
  bool DropRotates() const {
    return config_.rope_k == RopeK::kCached && config_.positions == KvPositions::kCompact;
  }
  size_t RowFloats() const { return static_cast<size_t>(shape_.n_head_kv) * shape_.head_dim; }
  size_t KRowBytes() const { return shape_.n_head_kv * k_head_bytes_; }
  size_t VRowBytes() const { return shape_.n_head_kv * v_head_bytes_; }
  // A cell's K (V) row of one layer; its block must be held.
  uint8_t* KRow(int layer, int32_t cell) const {
    return block_data_[cell >> block_shift_] + layer * section_bytes_ +
           (cell & block_mask_) * KRowBytes();
  }
  uint8_t* VRow(int layer, int32_t cell) const {
    return block_data_[cell >> block_shift_] + (shape_.n_layer + layer) * section_bytes_ +
           (cell & block_mask_) * VRowBytes();
  }
  // Stores n_heads heads (kv heads head.. of layer `layer`) of f32 values at
  // dst as K (is_v false) or V: minus the key offsets if the cache has them,
  // rotated if the cache rotates them, in the cache's K (V) type, block types
  // rounded by `rounding` (KvRoundingOf; re-rotated keys: GGML's).
  // scratch: [n_heads * head_dim] floats (null: the cache's own).
  void Store(bool is_v, int layer, int head, uint8_t* dst, const float* src, int n_heads,
             KvRounding rounding, float* scratch = nullptr);
  // n_heads stored heads at src as f32 values, rotated back, offsets added back.
  void Load(bool is_v, int layer, int head, const uint8_t* src, float* dst, int n_heads) const;
  // Layer `layer`'s key offsets from kv head `head` on, or null (none).
  const float* KeyOffset(int layer, int head) const;
  // Deferred keys' channel centers and half-widths from kv head `head`, or null.
  const float* KeyCenter(int layer, int head) const;
  const float* KeyScale(int layer, int head) const;
  bool RotateK() const { return config_.rotate && config_.rope_k == RopeK::kCached; }
  // A thread's scratch for re-rotating keys: a row of heads, Store's row,
  // and the angles of the last delta.
  struct ShiftScratch {
    std::vector<float> row, store;  // [n_head_kv * head_dim] each
    int32_t delta = 0;
    std::vector<float> cos, sin;  // [n_rot / 2] the rotation by delta (empty: none yet)
  };
  // Re-rotates the stored keys a lane keeps in a cell by delta positions.
  void RotateLane(int lane, int32_t cell, int32_t delta, ShiftScratch& s);
  void ShiftKey(int layer, int head, uint8_t* at, int n_heads, int32_t delta, ShiftScratch& s);
  // The rotations KvCells recorded during Commit, lanes on the pool's threads.
  void ApplyRotations(std::span<const KvCells::Rotation> rotations, ThreadPool& pool);
  // Blocks: table entry b needs a new block (none, or shared: copy-on-write).
  bool NeedsBlock(int32_t b) const;
  // Makes table entry b a block this cache alone holds and may write;
  // `spare`: blocks the pool can give beyond those that must be taken.
  void MakeWritable(int32_t b, int64_t spare);
  void MakeWritable(std::span<const int32_t> blocks);
  // Every held block writable (a sequence operation re-rotating keys);
  // errors when the pool cannot give the copies.
  Status MakeAllWritable();
  void ReleaseBlock(int32_t b);
  // Returns the blocks none of whose cells is occupied.
  void ReleaseEmptyBlocks();
  // Publishes the blocks that filled (prefix caching).
  void PublishFull();
  void TruncatePublished(TextIndex n);
  // The layer and kv-head range a lane covers.
  void LaneHeads(int lane, int* layer_begin, int* layer_end, int* head, int* n_heads) const;
  // Copies a lane's K/V from cell `from` to cell `to` (KvCells::CompactLane).
  void MoveLaneCell(int lane, int32_t from, int32_t to);
  Status CheckRange(const char* op, TextIndex from, TextIndex to) const;
  void DropCells(TextIndex from, TextIndex to);

  KvShape shape_;
  KvConfig config_;
  std::unique_ptr<KvPolicy> policy_;
  std::shared_ptr<KvBlockPool> own_pool_;  // when created without a pool (shared with forks)
  KvBlockPool* pool_;
  int32_t n_cells_ = 0;
  size_t k_head_bytes_ = 0, v_head_bytes_ = 0;  // KvHeadBytes of the K (V) type
  int block_shift_ = 0;                         // log2 of the pool's block_cells
  int32_t block_mask_ = 0;
  size_t section_bytes_ = 0;                    // pool_->SectionBytes: layer to layer
  std::vector<BlockId> table_;        // [ceil(n_cells / block_cells)] -1 = none
  std::vector<uint8_t*> block_data_;  // [table_.size()] the blocks' storage
  std::vector<ShiftScratch> shift_;   // [threads] re-rotation scratch (one at least)
  std::vector<float> store_row_;      // [n_head_kv * head_dim] Store's rotation scratch
  KvCells cells_;
  TextIndex n_seen_ = 0;
  // Prefix publishing: while every full block holds its own tokens at their
  // own positions, the text's token ids and the hash of each full block.
  bool publish_ = true;
  bool publish_allowed_ = true;  // DisablePublishing
  std::vector<int32_t> text_;    // [min(n_seen, n_cells)] while publishing
  std::vector<uint64_t> chain_;  // [full blocks published or attached]
  // A shift re-rotated stored keys (cached RoPE): even at their own positions
  // again they are not a run's keys (rounded, requantized), so not saved.
  bool keys_moved_ = false;
  uint64_t root_ = 0;            // PrefixRoot of the model, types, rotation and RoPE mode
  int64_t reserved_ = 0;         // blocks the pool set aside for this cache
  bool bounded_ = false;         // ReserveAll: reserved_ stays BlocksToFill()
  void Rebalance();              // bounded_: returns reservations no longer needed
  mutable KvPlan probe_;         // BlocksFor
};

}  // namespace rotor
