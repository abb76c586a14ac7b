#include "kv/kv_pool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "base/check.h"
#include "base/memory.h"
#include "kv/kv_quant.h"

namespace rotor {

namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over the running hash and the next value.
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

KvTypes KvTypesAt(int index) {
  return KvTypes{static_cast<KvType>(index / kKvTypeCount),
                 static_cast<KvType>(index % kKvTypeCount)};
}

}  // namespace

uint64_t PrefixRoot(const PrefixSeed& seed) {
  uint64_t h = Mix(0x726f746f722d6b76ull, seed.model);  // "rotor-kv"
  h = Mix(h, static_cast<uint64_t>(seed.types.k));
  h = Mix(h, static_cast<uint64_t>(seed.types.v));
  h = Mix(h, static_cast<uint64_t>(seed.rotate));
  h = Mix(h, static_cast<uint64_t>(seed.rope_k));
  // Keys without offsets hash as before the option existed.
  return seed.k_offset ? Mix(h, 0x6b2d6f6666736574ull) : h;  // "k-offset"
}

uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent, tokens.size());
  for (int32_t t : tokens) h = Mix(h, static_cast<uint32_t>(t));
  return h;
}

KvBlockPool::KvBlockPool(const KvShape& shape, const KvPoolOptions& options)
    : shape_(shape),
      block_cells_(options.block_cells),
      budget_(options.budget_bytes),
      model_id_(options.model_id) {
  CHECK(block_cells_ > 0 && (block_cells_ & (block_cells_ - 1)) == 0);
  CHECK_GE(budget_, 0);
  stats_.budget_bytes = budget_;
}

KvBlockPool::~KvBlockPool() {
  for (Slab& s : slabs_) Unmap(s.base, s.bytes);
}

size_t KvBlockPool::KLayerBytes(KvTypes t) const {
  return static_cast<size_t>(block_cells_) * shape_.n_head_kv * KvHeadBytes(t.k, shape_.head_dim);
}

size_t KvBlockPool::VLayerBytes(KvTypes t) const {
  return static_cast<size_t>(block_cells_) * shape_.n_head_kv * KvHeadBytes(t.v, shape_.head_dim);
}

size_t KvBlockPool::BlockBytes(KvTypes t) const {
  return static_cast<size_t>(shape_.n_layer) * (KLayerBytes(t) + VLayerBytes(t));
}

size_t KvBlockPool::SlotBytes(KvTypes t) const {
  // K and V slots alike (the larger), so sections are equally spaced.
  return (std::max(KLayerBytes(t), VLayerBytes(t)) + kAlignment - 1) / kAlignment * kAlignment;
}

int32_t KvBlockPool::SlabBlocks(KvTypes t) const {
  const size_t per_block = 2 * static_cast<size_t>(shape_.n_layer) * SlotBytes(t);
  return static_cast<int32_t>(
      std::clamp<size_t>(kKvSlabBytes / per_block, 1, static_cast<size_t>(kKvSlabMaxBlocks)));
}

void KvBlockPool::CopyBlock(BlockId to, BlockId from) {
  const KvTypes t = blocks_[from].type;
  CHECK(t == blocks_[to].type);
  const size_t section = SectionBytes(t);
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(blocks_[to].data + l * section, blocks_[from].data + l * section, KLayerBytes(t));
    const size_t v = (shape_.n_layer + l) * section;
    std::memcpy(blocks_[to].data + v, blocks_[from].data + v, VLayerBytes(t));
  }
}

