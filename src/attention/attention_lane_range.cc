// Per-lane policies' lanes token by token (attention_lane_range.h): a thread's
// range of lanes folding blocks of cells together where they see the same
// keys, and a token's cells in splits over every lane.
#include "attention/attention_lane_range.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/attention_internal.h"
#include "base/check.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"

namespace rotor {

namespace {

using Cut = AttentionScratch::Cut;

constexpr int kMaxLaneSplits = 16;

// Whether lanes a and b see the same keys in cells [c0, c1): the same cells
// occupied, each read from the same row (the cache's row, whatever token each
// lane keeps there, or the ubatch's own row of the same token) and, under
// deferred RoPE, at the same position. Such lanes fold the block together.
bool SameBlockKeys(const KvCells& cells, int la, int lb, int32_t c0, int32_t c1, TextIndex first,
                   bool deferred) {
  const TextIndex* ia = cells.lane_index(la);
  const TextIndex* ib = cells.lane_index(lb);
  const int32_t* pa = cells.lane_pos(la);
  const int32_t* pb = cells.lane_pos(lb);
  // The same tokens in the same cells (an empty cell's index is -1 in every
  // lane), at the same positions: one comparison of the rows.
  const size_t n = static_cast<size_t>(c1 - c0);
  if (std::memcmp(ia + c0, ib + c0, n * sizeof(TextIndex)) == 0 &&
      (!deferred || std::memcmp(pa + c0, pb + c0, n * sizeof(int32_t)) == 0))
    return true;
  const int32_t ha = std::min(c1, cells.hi(la)), hb = std::min(c1, cells.hi(lb));
  for (int32_t c = c0; c < std::max(ha, hb); ++c) {
    const TextIndex x = c < ha ? ia[c] : -1, y = c < hb ? ib[c] : -1;
    if ((x < 0) != (y < 0)) return false;
    if (x < 0) continue;
    if ((x >= first || y >= first) && x != y) return false;
    if (deferred && pa[c] != pb[c]) return false;
  }
  return true;
}

}  // namespace

LaneRange::LaneRange(const AttentionArgs& a, const Cut& cut, AttentionScratch& scratch, int thread,
                     int g0, int nl)
    : a_(a),
      cut_(cut),
      view_(*a.cache),
      cells_(*view_.cells),
      g0_(g0),
      nl_(nl),
      group_lanes_(scratch.group_lanes()),
      th_(scratch.thread(thread)),
      st_(nl),
      q8_made_(nl),
      qp_made_(nl) {
  const int hd = a.head_dim;
  lane_heads_ = view_.lane_heads;
  q_heads_ = lane_heads_ * (a.n_head / a.n_head_kv);
  k_head_bytes_ = KvHeadBytes(view_.types.k, hd);
  v_head_bytes_ = KvHeadBytes(view_.types.v, hd);
  deferred_ = view_.rope_k == RopeK::kDeferred;
  SetBlockTypes(view_, hd, block_);
  // Lane l's state: its query heads' rows of the thread's state, laid out
  // as one state of lanes [l, e) has them (FoldState's layouts with
  // n_head = (e - l) * q_heads), so lanes folding a block together read
  // and write each lane's own rows.
  // The query's q8_0 blocks per head (none when the head size has no
  // block size: then the cache holds no block type).
  const size_t qb_per_head = block_.qblock > 0 ? hd / block_.qblock : 0;
  for (int l = 0; l < nl; ++l) {
    attn::FoldState& s = st_[l];
    s = MakeFoldState(a, th_, q_heads_, lane_heads_, (g0 + l) * lane_heads_);
    const size_t h0 = static_cast<size_t>(l) * q_heads_;  // the lane's first head in the thread
    s.scores = th_.scores + h0 * attn::kBlock;
    s.m = th_.m + h0;
    s.l = th_.l + h0;
    s.acc = th_.acc + h0 * hd;
    s.q8 = th_.q8 + h0 * hd;
    s.q8d = th_.q8d + h0 * qb_per_head * 8;
    s.q8s = th_.q8s + h0 * qb_per_head;
    s.qp = th_.qp + h0 * attn::PairStride(hd);
  }
}

// Starts token i in lane l: no key seen.
void LaneRange::Begin(int i, int l) {
  attn::FoldState& s = st_[l];
  s.q = a_.q + i * a_.q_stride + static_cast<int64_t>(g0_ + l) * q_heads_ * a_.head_dim;
  q8_made_[l] = qp_made_[l] = 0;
  std::fill(s.m, s.m + q_heads_, -std::numeric_limits<float>::infinity());
  std::fill(s.l, s.l + q_heads_, 0.f);
  std::fill(s.acc, s.acc + static_cast<size_t>(q_heads_) * a_.head_dim, 0.f);
}

void LaneRange::Fold(const KvPlan& plan, int i, int32_t c0, int32_t c1, const uint8_t* active,
                     const uint8_t* want, int32_t* keys, float* scores, size_t stride,
                     int* n_keys) {
  for (int32_t b0 = c0; b0 < c1; b0 += attn::kBlock) {
    const int32_t b1 = std::min(c1, b0 + attn::kBlock);
    for (int l = 0; l < nl_;) {
      if (!active[l]) {
        ++l;
        continue;
      }
      int32_t* lane_keys = keys + static_cast<size_t>(l) * stride;
      const int n0 = n_keys[l];
      n_keys[l] += Gather(plan, i, l, b0, b1, lane_keys + n0);
      const int n = n_keys[l] - n0;
      // Lanes [l, e) fold this block together: the next lanes that see
      // its keys take lane l's.
      int e = l + 1;
      for (; group_lanes_ && e < nl_ && active[e] &&
             SameBlockKeys(cells_, lane(l), lane(e), b0, b1, plan.first, deferred_);
           ++e) {
        std::copy(lane_keys + n0, lane_keys + n0 + n, keys + e * stride + n_keys[e]);
        n_keys[e] += n;
      }
      if (n > 0) {
        FoldLanes(l, e);
        for (int x = l; x < e; ++x) {
          if (!want[x]) continue;
          // The block's scores, kept for the weights.
          const float* from = st_[x].scores;
          float* to = scores + static_cast<size_t>(x) * q_heads_ * stride + n_keys[x] - n;
          for (int h = 0; h < q_heads_; ++h)
            std::copy(from + h * attn::kBlock, from + h * attn::kBlock + n, to + h * stride);
        }
      }
      l = e;
    }
  }
}

// Lane l's occupied cells of [b0, b1) into block_ (their rows, rotations)
// and `keys`; returns their count.
int LaneRange::Gather(const KvPlan& plan, int i, int l, int32_t b0, int32_t b1, int32_t* keys) {
  const TextIndex* index = cells_.lane_index(lane(l));
  const int32_t* pos = cells_.lane_pos(lane(l));
  const size_t k_col = static_cast<size_t>(g0_ + l) * lane_heads_ * k_head_bytes_;
  const size_t v_col = static_cast<size_t>(g0_ + l) * lane_heads_ * v_head_bytes_;
  int far_used = 0;
  block_.n = 0;
  for (int32_t c = b0; c < std::min(b1, cells_.hi(lane(l))); ++c) {
    const TextIndex idx = index[c];
    if (idx < 0) continue;
    CHECK(idx < plan.first || idx - plan.first <= i);  // the ubatch's own keys are causal
    const int b = block_.n++;
    SetLaneKey(a_, cut_, plan, i, c, idx, pos[c], k_col, v_col, th_.far, &far_used, block_, b);
    keys[b] = c;
  }
  return block_.n;
}

// Folds block_ into lanes [l, e) as one state of their heads; their
// query's quantized forms are made once per token for each lane.
void LaneRange::FoldLanes(int l, int e) {
  attn::FoldState s = st_[l];
  s.n_head = (e - l) * q_heads_;
  s.n_head_kv = (e - l) * lane_heads_;
  const auto made = [&](const std::vector<uint8_t>& v) {
    return std::all_of(v.begin() + l, v.begin() + e, [](uint8_t x) { return x != 0; });
  };
  s.q8_of = made(q8_made_) ? s.q : nullptr;
  s.qp_of = made(qp_made_) ? s.q : nullptr;
  FoldWith(cut_, s, block_);
  if (s.q8_of == s.q) std::fill(q8_made_.begin() + l, q8_made_.begin() + e, 1);
  if (s.qp_of == s.q) std::fill(qp_made_.begin() + l, qp_made_.begin() + e, 1);
}

int LaneSplits(int32_t hi, int32_t split_cells) {
  if (split_cells <= 0 || hi < 2 * split_cells) return 1;
  return std::min<int32_t>(kMaxLaneSplits, hi / split_cells);
}

void AttendLanesSplit(ThreadPool& pool, const AttentionArgs& a, KvPlan& plan,
                      AttentionScratch& scratch, const Cut& cut) {
  const KvLayerView& view = *a.cache;
  KvCells& cells = *view.cells;
  KvLaneHooks& hooks = *plan.hooks;
  const int hd = a.head_dim, n_lanes = view.n_lanes, n = plan.n_tokens;
  const int q_heads = view.lane_heads * (a.n_head / a.n_head_kv), nh = n_lanes * q_heads;
  const LaneWeightsFn lane_weights = LaneWeightsOf(ActiveIsa());
  // Every lane's keys and scores, split s's from its first cell on:
  // [n_lanes, stride] and [n_lanes * q_heads, stride].
  AttentionScratch::LaneBuffers& shared = scratch.lanes(0, view.n_cells, n_lanes, q_heads);
  const size_t stride = shared.stride;
  // Split s's softmax state: [kMaxLaneSplits, nh, hd + 2] (m, l, acc as MergeSplits reads them).
  const size_t part_stride = static_cast<size_t>(nh) * (hd + 2);
  float* partials = scratch.Partials(kMaxLaneSplits);
  std::vector<int> counts(static_cast<size_t>(kMaxLaneSplits) * n_lanes);  // [split, lane] keys
  std::vector<uint8_t> want(n_lanes), all(n_lanes, 1);
  std::vector<float> merged(2 * static_cast<size_t>(nh));  // [2, nh] each head's merged m, l
  const auto lane_of = [&](int g) { return view.first_lane + g; };
  for (int g = 0; g < n_lanes; ++g) {
    hooks.BeforeToken(cells, lane_of(g), 0, plan);
    want[g] = hooks.WantsWeights(cells, lane_of(g), 0, plan);
  }
  for (int i = 0; i < n; ++i) {
    int32_t hi = 0;
    for (int g = 0; g < n_lanes; ++g) hi = std::max(hi, cells.hi(lane_of(g)));
    const int splits = LaneSplits(hi, scratch.lane_split_cells());
    // Split s: cells [cell(s), cell(s + 1)), whole blocks but the last.
    const auto cell = [&](int s) {
      return s == splits
                 ? hi
                 : static_cast<int32_t>(int64_t{hi} * s / splits / attn::kBlock * attn::kBlock);
    };
    // Tasks: splits x ranges of lanes (one range of all lanes when the
    // splits alone keep the threads busy).
    const int ranges = std::clamp(pool.size() / splits, 1, n_lanes);
    pool.Run(splits * ranges, [&](int task, int thread) {
      const int s = task / ranges, r = task % ranges;
      const int g0 = n_lanes * r / ranges, g1 = n_lanes * (r + 1) / ranges;
      LaneRange lr(a, cut, scratch, thread, g0, g1 - g0);
      for (int l = 0; l < g1 - g0; ++l) lr.Begin(i, l);
      int* n_keys = &counts[static_cast<size_t>(s) * n_lanes + g0];
      std::fill(n_keys, n_keys + (g1 - g0), 0);
      lr.Fold(plan, i, cell(s), cell(s + 1), all.data(), want.data() + g0,
              shared.key_cells.data() + g0 * stride + cell(s),
              shared.scores.data() + static_cast<size_t>(g0) * q_heads * stride + cell(s), stride,
              n_keys);
      float* part = partials + s * part_stride;
      for (int l = 0; l < g1 - g0; ++l) {
        const attn::FoldState& st = lr.state(l);
        const int h0 = (g0 + l) * q_heads;
        std::copy(st.m, st.m + q_heads, part + h0);
        std::copy(st.l, st.l + q_heads, part + nh + h0);
        std::copy(st.acc, st.acc + static_cast<size_t>(q_heads) * hd, part + 2 * nh + h0 * hd);
      }
    });
    pool.Run(n_lanes, [&](int g, int thread) {
      const int h0 = g * q_heads;
      // The lane's splits' states merged: its heads' outputs, m and l.
      float* m = merged.data() + h0;
      float* l = merged.data() + nh + h0;
      for (int h = 0; h < q_heads; ++h)
        MergeHeadSplits(partials, part_stride, splits, nh, h0 + h, hd,
                        a.out + i * a.out_stride + static_cast<int64_t>(h0 + h) * hd, &m[h], &l[h]);
      // The splits' keys (and scores) moved together, in cell order.
      int32_t* keys = shared.key_cells.data() + g * stride;
      float* scores = shared.scores.data() + static_cast<size_t>(h0) * stride;
      int n_keys = 0;
      for (int s = 0; s < splits; ++s) {
        const int c = counts[static_cast<size_t>(s) * n_lanes + g], from = cell(s);
        if (c > 0 && from != n_keys) {
          std::copy(keys + from, keys + from + c, keys + n_keys);
          if (want[g])
            for (int h = 0; h < q_heads; ++h)
              std::copy(scores + h * stride + from, scores + h * stride + from + c,
                        scores + h * stride + n_keys);
        }
        n_keys += c;
      }
      float* weights = scratch.lanes(thread, view.n_cells, 1, q_heads).weights.data();
      if (want[g]) lane_weights(scores, stride, q_heads, n_keys, m, l, weights);
      hooks.AfterToken(cells, lane_of(g), i, std::span<const int32_t>(keys, n_keys),
                       std::span<const float>(weights, want[g] ? n_keys : 0), plan);
      if (i + 1 < n) {
        hooks.BeforeToken(cells, lane_of(g), i + 1, plan);
        want[g] = hooks.WantsWeights(cells, lane_of(g), i + 1, plan);
      }
    });
  }
}

}  // namespace rotor
