// The KV block pool: one per process (per model), shared by every sequence.
//
// K/V storage comes in blocks of `block_cells` cells, every layer's K and V
// rows of those cells. Blocks live in slabs of up to kKvSlabBytes (memory
// mapped; a block's pages are committed when it first takes them), laid out
// by layer:
//   slab: [2 * n_layer sections][SlabBlocks slots][SlotBytes]
//   section l: layer l's K rows, section n_layer + l: layer l's V rows;
//   a slot: [block_cells, n_head_kv] heads of the K (V) type
// (a head: KvHeadBytes(type, head_dim) bytes, kv_quant.h). A block is a slot
// of every section: data(b) is its K rows of layer 0, and layer l's K (V)
// rows are SectionBytes * l (n_layer + l) further. Blocks taken one after
// another take adjacent slots, so a long sequence reads each layer's keys as
// one run; a layout with every layer inside a block read them in 16-cell
// pieces a block apart, which cost decode a third of its speed at depth 8192
// (docs/BENCHMARKS.md, "Paged KV, layers within a block"). A sequence maps
// its cells to blocks through its own table (kv_cache.h).
//
// Blocks are reference counted. One that nobody references goes to a free
// list (its memory kept for the next taker: fresh pages fault, slowly), unless
// it is *published*: a full block that holds tokens [b*B, (b+1)*B) of
// some text at positions equal to their indices, identified by the hash chain
// of its tokens (PrefixHash). A published block nobody references is
// *cached*: it stays until its bytes are needed, least recently used first,
// and a new sequence whose text starts the same way takes it instead of
// computing it (automatic prefix caching). A published or shared block is
// read-only: a sequence that must write into one takes a private copy first
// (copy-on-write, KvCache) or, when it is the only holder, unpublishes it.
//
// One budget bounds the bytes of every block (referenced, cached or free);
// memory is taken block by block as tokens arrive, so a pool that has served
// nothing holds nothing.
// Not thread-safe: the pool belongs to the thread that runs the forward pass
// (the scheduler's); attention only reads block memory.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"

namespace rotor {

using BlockId = int32_t;

// What identifies a block's contents besides its tokens: everything that
// changes the K/V computed for them.
struct PrefixSeed {
  uint64_t model = 0;  // the model's identity (weights and hyper-parameters)
  KvTypes types;
  bool rotate = false;
  RopeK rope_k = RopeK::kCached;
  bool k_offset = false;
};
uint64_t PrefixRoot(const PrefixSeed& seed);
// The hash of a block: its parent's hash (PrefixRoot for the first) and tokens.
uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens);

// Cells per block: 16 (docs/BENCHMARKS.md, "Paged KV": attention reads
// blocks of 16 at the speed of a contiguous cache, and a prefix is reused to
// within 15 tokens). A power of two.
inline constexpr int32_t kKvBlockCells = 16;
// Bytes of a slab (address space; memory is committed as blocks are written)
// and the most blocks one holds: runs of up to 4096 cells per layer.
inline constexpr size_t kKvSlabBytes = size_t{64} << 20;
inline constexpr int32_t kKvSlabMaxBlocks = 256;

struct KvPoolOptions {
  int32_t block_cells = kKvBlockCells;
  int64_t budget_bytes = 0;  // 0 = unlimited
  uint64_t model_id = 0;     // PrefixSeed::model of every block
};

class KvBlockPool {
 public:
  KvBlockPool(const KvShape& shape, const KvPoolOptions& options);
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  int32_t block_cells() const { return block_cells_; }
  // For tests: new block memory fails, as an mmap refused under an address-
  // space limit does (Take throws std::bad_alloc), once `blocks` blocks of
  // memory exist; -1 (the default) never.
  void set_memory_fault_after(int64_t blocks) { fault_after_ = blocks; }
  uint64_t model_id() const { return model_id_; }
  int64_t budget_bytes() const { return budget_; }
  const KvShape& shape() const { return shape_; }
  // Bytes of one block of types t: what the budget counts.
  size_t BlockBytes(KvTypes t) const;
  // Blocks of a slab of types t, the bytes a slot takes in each section, and
  // the distance between sections: layer l's K rows of block b start at
  // data(b) + l * SectionBytes(t), its V rows at (n_layer + l) * SectionBytes(t).
  int32_t SlabBlocks(KvTypes t) const;
  size_t SlotBytes(KvTypes t) const;
  size_t SectionBytes(KvTypes t) const { return SlotBytes(t) * SlabBlocks(t); }
  // Copies every row of block `from` into block `to` (of the same types).
  void CopyBlock(BlockId to, BlockId from);