uint8_t* KvBlockPool::NewMemory(KvTypes t, int32_t* slab, int32_t* slot) {
  const int32_t n = SlabBlocks(t);
  int32_t reuse = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(slabs_.size()); ++i) {
    Slab& s = slabs_[i];
    if (s.base == nullptr) {
      if (reuse < 0) reuse = i;
      continue;
    }
    if (!(s.type == t) || s.used == n) continue;
    const auto free = std::find(s.taken.begin(), s.taken.end(), 0);
    *slab = i;
    *slot = static_cast<int32_t>(free - s.taken.begin());
    *free = 1;
    ++s.used;
    return s.base + static_cast<size_t>(*slot) * SlotBytes(t);
  }
  Slab s;
  s.bytes = 2 * static_cast<size_t>(shape_.n_layer) * SectionBytes(t);
  s.base = static_cast<uint8_t*>(MapZeroed(s.bytes));
  if (s.base == nullptr) return nullptr;
  s.type = t;
  s.used = 1;
  s.taken.assign(n, 0);
  s.taken[0] = 1;
  if (reuse < 0) {
    reuse = static_cast<int32_t>(slabs_.size());
    slabs_.emplace_back();
  }
  slabs_[reuse] = std::move(s);
  *slab = reuse;
  *slot = 0;
  return slabs_[reuse].base;
}

int64_t KvBlockPool::Available(KvTypes t) const {
  if (budget_ == 0) return std::numeric_limits<int64_t>::max();
  const int64_t room = budget_ - stats_.bytes + cached_bytes_ + free_bytes_ - stats_.reserved_bytes;
  return std::max<int64_t>(0, room / static_cast<int64_t>(BlockBytes(t)));
}

bool KvBlockPool::Reserve(KvTypes t, int64_t n) {
  if (n > Available(t)) return false;
  stats_.reserved_bytes += n * static_cast<int64_t>(BlockBytes(t));
  return true;
}

void KvBlockPool::Unreserve(KvTypes t, int64_t n) {
  stats_.reserved_bytes -= n * static_cast<int64_t>(BlockBytes(t));
  CHECK_GE(stats_.reserved_bytes, 0);
}

void KvBlockPool::LruPush(BlockId b) {
  Block& k = blocks_[b];
  k.lru_prev = lru_tail_, k.lru_next = -1;
  if (lru_tail_ >= 0)
    blocks_[lru_tail_].lru_next = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
  cached_bytes_ += static_cast<int64_t>(BlockBytes(k.type));
  ++stats_.blocks_cached;
}

void KvBlockPool::LruRemove(BlockId b) {
  Block& k = blocks_[b];
  if (k.lru_prev >= 0)
    blocks_[k.lru_prev].lru_next = k.lru_next;
  else
    lru_head_ = k.lru_next;
  if (k.lru_next >= 0)
    blocks_[k.lru_next].lru_prev = k.lru_prev;
  else
    lru_tail_ = k.lru_prev;
  k.lru_prev = k.lru_next = -1;
  cached_bytes_ -= static_cast<int64_t>(BlockBytes(k.type));
  --stats_.blocks_cached;
}

std::set<std::pair<const uint8_t*, BlockId>>& KvBlockPool::FreeList(KvTypes t) {
  const size_t i = static_cast<size_t>(t.index());
  if (free_.size() <= i) free_.resize(i + 1);
  return free_[i];
}

// A block nobody needs keeps its memory, on its type's free list: taking it
// again costs no page faults (which cost ~10 us each in a VM).
void KvBlockPool::Free(BlockId b) {
  Block& k = blocks_[b];
  CHECK(k.refs == 0 && !k.published);
  FreeList(k.type).emplace(k.data, b);
  free_bytes_ += static_cast<int64_t>(BlockBytes(k.type));
  ++stats_.blocks_free;
}

void KvBlockPool::Release(BlockId b) {
  Block& k = blocks_[b];
  Slab& s = slabs_[k.slab];
  if (--s.used == 0) {
    Unmap(s.base, s.bytes);
    s = Slab{};
  } else {
    s.taken[k.slot] = 0;
    const size_t section = SectionBytes(k.type);
    for (int i = 0; i < 2 * shape_.n_layer; ++i)
      DiscardPages(k.data + i * section, SlotBytes(k.type));
  }
  stats_.bytes -= static_cast<int64_t>(BlockBytes(k.type));
  --stats_.blocks;
  k = Block{};
  free_ids_.push_back(b);
}

