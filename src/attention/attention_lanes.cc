// Attention for per-lane policies (h2o, snapkv, tova): each lane of the layer
// (one kv head, or every kv head of the layer) runs token by token through the
// ubatch. Around each token the policy's hooks decide: BeforeToken evicts and
// admits the token to a cell, so the lane's occupied cells are exactly the
// keys the token sees; AfterToken receives the token's attention
// probabilities over those cells, summed over the lane's query heads. Cells
// holding tokens of this ubatch are read from its own K/V (the cache stores
// them only after attention). The fold kernel leaves each block's scores in
// its scratch, so the weights need no second pass over the cache. Processing
// tokens in order makes the result independent of the prefill step.
//
// Tokens a lane takes in a row without evicting (KvLaneHooks::
// AdmitsWithoutEviction: a prompt while the cache has room) are folded
// together instead, by the prefill tiles (RunLaneTile): every BeforeToken of
// the run first, then the tiles, then each token's weights and AfterToken in
// order. The hooks see what the token-by-token order shows them: the same
// cells, each token's keys and its weights (to rounding). A token folded in
// a run has the same bits in any tile and at any ubatch cut that keeps it in
// a run of kMinLaneRun or more; alone (a decode step, a short run) it takes
// the one-token folds, equal to rounding.
//
// The tokens after such a run, which may evict (a prompt longer than the
// cache), are folded in tiles too and replayed through the hooks in order
// (LaneReplay, attention_lane_replay.cc): each token's output and weights
// are corrected for the keys evicted since its tile began. The hooks again
// see the same cells and, to rounding, the same weights, so the same tokens
// are evicted; the rounding now depends on where the tile began, so those
// tokens agree across tile sizes and ubatch cuts to rounding, not bit for
// bit (AttentionScratch::set_replay_limit(-1): token by token, as before).
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/attention.h"
#include "attention/attention_internal.h"
#include "attention/attention_lane_range.h"
#include "base/check.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"

