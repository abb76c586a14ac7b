#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/attention_internal.h"
#include "base/check.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"
#include "ops/quant.h"
#include "ops/rope.h"

namespace rotor {

using attn::kBlock;
static_assert(AttentionScratch::kTileTokens <= attn::kTileMax);

AttentionScratch::AttentionScratch(int n_threads, int n_head, int n_head_kv, int head_dim)
    : n_threads_(n_threads), n_head_(n_head), head_dim_(head_dim) {
  // Slot 0 of a thread: every buffer of Thread; slots 1 and up (the other
  // tokens of a tile, which only the tile fold reads): the softmax state,
  // the scores, q_sink and far's first n_head floats (OffsetDots). After
  // the slots, each slot's quantized query for tiles (tq8, tqd, tqs), apart
  // from what decode reads.
  slot_ = static_cast<size_t>(n_head) * kBlock + 3 * static_cast<size_t>(n_head) +
          2 * static_cast<size_t>(n_head) * head_dim;
  slot_ = (slot_ + 15) / 16 * 16;
  const size_t n = static_cast<size_t>(n_head) * head_dim;
  tile_query_ = (2 * (n / 32) + (n + 3) / 4 + 15) / 16 * 16;
  slots_ = slot_ + 3 * head_dim + kBlock * 2 * head_dim + n_head * head_dim +
           static_cast<size_t>(n_head) * attn::PairStride(head_dim) + (n + 7) / 8 +
           (n_head * head_dim + 3) / 4 + 2 * kBlock * head_dim;
  slots_ = (slots_ + 15) / 16 * 16 + slot_ * (kTileTokens - 1);
  per_thread_ = slots_ + tile_query_ * kTileTokens;
  buf_.Resize(per_thread_ * n_threads);
  lanes_.resize(n_threads);
}

AttentionScratch::Thread AttentionScratch::thread(int t, int slot) {
  CHECK(slot >= 0 && slot < kTileTokens);
  float* const base = buf_.data() + per_thread_ * t;
  Thread th;
  float* q = base + slots_ + tile_query_ * slot;
  const size_t blocks = static_cast<size_t>(n_head_) * head_dim_ / 32;
  th.tqd = q, q += blocks;
  th.tqs = reinterpret_cast<int32_t*>(q), q += blocks;
  th.tq8 = reinterpret_cast<int8_t*>(q);
  float* p = base;
  if (slot > 0) p += slots_ - slot_ * (kTileTokens - slot);
  th.scores = p, p += static_cast<size_t>(n_head_) * kBlock;
  th.m = p, p += n_head_;
  th.l = p, p += n_head_;
  th.acc = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.q_sink = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.far = p, p += n_head_;
  if (slot > 0) return th;  // the rest stays null
  th.far = p, p += static_cast<size_t>(kBlock) * 2 * head_dim_;  // [kBlock, 2, head_dim]
  th.k_rot = p, p += head_dim_;
  th.cs = p, p += 2 * head_dim_;
  th.q8d = p, p += static_cast<size_t>(n_head_) * head_dim_;
  th.q8s = reinterpret_cast<int32_t*>(p), p += (static_cast<size_t>(n_head_) * head_dim_ + 7) / 8;
  th.qp = p, p += static_cast<size_t>(n_head_) * attn::PairStride(head_dim_);
  th.tile_k = p, p += static_cast<size_t>(kBlock) * head_dim_;
  th.tile_v = p, p += static_cast<size_t>(kBlock) * head_dim_;
  th.q8 = reinterpret_cast<int8_t*>(p);
  return th;
}

AttentionScratch::LaneBuffers& AttentionScratch::lanes(int thread, size_t max_keys, int n_lanes,
                                                       int q_heads) {
  LaneBuffers& b = lanes_[thread];
  if (b.stride < max_keys) {
    b.stride = max_keys;
    b.weights.resize(b.stride);
  }
  if (b.key_cells.size() < b.stride * n_lanes) b.key_cells.resize(b.stride * n_lanes);
  if (b.scores.size() < b.stride * n_lanes * q_heads) b.scores.resize(b.stride * n_lanes * q_heads);
  return b;
}

AttentionScratch::LaneBuffers AttentionScratch::ReplayCounts() const {
  LaneBuffers sum;
  for (const LaneBuffers& b : lanes_) {
    sum.replayed += b.replayed;
    sum.corrected += b.corrected;
    sum.alone += b.alone;
  }
  return sum;
}

uint8_t* AttentionScratch::ChunkBytes(size_t bytes) {
  if (chunk_bytes_.size() < bytes) chunk_bytes_.Resize(bytes);
  return chunk_bytes_.data();
}

float* AttentionScratch::QueryRot(size_t elements) {
  if (q_rot_.size() < elements) q_rot_.Resize(elements);
  return q_rot_.data();
}

float* AttentionScratch::PairQuery(size_t elements) {
  if (pair_query_.size() < elements) pair_query_.Resize(elements);
  return pair_query_.data();
}

float* AttentionScratch::Partials(int64_t n_tasks) {
  const size_t need = static_cast<size_t>(n_tasks) * n_head_ * (head_dim_ + 2);
  if (partials_.size() < need) partials_.Resize(need);  // grows to its bound once
  return partials_.data();
}

attn::FoldState MakeFoldState(const AttentionArgs& a, const AttentionScratch::Thread& th,
                              int n_head, int n_head_kv, int first_kv_head) {
  attn::FoldState st;
  if (a.cache->k_center != nullptr) {
    const size_t at = static_cast<size_t>(first_kv_head) * a.head_dim;
    st.k_center = a.cache->k_center + at;
    st.k_scale = a.cache->k_scale + at;
  }
  st.n_head = n_head;
  st.n_head_kv = n_head_kv;
  st.head_dim = a.head_dim;
  st.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  st.scores = th.scores;
  st.k_rot = th.k_rot;
  st.cs = th.cs;
  st.m = th.m;
  st.l = th.l;
  st.acc = th.acc;
  st.q8 = th.q8;
  st.q8d = th.q8d;
  st.q8s = th.q8s;
  st.qp = th.qp;
  if (a.rope != nullptr) {
    st.partner = a.rope->partner().data();
    st.normal_pairs = a.rope->config().layout == ops::RopeLayout::kNormal;
  }
  return st;
}

void SetFarRotation(const RopeDistanceTable& table, int64_t distance, attn::KeyBlock& block, int b,
                    float* far, int* far_used) {
  float* row = far + static_cast<size_t>((*far_used)++) * 2 * table.head_dim();
  table.Compute(distance, row, row + table.head_dim());
  block.cos[b] = row;
  block.sin[b] = row + table.head_dim();
}

void SetBlockTypes(const KvLayerView& view, int head_dim, attn::KeyBlock& block) {
  block.tk = static_cast<attn::Elem>(view.types.k);
  block.tv = static_cast<attn::Elem>(view.types.v);
  block.k_head_bytes = static_cast<int>(KvHeadBytes(view.types.k, head_dim));
  block.v_head_bytes = static_cast<int>(KvHeadBytes(view.types.v, head_dim));
  block.qblock = KvQuantBlock(head_dim);
}

namespace {

// Builds key blocks for one (tile of tokens, cell range) task and folds them.
// Each token fills blocks of its own visible keys, folded whenever kBlock
// have gathered and at its end, as a token alone would. The tile's tokens
// walk the keys in step: tokens that see the same keys (every cell of the
// cache, and the ubatch's own keys causally) fill the same blocks at the
// same time, folded together by one tile fold (FoldTileAvx2 or -Avx512) that decodes
// each K/V head once for all of them; a token whose keys differ is folded on
// its own by the same kernel. That kernel computes each token's row the same
// whatever else is in the tile, so a token's result depends on neither its
// tile nor how its sequence was cut into ubatches (prefix caching, chunked
// prefill, echo scoring agree with generation, bit for bit).
class TaskRunner {
 public:
  // `log`: a per-lane policy's tile (RunLaneTile): cells holding the
  // ubatch's tokens are left to the ubatch's own keys, and each member's
  // block of probabilities is kept after every fold.
  TaskRunner(const AttentionArgs& a, const AttentionScratch::Cut& cut, AttentionScratch& scratch,
             int thread, int n, const LaneTileLog* log = nullptr)
      : a_(a), cut_(cut), deferred_(a.cache->rope_k == RopeK::kDeferred), n_(n), log_(log) {
    CHECK(n >= 1 && n <= AttentionScratch::kTileTokens);
    CHECK(n == 1 || cut.tiled);  // slots 1 and up hold only what tiles read
    CHECK(log == nullptr || cut.tiled);
    for (int u = 0; u < n; ++u) {
      Token& tk = tokens_[u];
      tk.th = scratch.thread(thread, u);
      tk.state = MakeFoldState(a, tk.th, a.n_head, a.n_head_kv, 0);
      if (cut.tiled && cut.avx512) {  // integer scores of block-type keys (VNNI)
        tk.state.tq8 = tk.th.tq8;
        tk.state.tqd = tk.th.tqd;
        tk.state.tqs = tk.th.tqs;
      }
      SetBlockTypes(*a.cache, a.head_dim, tk.block);
    }
  }

