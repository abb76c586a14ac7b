// Attention of a ubatch of one sequence over its KV cache plus the ubatch's own
// keys and values (which the cache stores only after attention has read it, so
// a ring can be overwritten by the chunk that evicts its old contents).
//
// One kernel for every policy and RoPE mode: online softmax in blocks of keys
// (no [n_tokens x n_cells] score matrix); the query heads that share a KV head
// are processed together (each K row is read, and with deferred RoPE rotated,
// once per group); keys are chosen by the plan's visibility rule; with deferred
// RoPE each key is rotated on the fly by its distance to the query, from a
// cos/sin table, inside the score computation (no rotated copy of K). Decode
// (few tokens) splits the cells across threads and merges the partial softmax
// states (flash-decoding).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/rope_distance.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"

namespace rotor {

struct AttentionArgs {
  const float* q = nullptr;      // [n_tokens, n_head, head_dim], rows q_stride apart
  const float* k = nullptr;      // [n_tokens, n_head_kv, head_dim], rows kv_stride apart
  const float* v = nullptr;      // [n_tokens, n_head_kv, head_dim], rows kv_stride apart
  int64_t q_stride = 0;
  int64_t kv_stride = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  const KvLayerView* cache = nullptr;
  KvPlan* plan = nullptr;          // per-lane policies: the hooks attention calls
  // Deferred RoPE (cache->rope_k == kDeferred): q and k are not rotated; keys
  // are rotated by their distance to the query. Also used to rotate queries
  // for shifted sinks in cached mode.
  const RopeDistanceTable* rope = nullptr;
  float* out = nullptr;          // [n_tokens, n_head, head_dim], rows out_stride apart
  int64_t out_stride = 0;
  // Text given rather than sampled (SeqInput::prompt): never the decode
  // steps' cut (one-token folds, cells split across threads), whose rounding
  // differs from the tiles' for block-type K/V, so a prompt's tokens come out
  // the same however the prompt was cut.
  bool prompt = false;
};

// Working memory, sized once for a thread count, head layout and token count.
class AttentionScratch {
 public:
  AttentionScratch(int n_threads, int n_head, int n_head_kv, int head_dim);
  int n_threads() const { return n_threads_; }