namespace rotor {

namespace {

using Cut = AttentionScratch::Cut;

// A lane run of fewer tokens takes the one-token folds (a tile decodes each
// K head of a block to f32 first, which a few tokens do not repay).
constexpr int kMinLaneRun = 4;
// A thread's lane tile log at most (floats): fewer tokens per tile when a
// lane has many keys.
constexpr size_t kLaneLogFloats = size_t{8} << 20;

// Tokens [0, run) of the ubatch that a lane takes in a row without evicting,
// folded in tiles; 0 when token by token.
int LaneRun(const KvLaneHooks& hooks, const KvCells& cells, int lane, const KvPlan& plan,
            const Cut& cut, int max_tile) {
  if (!(cut.avx2 || cut.avx512) || max_tile <= 0) return 0;
  const int run = std::min(plan.n_tokens, hooks.AdmitsWithoutEviction(cells, lane, 0, plan));
  return run >= kMinLaneRun ? run : 0;
}

// The keys of the run's tokens, in the order RunLaneTile folds them: the
// lane's cells holding earlier tokens, then the run's own cells. Token i's
// keys are the first n_base + i + 1. Returns n_base.
int RunKeys(const KvCells& cells, int lane, KvPlan& plan, int run, int32_t* keys) {
  const TextIndex* index = cells.lane_index(lane);
  int n = 0;
  for (int32_t c = 0; c < cells.hi(lane); ++c)
    if (index[c] >= 0 && index[c] < plan.first) keys[n++] = c;
  const int32_t* own = plan.LaneSlots(lane);
  for (int i = 0; i < run; ++i) keys[n + i] = own[i];
  return n;
}

// The tile log of up to `tokens` tokens of q_heads heads and `stride` keys,
// in buf's tile buffers.
LaneTileLog TileLog(AttentionScratch::LaneBuffers& buf, int tokens, int q_heads, size_t stride) {
  LaneTileLog log;
  log.stride = stride;
  log.blocks = static_cast<int>((stride + attn::kBlock - 1) / attn::kBlock);
  const size_t rows = static_cast<size_t>(tokens) * q_heads;
  if (buf.tile_p.size() < rows * stride) buf.tile_p.resize(rows * stride);
  if (buf.tile_mb.size() < rows * log.blocks) buf.tile_mb.resize(rows * log.blocks);
  if (buf.tile_ml.size() < 2 * rows) buf.tile_ml.resize(2 * rows);
  if (buf.tile_w.size() < tokens * stride) buf.tile_w.resize(tokens * stride);
  log.p = buf.tile_p.data(), log.mb = buf.tile_mb.data();
  log.m = buf.tile_ml.data(), log.l = log.m + rows;
  return log;
}

// want[i]: whether the policy reads token i's weights, for the run's tokens
// (asked once all of them are admitted).
void RunWants(const KvLaneHooks& hooks, const KvCells& cells, int lane, const KvPlan& plan,
              int run, std::vector<uint8_t>& want) {
  want.resize(run);
  for (int i = 0; i < run; ++i) want[i] = hooks.WantsWeights(cells, lane, i, plan);
}

// Tokens per tile: the tile folds' most, fewer when the log would pass
// kLaneLogFloats.
int TileTokens(int run, int max_tile, int q_heads, size_t stride) {
  const size_t per_token = static_cast<size_t>(q_heads) * stride;
  const int fit = static_cast<int>(std::max<size_t>(1, kLaneLogFloats / per_token));
  return std::max(1, std::min({run, max_tile, AttentionScratch::kTileTokens, fit}));
}

// Token u's weights over its first n_keys keys, summed over the log's
// q_heads heads: exp(score - m_block) exp(m_block - m) / l.
void TileWeights(const LaneTileLog& log, int u, int q_heads, int n_keys, float* w) {
  std::fill(w, w + n_keys, 0.f);
  for (int h = 0; h < q_heads; ++h) {
    const size_t row = static_cast<size_t>(u) * q_heads + h;
    const float* p = log.p + row * log.stride;
    const float* mb = log.mb + row * log.blocks;
    const float inv = log.l[row] > 0.f ? 1.0f / log.l[row] : 0.f;
    for (int k0 = 0; k0 < n_keys; k0 += attn::kBlock) {
      const float f = std::exp(mb[k0 / attn::kBlock] - log.m[row]) * inv;
      for (int k = k0; k < std::min(n_keys, k0 + attn::kBlock); ++k) w[k] += p[k] * f;
    }
  }
}

// A lane's run [0, run) on one thread, all its heads (AttendLanes): every
// BeforeToken, then tiles of tokens, each token's weights and AfterToken.
void TileLane(const AttentionArgs& a, const Cut& cut, AttentionScratch& scratch, int thread,
              KvPlan& plan, int lane, int h0, int h1, int run) {
  KvCells& cells = *a.cache->cells;
  KvLaneHooks& hooks = *plan.hooks;
  for (int i = 0; i < run; ++i) hooks.BeforeToken(cells, lane, i, plan);
  const LaneHeads lh(a, cut, cells, lane, h0, h1);
  const int q_heads = lh.args.n_head;
  const size_t stride = static_cast<size_t>(cells.hi(lane));  // every key of the run is a cell
  AttentionScratch::LaneBuffers& buf = scratch.lanes(thread, stride, 1, q_heads);
  const int n_base = RunKeys(cells, lane, plan, run, buf.key_cells.data());
  RunWants(hooks, cells, lane, plan, run, buf.want);
  const int tile = TileTokens(run, scratch.max_tile(), q_heads, stride);
  LaneTileLog log = TileLog(buf, tile, q_heads, stride);
  for (int t0 = 0; t0 < run; t0 += tile) {
    const int nt = std::min(tile, run - t0);
    log.want = buf.want.data() + t0;
    RunLaneTile(lh.args, lh.cut, scratch, thread, t0, nt, log);
    for (int u = 0; u < nt; ++u) {
      const int n_keys = n_base + t0 + u + 1;
      if (log.want[u]) TileWeights(log, u, q_heads, n_keys, buf.weights.data());
      hooks.AfterToken(cells, lane, t0 + u, std::span<const int32_t>(buf.key_cells.data(), n_keys),
                       std::span<const float>(buf.weights.data(), log.want[u] ? n_keys : 0), plan);
    }
  }
}

// Whether the tokens after each lane's run (from[g]) go through replayed
// tiles (LaneReplay): the tile folds are there, and no lane has only a few.
bool Replays(const KvPlan& plan, const Cut& cut, const AttentionScratch& scratch,
             const std::vector<int>& from) {
  if (!(cut.avx2 || cut.avx512) || scratch.max_tile() <= 0 || scratch.replay_limit() < 0.f)
    return false;
  bool any = false;
  for (const int f : from) {
    const int rest = plan.n_tokens - f;
    if (rest > 0 && rest < kMinLaneRun) return false;
    any |= rest > 0;
  }
  return any;
}

// Tokens per replayed tile of a lane whose heads are q_heads query heads.
int ReplayTile(const KvCells& cells, int lane, const KvPlan& plan, int from,
               const AttentionScratch& scratch, int q_heads) {
  const size_t stride = static_cast<size_t>(cells.hi(lane)) + AttentionScratch::kTileTokens;
  return TileTokens(plan.n_tokens - from, scratch.max_tile(), q_heads, stride);
}

// A lane's tokens [from, n) in replayed tiles on one thread, its kv heads
// [h0, h1) of the layer.
void ReplayLane(const AttentionArgs& a, const Cut& cut, AttentionScratch& scratch, int thread,
                KvPlan& plan, int lane, int h0, int h1, int from) {
  const KvCells& cells = *a.cache->cells;
  const int q_heads = (h1 - h0) * (a.n_head / a.n_head_kv);
  const int tile = ReplayTile(cells, lane, plan, from, scratch, q_heads);
  LaneReplay rp(a, cut, plan, lane, scratch.replay_limit());
  LaneReplay::Piece piece;
  piece.k0 = h0, piece.k1 = h1;
  for (int t0 = from; t0 < plan.n_tokens; t0 += tile) {
    const int nt = std::min(tile, plan.n_tokens - t0);
    const size_t stride = rp.Begin(t0, nt);
    piece.log = TileLog(scratch.lanes(thread, cells.hi(lane), 1, q_heads), nt, q_heads, stride);
    piece.log.replay = true;
    rp.Fold(scratch, thread, piece);
    rp.Replay(scratch, thread, std::span<const LaneReplay::Piece>(&piece, 1));
  }
}

// A layer's only lane (tova) on several threads: token by token, the hook
// before it on this thread, then the lane's kv heads split among the threads
// (each folds its heads over the lane's cells and sums its heads' weights),
// then the partial weights added and the hook after it.
void AttendLayerLane(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan,
                     AttentionScratch& scratch, const AttentionScratch::Cut& cut, bool replay) {
  const KvLayerView& view = *a.cache;
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  const int lane = view.first_lane;
  const int group = a.n_head / a.n_head_kv;
  const int32_t n_cells = view.n_cells, n = plan.n_tokens;
  const int n_pieces = std::min(pool.size(), view.lane_heads);
  // Piece p's buffers: its scores and weights; piece 0's key_cells hold the keys.
  std::vector<AttentionScratch::LaneBuffers*> bufs(n_pieces);
  for (int p = 0; p < n_pieces; ++p) bufs[p] = &scratch.lanes(p, n_cells, 1, a.n_head);
  int32_t* keys = bufs[0]->key_cells.data();
  // Tokens [0, run) in tiles: every BeforeToken, then per tile each piece
  // folds its heads and sums their weights, and the pieces' weights are
  // added before each token's AfterToken.
  const int run = LaneRun(hooks, cells, lane, plan, cut, scratch.max_tile());
  if (run > 0) {
    for (int i = 0; i < run; ++i) hooks.BeforeToken(cells, lane, i, plan);
    const size_t stride = static_cast<size_t>(cells.hi(lane));
    const int n_base = RunKeys(cells, lane, plan, run, keys);
    const std::vector<uint8_t>& want = bufs[0]->want;
    RunWants(hooks, cells, lane, plan, run, bufs[0]->want);
    const int tile = TileTokens(run, scratch.max_tile(), a.n_head, stride);
    for (int t0 = 0; t0 < run; t0 += tile) {
      const int nt = std::min(tile, run - t0);
      pool.Run(n_pieces, [&](int p, int thread) {
        const int k0 = view.lane_heads * p / n_pieces, k1 = view.lane_heads * (p + 1) / n_pieces;
        const LaneHeads lh(a, cut, cells, lane, k0, k1);
        LaneTileLog log = TileLog(*bufs[p], tile, lh.args.n_head, stride);
        log.want = want.data() + t0;
        RunLaneTile(lh.args, lh.cut, scratch, thread, t0, nt, log);
        for (int u = 0; u < nt; ++u)
          if (log.want[u])
            TileWeights(log, u, lh.args.n_head, n_base + t0 + u + 1,
                        bufs[p]->tile_w.data() + u * stride);
      });
      for (int u = 0; u < nt; ++u) {
        const int n_keys = n_base + t0 + u + 1, n_weights = want[t0 + u] ? n_keys : 0;
        float* weights = bufs[0]->tile_w.data() + u * stride;
        for (int p = 1; p < n_pieces; ++p)
          for (int k = 0; k < n_weights; ++k) weights[k] += bufs[p]->tile_w[u * stride + k];
        hooks.AfterToken(cells, lane, t0 + u, std::span<const int32_t>(keys, n_keys),
                         std::span<const float>(weights, n_weights), plan);
      }
    }
  }
  // The rest in replayed tiles: each piece folds its heads, then the tokens
  // are replayed on this thread.
  if (replay && run < n) {
    const int tile = ReplayTile(cells, lane, plan, run, scratch, a.n_head);
    LaneReplay rp(a, cut, plan, lane, scratch.replay_limit());
    std::vector<LaneReplay::Piece> pieces(n_pieces);
    for (int t0 = run; t0 < n; t0 += tile) {
      const int nt = std::min(tile, n - t0);
      const size_t stride = rp.Begin(t0, nt);
      for (int p = 0; p < n_pieces; ++p) {
        LaneReplay::Piece& pc = pieces[p];
        pc.k0 = view.lane_heads * p / n_pieces, pc.k1 = view.lane_heads * (p + 1) / n_pieces;
        pc.log = TileLog(*bufs[p], nt, (pc.k1 - pc.k0) * group, stride);
        pc.log.replay = true;
      }
      pool.Run(n_pieces, [&](int p, int thread) { rp.Fold(scratch, thread, pieces[p]); });
      rp.Replay(scratch, 0, pieces);
    }
    return;
  }
  for (int i = run; i < n; ++i) {
    hooks.BeforeToken(cells, lane, i, plan);
    const bool want = hooks.WantsWeights(cells, lane, i, plan);
    const TextIndex* index = cells.lane_index(lane);
    int n_keys = 0;
    for (int32_t c = 0; c < cells.hi(lane); ++c)
      if (index[c] >= 0) keys[n_keys++] = c;
    pool.Run(n_pieces, [&](int p, int thread) {
      const int k0 = view.lane_heads * p / n_pieces, k1 = view.lane_heads * (p + 1) / n_pieces;
      FoldLaneToken(a, cut, plan, lane, scratch.thread(thread), *bufs[p], i, keys, n_keys, k0, k1,
                    want ? bufs[p]->weights.data() : nullptr);
    });
    const int n_weights = want ? n_keys : 0;
    float* weights = bufs[0]->weights.data();
    for (int p = 1; p < n_pieces; ++p)
      for (int k = 0; k < n_weights; ++k) weights[k] += bufs[p]->weights[k];
    hooks.AfterToken(cells, lane, i, std::span<const int32_t>(keys, n_keys),
                     std::span<const float>(weights, n_weights), plan);
  }
}

}  // namespace

// Token i of a lane alone over its keys (cells, in that order), the layer's
// kv heads [k0, k1) by the one-token folds on one thread: writes their output
// rows and, when `weights` is not null, the keys' probabilities summed over
// those heads (buf's scores as scratch).
void FoldLaneToken(const AttentionArgs& a, const AttentionScratch::Cut& cut, const KvPlan& plan,
                   int lane, const AttentionScratch::Thread& th,
                   AttentionScratch::LaneBuffers& buf, int i, const int32_t* keys, int n_keys,
                   int k0, int k1, float* weights) {
  const KvLayerView& view = *a.cache;
  const KvCells& cells = *view.cells;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int q_heads = (k1 - k0) * group;
  const size_t k_col = static_cast<size_t>(k0) * KvHeadBytes(view.types.k, hd);
  const size_t v_col = static_cast<size_t>(k0) * KvHeadBytes(view.types.v, hd);
  attn::FoldState st = MakeFoldState(a, th, q_heads, k1 - k0, k0);
  st.q = a.q + i * a.q_stride + static_cast<int64_t>(k0) * group * hd;
  st.q8_of = st.qp_of = nullptr;
  std::fill(st.m, st.m + q_heads, -std::numeric_limits<float>::infinity());
  std::fill(st.l, st.l + q_heads, 0.f);
  std::fill(st.acc, st.acc + static_cast<size_t>(q_heads) * hd, 0.f);
  const TextIndex* index = cells.lane_index(lane);
  const int32_t* pos = cells.lane_pos(lane);
  attn::KeyBlock block;
  SetBlockTypes(view, hd, block);
  for (int k = 0; k < n_keys;) {
    int far_used = 0;
    block.n = 0;
    const int first = k;
    for (; k < n_keys && block.n < attn::kBlock; ++k) {
      const int32_t c = keys[k];
      const int b = block.n++;
      SetLaneKey(a, cut, plan, i, c, index[c], pos[c], k_col, v_col, th.far, &far_used, block, b);
    }
    FoldWith(cut, st, block);
    for (int h = 0; h < q_heads && weights != nullptr; ++h)
      std::copy(st.scores + h * attn::kBlock, st.scores + h * attn::kBlock + block.n,
                buf.scores.data() + h * buf.stride + first);
  }
  WriteHeads(st, a.out + i * a.out_stride + static_cast<int64_t>(k0) * group * hd);
  if (weights != nullptr)
    LaneWeightsOf(ActiveIsa())(buf.scores.data(), buf.stride, q_heads, n_keys, st.m, st.l, weights);
}

// A thread runs a contiguous range of the layer's lanes in lockstep: for each
// token, every lane's BeforeToken, then the cells block by block with every
// lane of the range folding its slice of the block's rows (LaneRange), then
// every lane's weights and AfterToken. Lanes stay independent: each has its
// own fold state, keys and hooks' calls in token order. Tokens whose lanes
// reach many cells are folded in splits of the cells instead
// (AttendLanesSplit), and a lane's tokens taken without evicting in tiles
// (TileLane).
void AttendLanes(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan, AttentionScratch& scratch,
                 const AttentionScratch::Cut& cut) {
  const KvLayerView& view = *a.cache;
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  // Lane l's tokens before from[l] are folded in tiles (TileLane).
  std::vector<int> from(view.n_lanes);
  int32_t hi = 0;
  for (int g = 0; g < view.n_lanes; ++g) {
    const int lane = view.first_lane + g;
    from[g] = LaneRun(hooks, cells, lane, plan, cut, scratch.max_tile());
    hi = std::max(hi, cells.hi(lane));
  }
  const bool replay = Replays(plan, cut, scratch, from);
  const bool tiles = replay || *std::max_element(from.begin(), from.end()) > 0;
  // Splits where the cache already holds many cells (a prompt that starts
  // small runs its tokens in lane ranges: two pool jobs a token would cost
  // more than its few cells).
  if (!tiles && LaneSplits(hi, scratch.lane_split_cells()) > 1)
    return AttendLanesSplit(pool, a, plan, scratch, cut);
  if (view.n_lanes == 1 && view.lane_heads > 1 && pool.size() > 1)
    return AttendLayerLane(pool, a, plan, scratch, cut, replay);
  const int group = a.n_head / a.n_head_kv;
  const int q_heads = view.lane_heads * group;
  const int n = plan.n_tokens;
  const LaneWeightsFn lane_weights = LaneWeightsOf(ActiveIsa());
  const int n_ranges = std::min(pool.size(), view.n_lanes);

  pool.Run(n_ranges, [&](int r, int thread) {
    // Lanes [g0, g1) of the layer.
    const int g0 = view.n_lanes * r / n_ranges, g1 = view.n_lanes * (r + 1) / n_ranges;
    const int nl = g1 - g0;
    AttentionScratch::LaneBuffers& buf = scratch.lanes(thread, view.n_cells, nl, q_heads);
    for (int l = 0; l < nl; ++l)
      if (from[g0 + l] > 0)
        TileLane(a, cut, scratch, thread, plan, view.first_lane + g0 + l,
                 (g0 + l) * view.lane_heads, (g0 + l + 1) * view.lane_heads, from[g0 + l]);
    if (replay) {
      for (int l = 0; l < nl; ++l)
        if (from[g0 + l] < n)
          ReplayLane(a, cut, scratch, thread, plan, view.first_lane + g0 + l,
                     (g0 + l) * view.lane_heads, (g0 + l + 1) * view.lane_heads, from[g0 + l]);
      return;
    }
    LaneRange lr(a, cut, scratch, thread, g0, nl);
    std::vector<int> n_keys(nl);
    std::vector<uint8_t> active(nl), want(nl);  // lane l folds (reads the weights of) this token
    for (int i = *std::min_element(from.begin() + g0, from.begin() + g1); i < n; ++i) {
      int32_t hi = 0;
      for (int l = 0; l < nl; ++l) {
        active[l] = i >= from[g0 + l];
        if (!active[l]) continue;
        const int lane = view.first_lane + g0 + l;
        hooks.BeforeToken(cells, lane, i, plan);
        want[l] = hooks.WantsWeights(cells, lane, i, plan);
        hi = std::max(hi, cells.hi(lane));
        lr.Begin(i, l);
        n_keys[l] = 0;
      }
      lr.Fold(plan, i, 0, hi, active.data(), want.data(), buf.key_cells.data(), buf.scores.data(),
              buf.stride, n_keys.data());
      for (int l = 0; l < nl; ++l) {
        if (!active[l]) continue;
        const int lane = view.first_lane + g0 + l;
        const attn::FoldState& s = lr.state(l);
        WriteHeads(s,
                   a.out + i * a.out_stride + static_cast<int64_t>(g0 + l) * q_heads * a.head_dim);
        const float* scores = buf.scores.data() + static_cast<size_t>(l) * q_heads * buf.stride;
        if (want[l])
          lane_weights(scores, buf.stride, q_heads, n_keys[l], s.m, s.l, buf.weights.data());
        hooks.AfterToken(cells, lane, i,
                         std::span<const int32_t>(buf.key_cells.data() + l * buf.stride, n_keys[l]),
                         std::span<const float>(buf.weights.data(), want[l] ? n_keys[l] : 0), plan);
      }
    }
  });
}

}  // namespace rotor