  // Processes cells [c0, c1) (and the ubatch's own keys if `chunk`) for
  // tokens [i0, i0 + n).
  void Run(int i0, int32_t c0, int32_t c1, bool chunk) {
    bool any_two_pass = false, any_shifted = false;
    for (int u = 0; u < n_; ++u) {
      Begin(tokens_[u], i0 + u);
      any_two_pass |= tokens_[u].two_pass;
      any_shifted |= tokens_[u].shifted_sinks;
    }
    // Tiles whose tokens all see every cached cell the same way (a lane's,
    // or no window and no shifted sinks) fold those keys from one list.
    const bool shared =
        cut_.tiled && (log_ != nullptr || (a_.plan->visibility.window ==
                                               std::numeric_limits<TextIndex>::max() &&
                                           !any_shifted));
    const KvLayerView& cache = *a_.cache;
    for (int pass = 0; pass < (any_two_pass ? 2 : 1); ++pass) {
      for (int u = 0; u < n_; ++u) BeginPass(tokens_[u], pass);
      // The ubatch's own keys from `own` on are walked token by token below.
      const int own = shared ? SharedKeys(c0, c1) : 0;
      for (int32_t c = c0; c < c1 && !shared; ++c) {
        const TextIndex idx = cache.index[c];
        if (idx < 0) continue;
        const void* k = cache.KRow(c);
        const void* v = cache.VRow(c);
        for (int u = 0; u < n_; ++u)
          if (tokens_[u].active) Add(tokens_[u], k, v, cache.pos[c], idx);
        if (full_) FlushFull();
      }
      // The ubatch's own keys, j <= i for token i.
      const int last = chunk ? tokens_[n_ - 1].i : -1;
      for (int j = own; j <= last; ++j) {
        const void* k = cut_.chunk_k + j * cut_.chunk_k_row_bytes;
        const void* v = cut_.chunk_v + j * cut_.chunk_v_row_bytes;
        for (int u = 0; u < n_; ++u) {
          Token& tk = tokens_[u];
          if (!tk.active || tk.i < j) continue;
          Add(tk, k, v, a_.plan->pos[j], a_.plan->first + j);
          tk.done = tk.i == j;
        }
        if (full_) FlushFull();
      }
      FlushRest();
    }
  }

