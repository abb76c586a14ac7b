// The block pool and the paged cache on top of it: allocation, reference
// counts, publishing and lookup, LRU eviction under a tiny budget, and
// thousands of random add / fork / keep-prefix / attach / finish operations
// checked against a model (each sequence's text: every occupied cell must hold
// the K/V its own token wrote, whoever wrote the block) with no leak at the end.
#include "kv/kv_pool.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/memory.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"

namespace rotor {
namespace {

const KvShape kShape{2, 1, 2, 64, ops::RopeConfig{2, 2}};

KvPoolOptions Opts(int64_t blocks, int32_t block_cells = 4) {
  KvBlockPool probe(kShape, KvPoolOptions{.block_cells = block_cells});
  return KvPoolOptions{
      .block_cells = block_cells,
      .budget_bytes = blocks * static_cast<int64_t>(probe.BlockBytes(KvTypes{KvType::kF32, KvType::kF32}))};
}

TEST(KvPool, TakeRefUnrefFree) {
  KvBlockPool pool(kShape, Opts(3));
  EXPECT_EQ(pool.BlockBytes(KvTypes{KvType::kF32, KvType::kF32}), 2u * 2 * 4 * 2 * 4);
  EXPECT_EQ(pool.BlockBytes(KvTypes{KvType::kF16, KvType::kF16}), pool.BlockBytes(KvTypes{KvType::kF32, KvType::kF32}) / 2);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 3);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF16, KvType::kF16}), 6);
  const BlockId a = pool.Take(KvTypes{KvType::kF32, KvType::kF32}), b = pool.Take(KvTypes{KvType::kF32, KvType::kF32});
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 1);
  pool.Ref(a);
  EXPECT_EQ(pool.refs(a), 2);
  pool.Unref(a);
  pool.Unref(a);  // unpublished: free, its memory kept for the next block
  EXPECT_EQ(pool.stats().blocks_free, 1);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 2);
  EXPECT_EQ(pool.Take(KvTypes{KvType::kF32, KvType::kF32}), a);  // taken again, no new memory
  EXPECT_EQ(pool.stats().blocks, 2);
  pool.Unref(a);
  pool.Unref(b);
  // Free f32 blocks make room for f16 ones: their memory is returned first.
  const BlockId h[] = {pool.Take(KvTypes{KvType::kF16, KvType::kF16}), pool.Take(KvTypes{KvType::kF16, KvType::kF16}), pool.Take(KvTypes{KvType::kF16, KvType::kF16}),
                       pool.Take(KvTypes{KvType::kF16, KvType::kF16}), pool.Take(KvTypes{KvType::kF16, KvType::kF16}), pool.Take(KvTypes{KvType::kF16, KvType::kF16})};
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF16, KvType::kF16}), 0);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate().message();
  for (BlockId x : h) pool.Unref(x);
  pool.Trim();
  EXPECT_EQ(pool.stats().bytes, 0);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate().message();
}

// The slab layout: blocks taken in turn are adjacent in every section, so a
// layer's rows of consecutive blocks form one run; CopyBlock copies every
// section; the lowest free block is taken first; a slab whose blocks are all
// released is returned.
TEST(KvPool, BlocksTakenInTurnAreAdjacentInEachLayerSection) {
  const KvShape shape{3, 2, 8, 256, ops::RopeConfig{8, 8}};
  const KvTypes f16{KvType::kF16, KvType::kF16}, mixed{KvType::kF32, KvType::kQ8_0};
  KvBlockPool pool(shape, KvPoolOptions{.block_cells = 4});
  EXPECT_EQ(pool.SlotBytes(f16), 4u * 2 * 8 * 2);  // 4 cells x 2 heads x 8 f16
  EXPECT_EQ(pool.SlotBytes(mixed), 4u * 2 * 8 * 4);  // the larger of K (f32) and V (q8_0)
  std::vector<BlockId> b;
  for (int i = 0; i < 5; ++i) b.push_back(pool.Take(f16));
  for (int i = 1; i < 5; ++i)
    EXPECT_EQ(pool.data(b[i]) - pool.data(b[i - 1]), static_cast<ptrdiff_t>(pool.SlotBytes(f16)));
  // Every section of b[1] written with its own byte; copied into b[3].
  const size_t section = pool.SectionBytes(f16);
  const size_t k_bytes = 4 * 2 * KvHeadBytes(KvType::kF16, 8);
  for (int sec = 0; sec < 2 * shape.n_layer; ++sec)
    std::memset(pool.data(b[1]) + sec * section, 0x10 + sec, k_bytes);
  pool.CopyBlock(b[3], b[1]);
  for (int sec = 0; sec < 2 * shape.n_layer; ++sec)
    for (size_t i = 0; i < k_bytes; ++i)
      ASSERT_EQ(pool.data(b[3])[sec * section + i], 0x10 + sec) << "section " << sec << " byte " << i;
  // Freed blocks come back lowest address first.
  pool.Unref(b[4]);
  pool.Unref(b[2]);
  EXPECT_EQ(pool.Take(f16), b[2]);
  EXPECT_EQ(pool.Take(f16), b[4]);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate().message();
  for (BlockId x : b) pool.Unref(x);
  pool.Trim();
  EXPECT_EQ(pool.stats().bytes, 0);
  EXPECT_EQ(pool.stats().blocks, 0);
  // A new block after the slab was returned: fresh memory, zeroed.
  const BlockId c = pool.Take(f16);
  for (int sec = 0; sec < 2 * shape.n_layer; ++sec) EXPECT_EQ(pool.data(c)[sec * section], 0);
  pool.Unref(c);
}