void KvBlockPool::Evict(BlockId b) {
  LruRemove(b);
  index_.erase(blocks_[b].hash);
  blocks_[b].published = false;
  ++stats_.evictions;
  Free(b);
}

BlockId KvBlockPool::PopFree(KvTypes t) {
  auto& list = FreeList(t);
  if (list.empty()) return -1;
  const BlockId b = list.begin()->second;
  list.erase(list.begin());
  free_bytes_ -= static_cast<int64_t>(BlockBytes(t));
  --stats_.blocks_free;
  return b;
}

void KvBlockPool::Trim() {
  for (size_t t = 0; t < free_.size(); ++t)
    for (BlockId b; (b = PopFree(KvTypesAt(static_cast<int>(t)))) >= 0;) Release(b);
}

BlockId KvBlockPool::Take(KvTypes t, bool reserved) {
  const int64_t bytes = static_cast<int64_t>(BlockBytes(t));
  if (reserved)
    Unreserve(t, 1);
  else
    CHECK_GT(Available(t), 0);
  // A free block of the type, else new memory within the budget: made by
  // releasing free blocks of other types, then by evicting cached blocks,
  // least recently used first (an evicted block of the type is taken).
  BlockId id = PopFree(t);
  while (id < 0 && budget_ > 0 && stats_.bytes + bytes > budget_) {
    BlockId other = -1;
    for (size_t u = 0; u < free_.size() && other < 0; ++u) other = PopFree(KvTypesAt(static_cast<int>(u)));
    if (other >= 0) {
      Release(other);
      continue;
    }
    CHECK(lru_head_ >= 0);
    Evict(lru_head_);
    id = PopFree(t);
  }
  if (id < 0) {
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      id = static_cast<BlockId>(blocks_.size());
      blocks_.emplace_back();
      tokens_.resize(blocks_.size() * static_cast<size_t>(block_cells_));
    }
    int32_t slab = -1, slot = -1;
    uint8_t* p = fault_after_ >= 0 && stats_.blocks >= fault_after_ ? nullptr
                                                                      : NewMemory(t, &slab, &slot);
    if (p == nullptr) {
      free_ids_.push_back(id);
      throw std::bad_alloc();
    }
    // Its pages committed now, one call per slot: the rows' first writes
    // would fault them in one page at a time (about 10 us a fault on this
    // project's VM; prefill of a 3,000-token prompt in a new process ran
    // 5.8% faster, docs/BENCHMARKS.md "Sixty-eighth session").
    const size_t section = SectionBytes(t);
    for (int i = 0; i < 2 * shape_.n_layer; ++i) PopulatePages(p + i * section, SlotBytes(t));
    blocks_[id].data = p;
    blocks_[id].type = t;
    blocks_[id].slab = slab;
    blocks_[id].slot = slot;
    stats_.bytes += bytes;
    ++stats_.blocks;
  }
  blocks_[id].refs = 1;
  ++stats_.blocks_used;
  return id;
}

void KvBlockPool::Ref(BlockId b) {
  Block& k = blocks_[b];
  CHECK(k.data != nullptr);
  if (InLru(b)) LruRemove(b);
  if (k.refs++ == 0) ++stats_.blocks_used;
}

void KvBlockPool::Unref(BlockId b) {
  Block& k = blocks_[b];
  CHECK_GT(k.refs, 0);
  if (--k.refs > 0) return;
  --stats_.blocks_used;
  if (k.published)
    LruPush(b);
  else
    Free(b);
}

bool KvBlockPool::Publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens) {
  CHECK_EQ(static_cast<int32_t>(tokens.size()), block_cells_);
  Block& k = blocks_[b];
  CHECK(k.refs > 0 && !k.published);
  const uint64_t hash = PrefixHash(parent, tokens);
  if (index_.count(hash)) return false;
  index_.emplace(hash, b);
  k.published = true;
  k.hash = hash;
  k.parent = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(b) * block_cells_);
  return true;
}