  // Token u's final softmax state.
  const attn::FoldState& state(int u) const { return tokens_[u].state; }

 private:
  struct Token {
    AttentionScratch::Thread th;
    attn::FoldState state;
    attn::KeyBlock block;
    int far_used = 0;
    // Deferred keys in tiles: each key's distance from this token (the
    // tile computes the rotation rows; RotateTile).
    int64_t dist[kBlock];
    int i = 0;  // in the ubatch
    TextIndex t = 0;
    int32_t pos_q = 0, delta = 0;
    bool shifted_sinks = false, two_pass = false;
    const float* q = nullptr;       // [n_head, head_dim]
    const float* q_sink = nullptr;  // [n_head, head_dim]
    // This pass: whether the token takes part, whether it is the sinks',
    // and whether its last key has been pushed.
    bool active = false, sink_pass = false, done = false;
    int folded = 0;  // keys folded so far (LaneTileLog)
  };

  void Begin(Token& tk, int i) {
    const KvPlan& plan = *a_.plan;
    const KvLayerView& cache = *a_.cache;
    const int hd = a_.head_dim, nh = a_.n_head;
    attn::FoldState& st = tk.state;
    tk.i = i;
    tk.folded = 0;
    tk.t = plan.first + i;
    tk.pos_q = plan.pos[i];
    tk.delta = plan.sink_delta[i];
    tk.q = a_.q + i * a_.q_stride;
    std::fill(st.m, st.m + nh, -std::numeric_limits<float>::infinity());
    std::fill(st.l, st.l + nh, 0.f);
    std::fill(st.acc, st.acc + static_cast<size_t>(nh) * hd, 0.f);
    // Sinks seen at a shifted distance form their own blocks: with cached keys
    // they need the query rotated back by the shift.
    tk.shifted_sinks = tk.delta != 0 && cache.keep > 0;
    tk.q_sink = tk.q;
    if (tk.shifted_sinks && !deferred_) {
      // q is rotated (Hadamard) when the keys are: back, RoPE-shifted, again.
      std::memcpy(tk.th.q_sink, tk.q, sizeof(float) * nh * hd);
      const int64_t n = static_cast<int64_t>(nh) * hd;
      if (cache.rotate_k) KvHadamard(tk.th.q_sink, n, KvQuantBlock(hd));
      if (cache.k_offset != nullptr) OffsetDots(tk, tk.th.q_sink, -1.f);  // before the shift: q
      ops::RopeShift(a_.rope->config(), tk.th.q_sink, nh, -tk.delta);
      if (cache.k_offset != nullptr) OffsetDots(tk, tk.th.q_sink, 1.f);  // after it: q_sink
      if (cache.rotate_k) KvHadamard(tk.th.q_sink, n, KvQuantBlock(hd));
      tk.q_sink = tk.th.q_sink;
    }
    tk.two_pass = tk.shifted_sinks && !deferred_;
  }

  void BeginPass(Token& tk, int pass) {
    tk.sink_pass = pass == 1;
    tk.active = pass == 0 || tk.two_pass;
    tk.done = false;
    if (!tk.active) return;
    if (tk.sink_pass && a_.cache->k_offset != nullptr)  // the pass-0 scores as the sinks' (below)
      for (int h = 0; h < a_.n_head; ++h) tk.state.m[h] -= tk.th.far[h];
    tk.state.q = tk.sink_pass ? tk.q_sink : tk.q;
    tk.state.q8_of = tk.state.qp_of = tk.state.tq_of = nullptr;
    tk.state.qp = tk.th.qp;  // the thread's own rows, written there when needed
    // Made before the tasks (PairQueries), read only here.
    if (cut_.pair_query != nullptr && !tk.sink_pass) {
      tk.state.qp =
          cut_.pair_query + static_cast<size_t>(tk.i) * a_.n_head * attn::PairStride(a_.head_dim);
      tk.state.qp_of = tk.state.q;
    }
  }

  void Add(Token& tk, const void* k, const void* v, int32_t pos_k, TextIndex idx) {
    if (!a_.plan->visibility.Visible(tk.t, idx)) return;
    const bool sink = idx < a_.cache->keep;
    if (tk.two_pass && sink != tk.sink_pass) return;
    const int64_t shift = tk.shifted_sinks && sink && deferred_ ? tk.delta : 0;
    Push(tk, k, v, static_cast<int64_t>(tk.pos_q) - pos_k - shift);
  }

  // Keys stored minus offsets m score q.k - q.m: a shift softmax ignores
  // while one query scores them all. The sinks' pass scores with q_sink,
  // shifted by q_sink.m instead; th.far[h] = scale * (q_sink - q).m of head
  // h, taken off the running max of the other keys' pass, puts both passes on
  // the sinks' shift (exact: m, l and acc then describe scores lowered by it).
  // Called with the unrotated q (sign -1, which starts the sums) and then
  // with q_sink (sign +1): [n_head, head_dim] each.
  void OffsetDots(Token& tk, const float* x, float sign) {
    const int hd = a_.head_dim, group = a_.n_head / a_.n_head_kv;
    for (int h = 0; h < a_.n_head; ++h) {
      const float* m = a_.cache->k_offset + static_cast<size_t>(h / group) * hd;
      const float* xh = x + static_cast<size_t>(h) * hd;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += xh[d] * m[d];
      tk.th.far[h] = (sign < 0 ? 0.f : tk.th.far[h]) + sign * tk.state.scale * dot;
    }
  }