// Pages of [p, p + bytes) resident now (mincore), and how many there are.
std::pair<size_t, size_t> ResidentPages(const void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  std::vector<unsigned char> in((end - begin) / page);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return {0, 0};
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return {resident, in.size()};
}

// A block taken from new memory has every page of its slots committed
// before its rows are written (one call per slot instead of a fault per
// page); a slab's slots no block took stay uncommitted.
TEST(KvPool, NewBlocksArePopulatedBeforeTheirFirstWrite) {
  // Whether this kernel populates (MADV_POPULATE_WRITE: Linux 5.14).
  void* probe = MapZeroed(1 << 16);
  ASSERT_NE(probe, nullptr);
  const bool asked = PopulatePages(probe, 1 << 16);
  const auto [probe_resident, probe_pages] = ResidentPages(probe, 1 << 16);
  const bool populates = asked && probe_pages > 0 && probe_resident == probe_pages;
  Unmap(probe, 1 << 16);
  if (!populates) GTEST_SKIP() << "this kernel does not populate pages on request";
  // Slots of 64 KiB (8 cells x 8 heads x 256 f32 values x 4 bytes): whole
  // pages of up to 64 KiB.
  const KvShape shape{3, 8, 256, 64, ops::RopeConfig{256, 256}};
  const KvTypes f32{KvType::kF32, KvType::kF32};
  KvBlockPool pool(shape, KvPoolOptions{.block_cells = 8});
  ASSERT_EQ(pool.SlotBytes(f32), size_t{64} << 10);
  const BlockId a = pool.Take(f32), b = pool.Take(f32);
  const size_t section = pool.SectionBytes(f32);
  for (BlockId x : {a, b})
    for (int sec = 0; sec < 2 * shape.n_layer; ++sec) {
      const uint8_t* slot = pool.data(x) + sec * section;
      const auto [resident, pages] = ResidentPages(slot, pool.SlotBytes(f32));
      EXPECT_EQ(resident, pages) << "block " << x << " section " << sec;
      EXPECT_EQ(pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)), size_t{64} << 10);
    }
  // The slot after b's in layer 0's K section: no block has it (unless
  // the kernel backs all anonymous memory with 2 MiB pages).
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string thp_mode;
  std::getline(thp, thp_mode);
  if (thp_mode.find("[always]") == std::string::npos) {
    EXPECT_EQ(ResidentPages(pool.data(b) + pool.SlotBytes(f32), pool.SlotBytes(f32)).first, 0u);
  }
  pool.Unref(a);
  pool.Unref(b);
}