  // Slot 0 has every buffer; slots 1 and up (tiles' other tokens) only
  // scores, m, l, acc, q_sink and far's first n_head floats, the rest null.
  struct Thread {
    float* scores = nullptr;  // [n_head, kBlock]
    float* k_rot = nullptr;   // [head_dim]
    float* cs = nullptr;      // [2, head_dim]
    float* q_sink = nullptr;  // [n_head, head_dim]
    float* far = nullptr;     // [kBlock, 2, head_dim] rotation rows computed on the fly
    float* m = nullptr;       // [n_head]
    float* l = nullptr;       // [n_head]
    float* acc = nullptr;     // [n_head, head_dim]
    int8_t* q8 = nullptr;     // [n_head, head_dim] the query quantized (block-type keys)
    float* q8d = nullptr;     // [n_head, head_dim] its blocks' scales (FoldState::q8d)
    int32_t* q8s = nullptr;   // [n_head, head_dim / 8] its blocks' sums (FoldState::q8s)
    float* qp = nullptr;      // [n_head, 2 * head_dim + 16] pair products' query (FoldState::qp)
    float* tile_k = nullptr;  // [head_dim, kBlock] a K head of a key block, decoded (attn::Tile)
    float* tile_v = nullptr;  // [kBlock, head_dim] a V head of a key block, decoded
    // A tile token's query in q8_0 blocks of 32 (attn::FoldState::tq8).
    int8_t* tq8 = nullptr;    // [n_head, head_dim]
    float* tqd = nullptr;     // [n_head, head_dim / 32]
    int32_t* tqs = nullptr;   // [n_head, head_dim / 32]
  };
  // Slot `slot` (< kTileTokens) of thread t: one query token of a tile.
  Thread thread(int t, int slot = 0);
  static constexpr int kTileTokens = 32;  // query tokens folded over the same keys
  // At most n (1 to kTileTokens) tokens per tile; 0: no tiles, every token
  // folded alone by the one-token folds, as split decode (benchmarks compare
  // the two).
  void set_max_tile(int n) { max_tile_ = n; }
  int max_tile() const { return max_tile_; }
  // Per-lane policies: neighbouring lanes that see the same keys in a block
  // fold it together (attention_lanes.cc); false: each lane alone, the same
  // bits (tests compare the two).
  void set_group_lanes(bool on) { group_lanes_ = on; }
  bool group_lanes() const { return group_lanes_; }
  // Per-lane policies: a token whose lanes reach twice this many cells or
  // more is folded in splits of about this many cells, each over every lane
  // (attention_lanes.cc); 0: never (each lane range over all its cells).
  void set_lane_split_cells(int32_t n) { lane_split_cells_ = n; }
  int32_t lane_split_cells() const { return lane_split_cells_; }
  // Per-lane policies' tokens that may evict are folded in tiles and replayed
  // (LaneReplay, attention_lane_replay.cc); a token whose keys evicted
  // within its tile held more than this share of a head's probability is
  // folded again alone. Negative: no such tiles, token by token.
  void set_replay_limit(float limit) { replay_limit_ = limit; }
  float replay_limit() const { return replay_limit_; }
  // Partial softmax states of split tasks: [n_tasks, n_head, head_dim + 2].
  float* Partials(int64_t n_tasks);
  // Per-lane working memory of a thread (attention_lanes.cc), grown to the
  // largest request once.
  struct LaneBuffers {
    std::vector<float> scores;      // [n_lanes * q_heads, stride] scaled scores of one query's keys
    std::vector<int32_t> key_cells; // [n_lanes, stride] cell of each key
    std::vector<float> weights;     // [stride] probabilities summed over a lane's heads
    size_t stride = 0;
    // A lane's tokens folded in tiles (attention_lanes.cc): the tile's log
    // (LaneTileLog: probabilities, block maxima, final max and sum) and each
    // token's weights [tile tokens, keys].
    std::vector<float> tile_p, tile_mb, tile_ml, tile_w;
    std::vector<uint8_t> want;  // [tokens of a run] the policy's WantsWeights
    // Replayed tiles' tokens (LaneReplay): all, those whose output was
    // corrected for keys evicted within the tile, those folded again alone.
    int64_t replayed = 0, corrected = 0, alone = 0;
  };
  // The replay counts summed over the threads (tests).
  LaneBuffers ReplayCounts() const;
  // For n_lanes lanes of q_heads query heads each, up to max_keys keys.
  LaneBuffers& lanes(int thread, size_t max_keys, int n_lanes, int q_heads);
  // How AttendBatch cut each ubatch into tasks: tiles of its tokens x
  // splits of the cells. Depends only on that ubatch, never on the others in the batch, so a
  // sequence's result is the same alone and batched.
  struct Cut {
    int splits = 1;
    int tile = 1;  // query tokens per task (splits == 1)
    int32_t per_split = 0;
    int64_t first_task = 0;     // in the batch's task numbering
    int64_t n_tasks = 0;
    int64_t first_partial = 0;  // in Partials(), when splits > 1
    bool avx512 = false;  // FoldAvx512 (ChooseFold in attention.cc)
    bool avx2 = false;    // else FoldAvx2; neither: FoldScalar
    bool tiled = false;   // tiles of tokens fold shared key blocks (FoldTileAvx2, -Avx512)
    // The ubatch's own K and V as attention reads them: args.k / args.v, or
    // their rounding (and rotation) to the cache's types: [n_tokens,
    // n_head_kv] heads of the K (V) type, rows chunk_{k,v}_row_bytes apart.
    const uint8_t* chunk_k = nullptr;
    const uint8_t* chunk_v = nullptr;
    size_t chunk_k_row_bytes = 0, chunk_v_row_bytes = 0;
    // Split tokens of deferred block-type keys: each token's pair-product
    // factors (attn::PreparePairQuery), made once for all its splits:
    // [n_tokens, n_head, attn::PairStride(head_dim)]; null: each task makes
    // its own.
    float* pair_query = nullptr;
  };
  std::vector<Cut>& cuts() { return cuts_; }  // capacity kept between calls
  // The batch's arguments with rotated queries (--kv-rotate).
  std::vector<AttentionArgs>& rotated_args() { return rotated_args_; }
  // Typed copies of the ubatches' K/V, grown to the largest request once.
  uint8_t* ChunkBytes(size_t bytes);
  // Rotated copies of the ubatches' queries (--kv-rotate), grown once.
  float* QueryRot(size_t elements);
  // The split tokens' pair-product factors (Cut::pair_query), grown once.
  float* PairQuery(size_t elements);

 private:
  int n_threads_, n_head_, head_dim_;
  int max_tile_ = kTileTokens;
  bool group_lanes_ = true;
  int32_t lane_split_cells_ = 256;
  float replay_limit_ = 0.5f;
  size_t per_thread_;  // floats of a thread: slots_, then kTileTokens of tile_query_
  size_t slots_;       // slot 0, then kTileTokens - 1 slots of slot_
  size_t tile_query_;  // a slot's tq8, tqd and tqs
  size_t slot_;
  AlignedBuffer<float> buf_;
  AlignedBuffer<float> partials_;
  AlignedBuffer<uint8_t> chunk_bytes_;
  AlignedBuffer<float> q_rot_;
  AlignedBuffer<float> pair_query_;
  std::vector<LaneBuffers> lanes_;
  std::vector<Cut> cuts_;
  std::vector<AttentionArgs> rotated_args_;
};

void Attend(ThreadPool& pool, const AttentionArgs& args, AttentionScratch& scratch);
// The attention of several ubatches (one per sequence, each over its own
// cache) in one parallel region: the same results as one Attend per ubatch,
// bit for bit, with the threads shared among all their tasks (a decode step
// of 8 sequences of 1 token keeps both threads busy).
void AttendBatch(ThreadPool& pool, std::span<const AttentionArgs> batch,
                 AttentionScratch& scratch);

}  // namespace rotor