  void Push(Token& tk, const void* k, const void* v, int64_t distance) {
    attn::KeyBlock& b = tk.block;
    const int n = b.n;
    b.k[n] = k;
    b.v[n] = v;
    b.cos[n] = b.sin[n] = b.cos2[n] = b.sin2[n] = nullptr;
    if (deferred_ && cut_.tiled)
      tk.dist[n] = distance;
    else if (deferred_)
      SetRotation(*a_.rope, distance, b, n, tk.th.far, &tk.far_used);
    if (++b.n < kBlock) return;
    if (cut_.tiled) full_ = true;  // folded with the tokens that share its keys
    else Flush(tk);
  }

  // Tiled: folds every full block, each with the blocks of the other tokens
  // that hold the same keys (full, or a prefix of a token that has no more).
  void FlushFull() {
    full_ = false;
    for (int u = 0; u < n_; ++u)
      if (tokens_[u].active && tokens_[u].block.n == kBlock) FoldGroup(tokens_[u], true);
  }

  // The blocks left at the end of the pass, the longest first, each with
  // those that are its prefixes.
  void FlushRest() {
    for (;;) {
      Token* longest = nullptr;
      for (int u = 0; u < n_; ++u)
        if (tokens_[u].active && tokens_[u].block.n > 0 &&
            (longest == nullptr || tokens_[u].block.n > longest->block.n))
          longest = &tokens_[u];
      if (longest == nullptr) return;
      if (!cut_.tiled) {
        Flush(*longest);
        continue;
      }
      FoldGroup(*longest, false);
    }
  }

  // One tile fold of ref's block into ref and every token whose block is a
  // prefix of it (when `ready_only`: only those that are full or done).
  void FoldGroup(Token& ref, bool ready_only) {
    const attn::KeyBlock& rb = ref.block;
    attn::Tile tile;
    Token* members[AttentionScratch::kTileTokens];
    for (int u = 0; u < n_; ++u) {
      Token& tk = tokens_[u];
      const attn::KeyBlock& b = tk.block;
      if (!tk.active || b.n == 0 || b.n > rb.n) continue;
      if (ready_only && b.n < kBlock && !tk.done) continue;
      bool prefix = true;
      for (int j = 0; j < b.n && prefix; ++j)
        prefix = b.k[j] == rb.k[j] && b.v[j] == rb.v[j] &&
                 (!deferred_ || tk.dist[j] - tk.dist[0] == ref.dist[j] - ref.dist[0]);
      if (!prefix) continue;
      members[tile.n] = &tk;
      tile.s[tile.n] = &tk.state;
      tile.n_keys[tile.n++] = b.n;
    }
    FoldMembers(ref, tile, members);
  }

  // Shared tiles (Run): every token of the tile sees every cell that
  // holds an earlier token and the ubatch's own tokens before the tile's
  // first, so each full block of those keys is folded once for the whole
  // tile from one key list (the blocks each token's own walk would make, at
  // a tile's cost rather than a key's per token); the last few (fewer than
  // kBlock) are added token by token, the tile's own keys after them. A
  // replayed tile's shared keys are every occupied cell (LaneTileLog::replay).
  // Returns the first own key left to the token-by-token walk.
  int SharedKeys(int32_t c0, int32_t c1) {
    const KvLayerView& cache = *a_.cache;
    Shared sh;
    const bool replay = log_ != nullptr && log_->replay;
    for (int32_t c = c0; c < c1; ++c) {
      const TextIndex idx = cache.index[c];
      if (idx < 0) continue;
      if (idx < a_.plan->first) {
        sh.Push(cache.KRow(c), cache.VRow(c), cache.pos[c], idx);
      } else if (replay) {  // an earlier token of the ubatch, still held
        const int64_t j = idx - a_.plan->first;
        sh.Push(cut_.chunk_k + j * cut_.chunk_k_row_bytes,
                cut_.chunk_v + j * cut_.chunk_v_row_bytes, cache.pos[c], idx);
      } else {
        continue;
      }
      if (sh.n == kBlock) FoldShared(sh);
    }
    const int i0 = tokens_[0].i;
    for (int j = 0; j < i0 && !replay; ++j) {
      sh.Push(cut_.chunk_k + j * cut_.chunk_k_row_bytes, cut_.chunk_v + j * cut_.chunk_v_row_bytes,
              a_.plan->pos[j], a_.plan->first + j);
      if (sh.n == kBlock) FoldShared(sh);
    }
    for (int j = 0; j < sh.n; ++j)
      for (int u = 0; u < n_; ++u) Add(tokens_[u], sh.k[j], sh.v[j], sh.pos[j], sh.idx[j]);
    return i0;
  }

  // Keys every token of a lane tile takes (SharedKeys), up to a block.
  struct Shared {
    const void* k[kBlock];
    const void* v[kBlock];
    int32_t pos[kBlock];
    TextIndex idx[kBlock];
    int n = 0;
    void Push(const void* kr, const void* vr, int32_t p, TextIndex i) {
      k[n] = kr, v[n] = vr, pos[n] = p, idx[n] = i;
      ++n;
    }
  };

