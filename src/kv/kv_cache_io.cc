// KvCache's side of KV files (kv_file.h): the rows of a text's first tokens
// out of the blocks, and into fresh ones of an empty cache.
#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "kv/kv_cache.h"

namespace rotor {

namespace {

// Calls f(layer, is_v, first cell, rows) for the runs of cells [0, n) that
// lie in one block, layer by layer, K then V (the file's order); stops at the
// first error.
template <typename F>
Status ForEachRun(int n_layer, int64_t n, int32_t block_cells, F f) {
  for (int l = 0; l < n_layer; ++l)
    for (bool is_v : {false, true})
      for (int64_t first = 0; first < n; first += block_cells)
        RETURN_IF_ERROR(f(l, is_v, static_cast<int32_t>(first),
                          static_cast<size_t>(std::min<int64_t>(block_cells, n - first))));
  return Status::Ok();
}

}  // namespace

Status KvCache::ExportPrefix(std::span<const int32_t> tokens, const RowsOut& out) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (policy_->lanes() != KvLanes::kShared)
    return Errorf(
        "kv: the {} cache keeps tokens per layer or head as attention chooses: its K/V is not "
        "a text's first tokens and cannot be saved",
        config_.policy);
  if (n > n_seen_) return Errorf("kv: {} tokens to save, but the cache has run {}", n, n_seen_);
  if (keys_moved_ && n > 0)
    return Errorf(
        "kv: a shift re-rotated the {} cache's stored keys (cached RoPE): even back at their own "
        "positions they are not the keys a run of the text computes, and cannot be saved",
        config_.policy);
  for (int32_t c = 0; c < n; ++c)
    if (cells_.index(0, c) != c || cells_.pos(0, c) != c)
      return Errorf(
          "kv: cell {} holds token {} at position {}, not token {} at its own position: the {} "
          "cache no longer holds its first {} tokens in order (it evicted or moved some)",
          c, cells_.index(0, c), cells_.pos(0, c), c, config_.policy, n);
  if (publish_ && static_cast<int64_t>(text_.size()) >= n)
    for (int64_t i = 0; i < n; ++i)
      if (text_[i] != tokens[i])
        return Errorf("kv: token {} to save is {}, but the cache ran {} there", i, tokens[i],
                      text_[i]);
  return ForEachRun(shape_.n_layer, n, pool_->block_cells(),
                    [&](int l, bool is_v, int32_t c, size_t rows) {
                      const uint8_t* p = is_v ? VRow(l, c) : KRow(l, c);
                      return out(l, is_v, c, std::span<const uint8_t>(p, rows * row_bytes(is_v)));
                    });
}

Status KvCache::ImportPrefix(std::span<const int32_t> tokens, const RowsIn& in) {
  CHECK_EQ(n_seen_, 0);
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!policy_->SharesPrefix())
    return Errorf(
        "kv: the {} cache cannot start from saved K/V: what it keeps depends on attention, not "
        "on the text alone (full, sink and window can)",
        config_.policy);
  if (n > n_cells_)
    return Errorf("kv: {} saved tokens do not fit the cache's {} cells", n, n_cells_);
  const int32_t bc = pool_->block_cells();
  const int32_t n_blocks = static_cast<int32_t>((n + bc - 1) / bc);
  if (n_blocks > pool_->Available(config_.types) + reserved_)
    return Errorf(
        "kv: the KV memory budget ({} MiB) has no room for the {} blocks of {} saved tokens",
        pool_->budget_bytes() >> 20, n_blocks, n);
  std::vector<int32_t> blocks(n_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  MakeWritable(blocks);
  const Status filled =
      ForEachRun(shape_.n_layer, n, bc, [&](int l, bool is_v, int32_t c, size_t rows) {
        uint8_t* p = is_v ? VRow(l, c) : KRow(l, c);
        return in(l, is_v, c, std::span<uint8_t>(p, rows * row_bytes(is_v)));
      });
  if (!filled.ok()) {
    for (int32_t b : blocks) ReleaseBlock(b);
    Rebalance();
    return filled;
  }
  for (int32_t c = 0; c < n; ++c) cells_.Set(0, c, c, c);
  n_seen_ = n;
  if (publish_) text_.assign(tokens.begin(), tokens.end());
  policy_->OnAdopt(cells_, n);
  Rebalance();
  PublishFull();
  return Status::Ok();
}

}  // namespace rotor