void KvBlockPool::Unpublish(BlockId b) {
  Block& k = blocks_[b];
  if (!k.published) return;
  CHECK_GT(k.refs, 0);  // a cached block is evicted, not unpublished
  index_.erase(k.hash);
  k.published = false;
}

BlockId KvBlockPool::Lookup(uint64_t parent, std::span<const int32_t> tokens) const {
  if (static_cast<int32_t>(tokens.size()) != block_cells_) return -1;
  const auto it = index_.find(PrefixHash(parent, tokens));
  if (it == index_.end()) return -1;
  const Block& k = blocks_[it->second];
  const std::span<const int32_t> held = BlockTokens(it->second);
  if (k.parent != parent || !std::equal(held.begin(), held.end(), tokens.begin())) return -1;
  return it->second;
}

void KvBlockPool::DropCached() {
  while (lru_head_ >= 0) Evict(lru_head_);
  Trim();
}

int64_t KvBlockPool::DropCachedChain(uint64_t root, std::span<const int32_t> text) {
  std::vector<BlockId> chain;
  uint64_t parent = root;
  for (size_t at = 0; at + block_cells_ <= text.size(); at += block_cells_) {
    const std::span<const int32_t> tokens = text.subspan(at, block_cells_);
    const BlockId b = Lookup(parent, tokens);
    if (b < 0) break;
    chain.push_back(b);
    parent = PrefixHash(parent, tokens);
  }
  int64_t n = 0;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)  // children first
    if (InLru(*it)) {
      Evict(*it);
      ++n;
    }
  return n;
}

Status KvBlockPool::Validate() const {
  int64_t blocks = 0, used = 0, cached = 0, bytes = 0, published = 0, free = 0;
  for (BlockId b = 0; b < static_cast<BlockId>(blocks_.size()); ++b) {
    const Block& k = blocks_[b];
    if (k.data == nullptr) continue;
    ++blocks;
    bytes += static_cast<int64_t>(BlockBytes(k.type));
    if (k.refs > 0) ++used;
    if (k.refs < 0) return Errorf("pool: block {} has {} references", b, k.refs);
    if (k.published) {
      ++published;
      const auto it = index_.find(k.hash);
      if (it == index_.end() || it->second != b)
        return Errorf("pool: published block {} is not in the index", b);
    }
    if (k.refs == 0 && !k.published) ++free;
  }
  int64_t listed = 0;
  for (const auto& list : free_)
    for (const auto& [data, b] : list) {
      if (blocks_[b].refs != 0 || blocks_[b].published || blocks_[b].data == nullptr)
        return Errorf("pool: block {} on a free list is in use", b);
      ++listed;
    }
  if (listed != free || free != stats_.blocks_free)
    return Errorf("pool: {} free blocks, {} on the free lists, {} counted", free, listed,
                  stats_.blocks_free);
  int64_t lru_bytes = 0;
  for (BlockId b = lru_head_, prev = -1; b >= 0; prev = b, b = blocks_[b].lru_next) {
    if (blocks_[b].lru_prev != prev) return Errorf("pool: LRU list broken at block {}", b);
    if (!InLru(b)) return Errorf("pool: block {} in the LRU list is not cached", b);
    ++cached;
    lru_bytes += static_cast<int64_t>(BlockBytes(blocks_[b].type));
  }
  if (blocks != stats_.blocks || used != stats_.blocks_used || cached != stats_.blocks_cached ||
      bytes != stats_.bytes || lru_bytes != cached_bytes_ ||
      published != static_cast<int64_t>(index_.size()))
    return Errorf(
        "pool: counts disagree: blocks {} / {}, used {} / {}, cached {} / {}, bytes {} / {}, "
        "index {} / {}",
        blocks, stats_.blocks, used, stats_.blocks_used, cached, stats_.blocks_cached, bytes,
        stats_.bytes, published, index_.size());
  if (budget_ > 0 && bytes + stats_.reserved_bytes > budget_)
    return Errorf("pool: {} bytes held and {} reserved, over the budget {}", bytes,
                  stats_.reserved_bytes, budget_);
  return Status::Ok();
}

}  // namespace rotor