  // One full block of keys every token of the tile takes, in token 0's block.
  void FoldShared(Shared& sh) {
    Token& ref = tokens_[0];
    attn::KeyBlock& b = ref.block;
    CHECK(b.n == 0 && sh.n == kBlock);
    for (int j = 0; j < kBlock; ++j) {
      b.k[j] = sh.k[j];
      b.v[j] = sh.v[j];
      b.cos[j] = b.sin[j] = b.cos2[j] = b.sin2[j] = nullptr;
      if (deferred_) ref.dist[j] = static_cast<int64_t>(ref.pos_q) - sh.pos[j];
    }
    b.n = kBlock;
    attn::Tile tile;
    Token* members[AttentionScratch::kTileTokens];
    for (int u = 0; u < n_; ++u) {
      Token& tk = tokens_[u];
      CHECK(tk.active && (u == 0 || tk.block.n == 0));
      if (deferred_) tk.dist[0] = static_cast<int64_t>(tk.pos_q) - sh.pos[0];
      members[tile.n] = &tk;
      tile.s[tile.n] = &tk.state;
      tile.n_keys[tile.n++] = kBlock;
    }
    FoldMembers(ref, tile, members);
    sh.n = 0;
  }

  // The tile fold of ref's block into the tile's members (tile.s, n_keys).
  void FoldMembers(Token& ref, attn::Tile& tile, Token* const* members) {
    const attn::KeyBlock& rb = ref.block;
    tile.kt = tokens_[0].th.tile_k;
    tile.vf = tokens_[0].th.tile_v;
    if (deferred_) RotateTile(ref, members, tile.n);
    if (cut_.avx512)
      attn::FoldTileAvx512(tile, rb);
    else if (cut_.avx2)
      attn::FoldTileAvx2(tile, rb);
    else
      attn::FoldTileScalar(tile, rb);
    for (int m = 0; m < tile.n; ++m) {
      if (log_ != nullptr) Log(*members[m], tile.n_keys[m]);
      members[m]->block.n = 0;
      if (deferred_) members[m]->state.q = members[m]->q;  // RotateTile's is for this block only
    }
  }

  // A member's probabilities of the n keys just folded, and each head's max.
  void Log(Token& tk, int n) {
    CHECK(tk.folded % kBlock == 0);  // only a token's last block is short
    const int u = static_cast<int>(&tk - tokens_), nh = a_.n_head;
    if (log_->want != nullptr && !log_->want[u]) {
      tk.folded += n;
      return;
    }
    CHECK(tk.folded + n <= static_cast<int>(log_->stride));
    for (int h = 0; h < nh; ++h) {
      const size_t row = static_cast<size_t>(u) * nh + h;
      std::copy(tk.state.scores + h * kBlock, tk.state.scores + h * kBlock + n,
                log_->p + row * log_->stride + tk.folded);
      log_->mb[row * log_->blocks + tk.folded / kBlock] = tk.state.m[h];
    }
    tk.folded += n;
  }

  // Deferred keys in a tile. A token scores key j as <q, R(-d_j) k_j>
  // (d_j: its distance), and R(-d_j) = R(-d_0) R(d_0 - d_j), so it is
  // <R(d_0) q, R(d_0 - d_j) k_j>. d_0 - d_j, the key's position after the
  // block's first key, is the same for every member (FoldGroup groups only
  // those): the block carries rows R(d_0 - d_j) (= the table's row of
  // d_j - d_0), which the tile fold applies to each key once for all
  // members, and each member's query is rotated by R(d_0), its own distance
  // to the first key, into its q_sink buffer (deferred keys have no sinks'
  // pass). Both rows are relative, so the angles stay small at any text
  // position, and a token's rotated keys and query do not depend on the
  // other tokens of its tile. Per block that is one row per key and one
  // rotation of each member's query (2-3% of a deferred prefill's samples
  // at depth 4096, BENCHMARKS.md "Deferred keys in prefill tiles").
  void RotateTile(Token& ref, Token* const* members, int n_members) {
    const RopeDistanceTable& table = *a_.rope;
    const int hd = a_.head_dim, nh = a_.n_head;
    attn::KeyBlock& b = ref.block;
    float* rows = tokens_[0].th.far;  // [kBlock, 2, head_dim]
    for (int j = 0; j < b.n; ++j) {
      b.cos2[j] = b.sin2[j] = nullptr;
      const int64_t after = ref.dist[0] - ref.dist[j];       // cells in text order: j
      if (after >= 0 && after < RopeDistanceTable::kFine) {  // Row(-after), stored
        b.cos[j] = table.FineCos(after), b.sin[j] = table.FineSinNegated(after);
        continue;
      }
      float* row = rows + static_cast<size_t>(j) * 2 * hd;
      table.Row(-after, row, row + hd);
      b.cos[j] = row, b.sin[j] = row + hd;
    }
    // Tiles of deferred keys run only with normal pairs (ChooseFold), whose
    // lanes the rotation kernels pair as l and l ^ 1.
    CHECK(table.config().layout == ops::RopeLayout::kNormal);
    float cs[2 * 256];  // [2, head_dim]: R(d_0) as a table row (head_dim <= 256: ChooseFold)
    for (int m = 0; m < n_members; ++m) {
      Token& tk = *members[m];
      table.Row(-tk.dist[0], cs, cs + hd);
      float* q = tk.th.q_sink;  // [n_head, head_dim]
      attn::RotateRowsAvx2(cs, cs + hd, tk.q, nh, hd, q);  // tiles run on AVX2 or AVX-512 only
      tk.state.q = q;
    }
  }