  // Blocks of type t the pool can hand out now: the budget's free bytes plus
  // the cached blocks nobody references (evicted when taken), less the
  // reservations.
  int64_t Available(KvTypes t) const;
  // Sets n blocks of type t aside for one holder (a bounded sequence that
  // must never wait for memory): false when fewer are available.
  bool Reserve(KvTypes t, int64_t n);
  void Unreserve(KvTypes t, int64_t n);
  // A block of type t with one reference, its bytes uninitialised (evicts
  // the least recently used cached blocks when the budget needs their bytes).
  // Available(t) must be positive, or the block comes out of a reservation.
  BlockId Take(KvTypes t, bool reserved = false);
  void Ref(BlockId b);
  // Drops a reference; at zero a published block is cached, another free.
  void Unref(BlockId b);
  int32_t refs(BlockId b) const { return blocks_[b].refs; }
  uint8_t* data(BlockId b) const { return blocks_[b].data; }
  KvTypes type(BlockId b) const { return blocks_[b].type; }

  // Prefix index. Publish: b holds `tokens` (block_cells of them) after the
  // block whose hash is `parent`; its hash is PrefixHash(parent, tokens).
  // A block with the same hash already published keeps its place (b stays
  // unpublished): returns false.
  bool Publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens);
  void Unpublish(BlockId b);
  bool published(BlockId b) const { return blocks_[b].published; }
  // The published block holding `tokens` after `parent`, or -1.
  BlockId Lookup(uint64_t parent, std::span<const int32_t> tokens) const;
  // Drops every cached block and returns the memory of every free one.
  void DropCached();
  // Returns the memory of the free blocks.
  void Trim();
  // Drops the cached blocks (published, referenced by none) of the chain of
  // `text`'s whole blocks from `root` (PrefixRoot): blocks a sequence holds
  // stay. Returns the blocks dropped.
  int64_t DropCachedChain(uint64_t root, std::span<const int32_t> text);

  struct Stats {
    int64_t budget_bytes = 0;
    int64_t bytes = 0;           // every block's bytes (referenced or cached)
    int64_t reserved_bytes = 0;  // set aside for bounded sequences, not yet taken
    int64_t blocks = 0;          // blocks that exist
    int64_t blocks_used = 0;     // referenced by a sequence
    int64_t blocks_cached = 0;   // published, referenced by none
    int64_t blocks_free = 0;     // neither: memory kept for the next block
    int64_t evictions = 0;       // cached blocks freed to make room
    int64_t cow_copies = 0;      // copy-on-write copies (KvCache counts them here)
    int64_t query_tokens = 0;    // prompt tokens looked up in the prefix index
    int64_t hit_tokens = 0;      // of which found cached
  };
  const Stats& stats() const { return stats_; }
  Stats& mutable_stats() { return stats_; }

  // Checks the pool's invariants (tests): counts, LRU list, index.
  Status Validate() const;

 private:
  struct Block {
    uint8_t* data = nullptr;  // null: the id is free
    KvTypes type;
    int32_t slab = -1, slot = -1;  // where its memory is
    int32_t refs = 0;
    bool published = false;
    uint64_t hash = 0, parent = 0;
    BlockId lru_prev = -1, lru_next = -1;  // cached blocks, oldest first
  };
  // A slab: slots of one type, each a block's memory or free.
  struct Slab {
    uint8_t* base = nullptr;  // null: unmapped (the entry is reused)
    size_t bytes = 0;
    KvTypes type;
    int32_t used = 0;
    std::vector<uint8_t> taken;  // [SlabBlocks(type)]
  };
  // Memory for a new block of type t: the lowest free slot of a slab of the
  // type, else a new slab. Null when the system refuses the memory.
  uint8_t* NewMemory(KvTypes t, int32_t* slab, int32_t* slot);
  size_t KLayerBytes(KvTypes t) const;
  size_t VLayerBytes(KvTypes t) const;
  void LruPush(BlockId b);
  void LruRemove(BlockId b);
  std::set<std::pair<const uint8_t*, BlockId>>& FreeList(KvTypes t);
  void Free(BlockId b);       // to its type's free list
  BlockId PopFree(KvTypes t);  // -1 when none
  void Release(BlockId b);    // returns a block's memory
  void Evict(BlockId b);
  bool InLru(BlockId b) const { return blocks_[b].refs == 0 && blocks_[b].published; }
  std::span<const int32_t> BlockTokens(BlockId b) const {
    return {tokens_.data() + static_cast<size_t>(b) * block_cells_,
            static_cast<size_t>(block_cells_)};
  }

  KvShape shape_;
  int32_t block_cells_;
  int64_t budget_;
  int64_t fault_after_ = -1;  // set_memory_fault_after
  uint64_t model_id_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_ids_;           // ids without memory
  // [KvTypes::index()] blocks with memory, unused, by address: the lowest
  // is taken first, so a sequence's blocks stay in ascending runs.
  std::vector<std::set<std::pair<const uint8_t*, BlockId>>> free_;
  std::vector<Slab> slabs_;
  int64_t free_bytes_ = 0;
  std::vector<int32_t> tokens_;  // [blocks_.size(), block_cells] published blocks' tokens
  std::unordered_map<uint64_t, BlockId> index_;
  BlockId lru_head_ = -1, lru_tail_ = -1;
  int64_t cached_bytes_ = 0;
  Stats stats_;
};

}  // namespace rotor