TEST(KvPool, PublishedBlocksAreCachedAndEvictedLeastRecentlyUsedFirst) {
  KvBlockPool pool(kShape, Opts(3));
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8}, t3 = {9, 9, 9, 9};
  const uint64_t root = PrefixRoot(PrefixSeed{});
  const BlockId a = pool.Take(KvTypes{KvType::kF32, KvType::kF32}), b = pool.Take(KvTypes{KvType::kF32, KvType::kF32});
  ASSERT_TRUE(pool.Publish(a, root, t1));
  ASSERT_TRUE(pool.Publish(b, PrefixHash(root, t1), t2));
  EXPECT_EQ(pool.Lookup(root, t1), a);
  EXPECT_EQ(pool.Lookup(PrefixHash(root, t1), t2), b);
  EXPECT_EQ(pool.Lookup(root, t2), -1);  // same tokens, another parent
  pool.Unref(b);                         // b first: the tail ages before the head
  pool.Unref(a);
  EXPECT_EQ(pool.stats().blocks_cached, 2);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 3);  // cached blocks count as room
  // A third block fits in the budget; a fourth evicts the oldest cached (b).
  const BlockId c = pool.Take(KvTypes{KvType::kF32, KvType::kF32});
  EXPECT_EQ(pool.stats().evictions, 0);
  const BlockId d = pool.Take(KvTypes{KvType::kF32, KvType::kF32});
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_EQ(pool.Lookup(PrefixHash(root, t1), t2), -1);
  EXPECT_EQ(pool.Lookup(root, t1), a);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 1);  // a, still cached
  // Referencing a cached block takes it off the LRU list.
  pool.Ref(a);
  EXPECT_EQ(pool.Available(KvTypes{KvType::kF32, KvType::kF32}), 0);
  EXPECT_FALSE(pool.Publish(c, root, t1));  // the same hash stays with a
  ASSERT_TRUE(pool.Publish(c, root, t3));
  pool.Unpublish(c);
  EXPECT_EQ(pool.Lookup(root, t3), -1);
  for (BlockId x : {a, c, d}) pool.Unref(x);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate().message();
  pool.DropCached();
  EXPECT_EQ(pool.stats().bytes, 0);
}

// ---- Random operations on paged caches sharing a pool.

struct Seq {
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> text;
};

KvConfig Policy(int which) {
  KvConfig kv;
  if (which == 0) return kv;  // full
  EXPECT_TRUE(kv.Set(KvOpt::kPolicy, "sink").ok());
  EXPECT_TRUE(kv.SetInt(KvOpt::kSize, 24).ok());
  // Stored K stays as written (compact positions would re-rotate cached keys).
  EXPECT_TRUE(kv.Set(KvOpt::kPositions, "original").ok());
  return kv;
}

// The K/V a token writes: K = (token + 1000 layer, index), V = (index, -token).
void Append(Seq& s, const std::vector<int32_t>& tokens, bool* refused) {
  KvPlan plan;
  *refused = !s.cache->Plan(static_cast<int32_t>(tokens.size()), &plan).ok() ||
             !s.cache->Prepare(plan).ok();
  if (*refused) return;
  const TextIndex first = s.cache->n_seen();
  std::vector<float> k(tokens.size() * 2), v(tokens.size() * 2);
  for (int l = 0; l < kShape.n_layer; ++l) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      k[2 * i] = static_cast<float>(tokens[i] + 1000 * l);
      k[2 * i + 1] = static_cast<float>(first + i);
      v[2 * i] = static_cast<float>(first + i);
      v[2 * i + 1] = static_cast<float>(-tokens[i]);
    }
    s.cache->Write(l, plan, k.data(), v.data(), 2);
  }
  plan.tokens = tokens;
  s.cache->Commit(plan);
  s.text.insert(s.text.end(), tokens.begin(), tokens.end());
}

void ExpectHolds(const Seq& s) {
  const KvCache& c = *s.cache;
  ASSERT_EQ(c.n_seen(), static_cast<TextIndex>(s.text.size()));
  for (int32_t cell = 0; cell < c.cells().hi(0); ++cell) {
    const TextIndex idx = c.CellIndex(cell);
    if (idx < 0) continue;
    for (int l = 0; l < kShape.n_layer; ++l) {
      const std::vector<float> k = c.CellK(l, cell), v = c.CellV(l, cell);
      ASSERT_EQ(k[0], s.text[idx] + 1000 * l) << "cell " << cell << " token " << idx;
      ASSERT_EQ(k[1], idx);
      ASSERT_EQ(v[0], idx);
      ASSERT_EQ(v[1], -s.text[idx]);
    }
  }
}