  void Flush(Token& tk) {
    if (tk.block.n == 0) return;
    FoldWith(cut_, tk.state, tk.block);
    tk.block.n = 0;
    tk.far_used = 0;
  }

  const AttentionArgs& a_;
  const AttentionScratch::Cut& cut_;
  bool deferred_;
  int n_;
  const LaneTileLog* log_;
  bool full_ = false;  // tiled: some token's block is full
  Token tokens_[AttentionScratch::kTileTokens];
};

}  // namespace

namespace {

using Cut = AttentionScratch::Cut;

// The fold of this ubatch: the active ISA's (AVX-512: head size a multiple of
// 16; AVX2: of 8; up to 256, and deferred RoPE only with interleaved pairs),
// else the scalar one. AVX-512 machines take the AVX2 folds for the head
// sizes the AVX-512 folds do not (8, 24, 40, ...): with the scalar fold,
// stories260K's decode at depth 1000 spent 80% of its time in attention.
void ChooseFold(const AttentionArgs& a, Cut& c) {
  const bool deferred = a.cache->rope_k == RopeK::kDeferred;
  const bool normal = a.rope->config().layout == ops::RopeLayout::kNormal;
  const bool fits = a.head_dim <= 256 && (!deferred || normal);
  c.avx512 = fits && ActiveIsa() == Isa::kAvx512 && a.head_dim % 16 == 0;
  c.avx2 = fits && !c.avx512 && ActiveIsa() >= Isa::kAvx2 && a.head_dim % 8 == 0;
}

Cut CutOf(const ThreadPool& pool, const AttentionArgs& a, int max_tile) {
  const int32_t n_cells = a.cache->n_cells;
  const int n_tokens = a.plan->n_tokens;
  Cut c;
  ChooseFold(a, c);
  // Few tokens (decode steps): split the cells so every thread has work
  // (flash-decoding).
  const bool few = !a.prompt && n_tokens < 2 * pool.size();
  if (few && n_cells >= 256)
    c.splits = std::min<int>((4 * pool.size() + n_tokens - 1) / n_tokens, n_cells / 128);
  c.per_split = (n_cells + c.splits - 1) / c.splits;
  // Many tokens: tiles of tokens share each key's read, still two tasks or
  // more per thread.
  // Tiles need a fast fold (FoldTileAvx2, FoldTileAvx512 on AVX-512); deferred
  // keys are rotated in the tile relative to each block's first key
  // (TaskRunner::RotateTile). Few tokens
  // take the one-token folds at every depth, split or not: they read K and V
  // in place, where the tile fold decodes each K head to f32 first (a
  // quarter of a batch-8 decode step at depth 0 on AVX-512, for nothing
  // shared).
  c.tiled = !few && (c.avx2 || c.avx512) && max_tile > 0;
  if (c.tiled)
    c.tile = std::clamp(n_tokens / (2 * pool.size()), 1,
                        std::min(max_tile, AttentionScratch::kTileTokens));
  c.n_tasks = static_cast<int64_t>((n_tokens + c.tile - 1) / c.tile) * c.splits;
  return c;
}

// Where each ubatch's own K/V rows are read from: in place (f32 caches
// without rotation) or stored as the cache stores them (rounded, quantized,
// rotated), so they are the values the cache will hold.
void SetChunks(ThreadPool& pool, std::span<const AttentionArgs> batch, AttentionScratch& scratch,
               std::vector<Cut>& cuts) {
  auto in_place = [](const KvLayerView& v, bool is_v) {
    return (is_v ? v.types.v : v.types.k) == KvType::kF32 && !(is_v ? v.rotate_v : v.rotate_k) &&
           (is_v || (v.k_offset == nullptr && v.k_center == nullptr));
  };
  size_t bytes = 0;
  for (const AttentionArgs& a : batch)
    for (bool is_v : {false, true})
      if (!in_place(*a.cache, is_v))
        bytes += static_cast<size_t>(a.plan->n_tokens) * a.n_head_kv *
                     KvHeadBytes(is_v ? a.cache->types.v : a.cache->types.k, a.head_dim) +
                 64;
  // [sum of n_tokens x row of K and V] each ubatch's typed rows.
  uint8_t* buf = bytes > 0 ? scratch.ChunkBytes(bytes) : nullptr;
  std::vector<float> rot;  // [pool threads, n_head_kv * head_dim] a rotated row per thread
  for (size_t b = 0; b < batch.size(); ++b) {
    const AttentionArgs& a = batch[b];
    const KvLayerView& view = *a.cache;
    Cut& c = cuts[b];
    for (bool is_v : {false, true}) {
      const float* src = is_v ? a.v : a.k;
      const uint8_t** chunk = is_v ? &c.chunk_v : &c.chunk_k;
      size_t* row_bytes = is_v ? &c.chunk_v_row_bytes : &c.chunk_k_row_bytes;
      if (in_place(view, is_v)) {
        *chunk = reinterpret_cast<const uint8_t*>(src);
        *row_bytes = static_cast<size_t>(a.kv_stride) * sizeof(float);
        continue;
      }
      const KvType t = is_v ? view.types.v : view.types.k;
      const bool rotate = is_v ? view.rotate_v : view.rotate_k;
      const int64_t row = static_cast<int64_t>(a.n_head_kv) * a.head_dim;
      *row_bytes = a.n_head_kv * KvHeadBytes(t, a.head_dim);
      *chunk = buf;
      const float* offset = is_v ? nullptr : view.k_offset;  // [row], or none
      const float* center = is_v ? nullptr : view.k_center;  // [row], or none (with k_scale)
      if (rotate || offset != nullptr || center != nullptr)
        rot.resize(static_cast<size_t>(pool.size()) * row);
      uint8_t* out = buf;
      const size_t out_row = *row_bytes;
      auto store = [&](int64_t j0, int64_t j1, int thread) {
        float* r = rot.empty() ? nullptr : rot.data() + static_cast<size_t>(thread) * row;
        for (int64_t j = j0; j < j1; ++j) {
          const float* x = src + j * a.kv_stride;
          if (offset != nullptr) {  // as KvCache::Store: minus the offsets, then rotated
            for (int64_t e = 0; e < row; ++e) r[e] = x[e] - offset[e];
            x = r;
          }
          if (center != nullptr) {  // as KvCache::Store: deferred keys centered and scaled
            KvCenterKeys(x, center, view.k_scale, row, r);
            x = r;
          }
          if (rotate) {
            if (x != r) std::copy(x, x + row, r);
            KvHadamard(r, row, KvQuantBlock(a.head_dim));
            x = r;
          }
          uint8_t* dst = out + j * out_row;
          if (t == KvType::kF16)  // as KvCache::Store
            ops::F32ToF16Row(x, reinterpret_cast<uint16_t*>(dst), row);
          else
            KvQuantizeHeads(t, a.head_dim, a.n_head_kv, x, dst, KvRoundingOf(is_v));
        }
      };
      // A prompt's rows across the pool (the least-squares key scales cost
      // more than the attention of a short chunk); a decode step's one row here.
      if (a.plan->n_tokens >= 8)
        pool.ParallelFor(a.plan->n_tokens, 4, store);
      else
        store(0, a.plan->n_tokens, 0);
      buf += (a.plan->n_tokens * *row_bytes + 63) / 64 * 64;
    }
  }
}

// Task `task` of ubatch a: tile task / splits of its tokens over split
// task % splits of its cells.
void RunTask(const AttentionArgs& a, const Cut& c, int64_t task, AttentionScratch& scratch,
             int thread, float* partial) {
  const int nh = a.n_head, hd = a.head_dim;
  const int32_t n_cells = a.cache->n_cells;
  const int tile = static_cast<int>(task / c.splits), s = static_cast<int>(task % c.splits);
  const int i0 = tile * c.tile, n = std::min(c.tile, a.plan->n_tokens - i0);
  TaskRunner runner(a, c, scratch, thread, n);
  const int32_t c0 = std::min(n_cells, s * c.per_split), c1 = std::min(n_cells, c0 + c.per_split);
  runner.Run(i0, c0, c1, /*chunk=*/s == c.splits - 1);
  if (c.splits > 1) {  // one token
    const attn::FoldState& st = runner.state(0);
    std::memcpy(partial, st.m, sizeof(float) * nh);
    std::memcpy(partial + nh, st.l, sizeof(float) * nh);
    std::memcpy(partial + 2 * nh, st.acc, sizeof(float) * nh * hd);
    return;
  }
  for (int u = 0; u < n; ++u) WriteHeads(runner.state(u), a.out + (i0 + u) * a.out_stride);
}

}  // namespace

void RunLaneTile(const AttentionArgs& a, const Cut& c, AttentionScratch& scratch, int thread,
                 int i0, int n, const LaneTileLog& log) {
  const int nh = a.n_head;
  TaskRunner runner(a, c, scratch, thread, n, &log);
  runner.Run(i0, 0, a.cache->n_cells, /*chunk=*/true);
  for (int u = 0; u < n; ++u) {
    const attn::FoldState& st = runner.state(u);
    std::copy(st.m, st.m + nh, log.m + static_cast<size_t>(u) * nh);
    std::copy(st.l, st.l + nh, log.l + static_cast<size_t>(u) * nh);
    WriteHeads(st, a.out + (i0 + u) * a.out_stride);
  }
}

namespace {

// A token split over several tasks (decode) would have each task make its
// query's pair-product factors (the pool's 8 tasks of one token at 2
// threads: 8 times): for split ubatches of deferred block-type keys they are
// made here once per token, before the tasks, and each task reads them
// (Cut::pair_query). The same function on the same query: the same factors.
void PairQueries(std::span<const AttentionArgs> batch, AttentionScratch& scratch,
                 std::vector<Cut>& cuts) {
  const auto wants = [](const AttentionArgs& a, const Cut& c) {
    return c.splits > 1 && a.cache->rope_k == RopeK::kDeferred && a.head_dim % 32 == 0 &&
           attn::IsBlockType(static_cast<attn::Elem>(a.cache->types.k));
  };
  size_t total = 0;
  for (size_t b = 0; b < batch.size(); ++b)
    if (wants(batch[b], cuts[b]))
      total += static_cast<size_t>(batch[b].plan->n_tokens) * batch[b].n_head *
               attn::PairStride(batch[b].head_dim);
  if (total == 0) return;
  float* next = scratch.PairQuery(total);
  for (size_t b = 0; b < batch.size(); ++b) {
    const AttentionArgs& a = batch[b];
    if (!wants(a, cuts[b])) continue;
    cuts[b].pair_query = next;
    attn::FoldState st = MakeFoldState(a, scratch.thread(0), a.n_head, a.n_head_kv, 0);
    for (int i = 0; i < a.plan->n_tokens; ++i) {
      st.q = a.q + i * a.q_stride;
      st.qp = next;
      attn::PreparePairQuery(st);
      next += static_cast<size_t>(a.n_head) * attn::PairStride(a.head_dim);
    }
  }
}

// Merges the partial softmax states of each token's splits into a.out.
void MergeSplits(const AttentionArgs& a, const Cut& c, const float* partials) {
  const int nh = a.n_head, hd = a.head_dim, splits = c.splits;
  const size_t part_stride = static_cast<size_t>(nh) * (hd + 2);
  for (int i = 0; i < a.plan->n_tokens; ++i)
    for (int h = 0; h < nh; ++h) {
      float m, l;
      MergeHeadSplits(partials + static_cast<size_t>(i) * splits * part_stride, part_stride, splits,
                      nh, h, hd, a.out + i * a.out_stride + static_cast<int64_t>(h) * hd, &m, &l);
    }
}

// dst row i = src row i times H_block (KvHadamard), n rows of `row` floats
// (dst may be src); a prompt's rows across the pool.
void RotateRows(ThreadPool& pool, int n, int64_t row, int block, const float* src,
                int64_t src_stride, float* dst, int64_t dst_stride) {
  auto rotate = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* d = dst + i * dst_stride;
      if (d != src + i * src_stride) std::copy(src + i * src_stride, src + i * src_stride + row, d);
      KvHadamard(d, row, block);
    }
  };
  if (n >= 8)
    pool.ParallelFor(n, 4, rotate);
  else
    rotate(0, n, 0);
}

}  // namespace

void Attend(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  AttendBatch(pool, std::span<const AttentionArgs>(&a, 1), scratch);
}

void AttendBatch(ThreadPool& pool, std::span<const AttentionArgs> batch_in,
                 AttentionScratch& scratch) {
  CHECK_LE(pool.size(), scratch.n_threads());
  // Rotated keys (--kv-rotate, cached RoPE): the queries rotated alike, so
  // q.k is unchanged; rotated values: the outputs rotated back at the end.
  std::span<const AttentionArgs> batch = batch_in;
  size_t n_rot = 0;
  for (const AttentionArgs& a : batch_in)
    if (a.cache->rotate_k) n_rot += static_cast<size_t>(a.plan->n_tokens) * a.n_head * a.head_dim;
  if (n_rot > 0) {
    float* q = scratch.QueryRot(n_rot);  // [sum of n_tokens, n_head, head_dim]
    std::vector<AttentionArgs>& args = scratch.rotated_args();
    args.assign(batch_in.begin(), batch_in.end());
    for (AttentionArgs& a : args) {
      if (!a.cache->rotate_k) continue;
      const int64_t row = static_cast<int64_t>(a.n_head) * a.head_dim;
      RotateRows(pool, a.plan->n_tokens, row, KvQuantBlock(a.head_dim), a.q, a.q_stride, q, row);
      a.q = q, a.q_stride = row;
      q += a.plan->n_tokens * row;
    }
    batch = args;
  }
  std::vector<AttentionScratch::Cut>& cuts = scratch.cuts();
  cuts.assign(batch.size(), Cut{});
  int64_t n_tasks = 0, n_partials = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const AttentionArgs& a = batch[b];
    CHECK(a.rope != nullptr);
    CHECK(a.n_head == batch[0].n_head && a.head_dim == batch[0].head_dim);
    if (a.plan->hooks != nullptr) continue;  // per-lane policies: below, one ubatch at a time
    cuts[b] = CutOf(pool, a, scratch.max_tile());
    cuts[b].first_task = n_tasks;
    n_tasks += cuts[b].n_tasks;
    if (cuts[b].splits > 1) {
      cuts[b].first_partial = n_partials;
      n_partials += cuts[b].n_tasks;
    }
  }
  SetChunks(pool, batch, scratch, cuts);
  PairQueries(batch, scratch, cuts);
  if (n_tasks > 0) {
    const size_t part_stride = static_cast<size_t>(batch[0].n_head) * (batch[0].head_dim + 2);
    // [n_partials, part_stride]: the split tasks' softmax states.
    float* partials = n_partials > 0 ? scratch.Partials(n_partials) : nullptr;
    CHECK_LE(n_tasks, int64_t{1} << 30);
    pool.Run(static_cast<int>(n_tasks), [&](int task, int thread) {
      // The ubatch holding `task` (batches are small: a linear scan).
      size_t b = 0;
      while (cuts[b].n_tasks == 0 || task >= cuts[b].first_task + cuts[b].n_tasks) ++b;
      const Cut& c = cuts[b];
      const int64_t t = task - c.first_task;
      RunTask(batch[b], c, t, scratch, thread,
              c.splits > 1 ? partials + (c.first_partial + t) * part_stride : nullptr);
    });
    for (size_t b = 0; b < batch.size(); ++b)
      if (cuts[b].splits > 1)
        MergeSplits(batch[b], cuts[b], partials + cuts[b].first_partial * part_stride);
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].plan->hooks == nullptr) continue;
    ChooseFold(batch[b], cuts[b]);
    AttendLanes(pool, batch[b], *batch[b].plan, scratch, cuts[b]);
  }
  for (const AttentionArgs& a : batch) {
    if (!a.cache->rotate_v) continue;
    const int64_t row = static_cast<int64_t>(a.n_head) * a.head_dim;
    RotateRows(pool, a.plan->n_tokens, row, KvQuantBlock(a.head_dim), a.out, a.out_stride, a.out,
               a.out_stride);
  }
}

}  // namespace rotor