// A sink generating far past its size ("generate forever at fixed memory")
// keeps no more token ids for publishing than it has cells (it kept one per
// token, without end).
TEST(KvPool, ARingPastItsSizeKeepsBoundedIds) {
  KvBlockPool pool(kShape, Opts(40));
  Seq s;
  s.cache = std::move(KvCache::Create(kShape, Policy(1), &pool)).value();  // sink, 24 cells
  bool refused = false;
  for (int i = 0; i < 24 && !refused; ++i) Append(s, {i % 4}, &refused);
  EXPECT_EQ(s.cache->publish_ids(), 24u);
  for (int i = 24; i < 2000 && !refused; ++i) Append(s, {i % 4}, &refused);
  ASSERT_FALSE(refused);
  EXPECT_EQ(s.cache->n_seen(), 2000);
  EXPECT_LE(s.cache->publish_ids(), 24u);
  ExpectHolds(s);
}

TEST(KvPool, RandomOperationsAgainstAModel) {
  KvBlockPool pool(kShape, Opts(40));
  std::mt19937 rng(7);
  auto rand = [&](int n) { return static_cast<int>(rng() % n); };
  // Texts start from one of three prefixes, so attachments happen.
  const std::vector<std::vector<int32_t>> prefixes = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 7, 7}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}};
  std::vector<Seq> seqs;
  int64_t attached = 0, refused = 0, cow_before = pool.stats().cow_copies;
  for (int op = 0; op < 4000; ++op) {
    const int what = rand(10);
    if (seqs.empty() || (what < 2 && seqs.size() < 6)) {
      Seq s;
      s.cache = std::move(KvCache::Create(kShape, Policy(rand(2)), &pool)).value();
      std::vector<int32_t> prompt = prefixes[rand(3)];
      for (int i = rand(8); i > 0; --i) prompt.push_back(rand(4));
      const int64_t n = s.cache->AttachPrefix(prompt, static_cast<int64_t>(prompt.size()) - 1);
      attached += n;
      s.text.assign(prompt.begin(), prompt.begin() + n);
      bool no = false;
      Append(s, std::vector<int32_t>(prompt.begin() + n, prompt.end()), &no);
      if (no) {
        ++refused;
        continue;
      }
      seqs.push_back(std::move(s));
    } else if (what < 6) {
      Seq& s = seqs[rand(static_cast<int>(seqs.size()))];
      std::vector<int32_t> tokens(1 + rand(9));
      for (int32_t& t : tokens) t = rand(4);
      bool no = false;
      Append(s, tokens, &no);
      refused += no;
    } else if (what < 7 && seqs.size() < 6) {
      const Seq& s = seqs[rand(static_cast<int>(seqs.size()))];
      auto fork = s.cache->Fork();
      if (!fork.ok()) continue;
      seqs.push_back(Seq{std::move(*fork), s.text});
    } else if (what < 8) {
      Seq& s = seqs[rand(static_cast<int>(seqs.size()))];
      const TextIndex n = rand(static_cast<int>(s.text.size()) + 1);
      if (s.cache->KeepPrefix(n).ok()) s.text.resize(n);
    } else {
      seqs.erase(seqs.begin() + rand(static_cast<int>(seqs.size())));
    }
    for (const Seq& s : seqs) ExpectHolds(s);
    const Status v = pool.Validate();
    ASSERT_TRUE(v.ok()) << "op " << op << ": " << v.message();
    int64_t held = 0;
    for (const Seq& s : seqs) held += s.cache->n_blocks_held();
    ASSERT_GE(held, pool.stats().blocks_used);  // shared blocks are counted per holder
    if (HasFailure()) return;
  }
  EXPECT_GT(attached, 0);
  EXPECT_GT(refused, 0);  // the budget ran out now and then
  EXPECT_GT(pool.stats().evictions, 0);
  EXPECT_GT(pool.stats().cow_copies, cow_before);
  seqs.clear();
  EXPECT_EQ(pool.stats().blocks_used, 0);
  // No leak: every block is cached or free.
  EXPECT_EQ(pool.stats().blocks, pool.stats().blocks_cached + pool.stats().blocks_free);
  pool.DropCached();
  EXPECT_EQ(pool.stats().bytes, 0);
  EXPECT_TRUE(pool.Validate().ok());
}

}  // namespace
}  // namespace rotor
