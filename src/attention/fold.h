// Internal: folding a block of keys into the online softmax of every query
// head of one token. Per-ISA implementations; attention.cc dispatches.
// ISA translation units include only this header (plain structs).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rotor::attn {

inline constexpr int kBlock = 64;  // keys per online-softmax block

// Element types of K and V rows: KvType's values (kv_config.h), which ISA
// translation units do not include. A row is n_head_kv heads of head_bytes
// each; the block types hold blocks of `qblock` elements (kv_quant.h).
enum class Elem : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4, kQ5_0 = 5 };
// static: internal to each translation unit (ISA units are compiled with other flags).
static constexpr bool IsBlockType(Elem e) { return e == Elem::kQ8_0 || e == Elem::kQ4_0 || e == Elem::kQ5_0; }

struct KeyBlock;

struct FoldState {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  const float* q = nullptr;       // [n_head, head_dim]: rotated (cached) or not (deferred)
  const int* partner = nullptr;   // [head_dim] rotation-pair partner of each lane (deferred)
  bool normal_pairs = true;       // partner[l] == l ^ 1 for every rotated lane
  float* scores = nullptr;        // scratch [n_head, kBlock]
  float* k_rot = nullptr;         // scratch [head_dim]
  float* cs = nullptr;            // scratch [2, head_dim] combined rotation row
  float* m = nullptr;             // [n_head] running max of scaled scores
  float* l = nullptr;             // [n_head] running sum of exp(score - m)
  float* acc = nullptr;           // [n_head, head_dim] running sum of exp(score - m) * v
  // The query quantized for integer dot products with block-type keys
  // (QuantizeQuery): q8_0 blocks of the keys' block size.
  int8_t* q8 = nullptr;           // [n_head, head_dim] quants
  float* q8d = nullptr;           // [n_head, head_dim / 8 * 8]: block b's scale at [b * 8, b * 8 + 8)
  int32_t* q8s = nullptr;         // [n_head, head_dim / qblock] each block's sum of quants
  const float* q8_of = nullptr;   // the q they were made from; null: not yet (set q8_of = null with q)
  // Deferred keys stored centered and scaled (key offsets on): a stored
  // head's value x reads as center + scale * x, before it is rotated.
  // [n_head_kv, head_dim] each, the state's kv heads; both null otherwise.
  const float* k_center = nullptr;
  const float* k_scale = nullptr;
  // Deferred block-type keys in blocks of 32 are scored by pair products
  // (PreparePairQuery below): the query's factors, PairStride(head_dim)
  // floats per head.
  float* qp = nullptr;           // [n_head, PairStride(head_dim)]
  const float* qp_of = nullptr;  // the q they were made from; null: not yet (as q8_of)
  // Tiles (FoldTile*) score block-type keys stored rotated in blocks of 32
  // by integer dot products with the query in q8_0 blocks of 32 when every
  // state of the tile has these buffers (attention.cc gives them where the
  // tile fold is FoldTileAvx512, whose VNNI products make that pay; null:
  // the decoded keys are scored in f32). TileQuantize fills them.
  int8_t* tq8 = nullptr;         // [n_head, head_dim] the query's quants
  float* tqd = nullptr;          // [n_head, head_dim / 32] their blocks' scales
  int32_t* tqs = nullptr;        // [n_head, head_dim / 32] their blocks' sums of quants
  const float* tq_of = nullptr;  // the q they were made from; null: not yet (as q8_of)
};

// Pair products (deferred RoPE, adjacent pairs (a, b) = (2 i, 2 i + 1), keys
// of a block type in blocks of 32). A key k = c + s * d * x (center, channel
// scale, block scale, integers; c = 0, s = 1 when not centered) rotated by
// a pair's (cos, sin) = (C, S) scores
//   q_a (C k_a + S k_b) + q_b (C k_b - S k_a) = C A + S B,
//   A = q_a k_a + q_b k_b = alpha + d (u_a x_a + u_b x_b),
//   B = q_a k_b - q_b k_a = beta  + d (w_a x_a + w_b x_b),
// u = (q_a s_a, q_b s_b), w = (-q_b s_a, q_a s_b), alpha = q_a c_a + q_b c_b,
// beta = q_a c_b - q_b c_a. u and w are quantized once per head and step to
// int16, one scale per block of 32 (q_k = amax / 32767: one per head lost
// small channels' precision, KLD +0.5% on q4_0), so each pair's integer part
// is one vpmaddwd lane A' (B'), exact in int32. Per lane (pair i of block
// k), block after block, with dq = d * q_k, in two chains (half the
// dependent FMAs of one: the AVX-512 fold 2-3% faster):
//   acc = fma(fma(A', dq, alpha), C, acc); acc_s = fma(fma(B', dq, beta), S, acc_s)
// and the score is the sum of the lanes' acc + acc_s in PairSum's order. Every path (scalar,
// AVX2, AVX-512) takes these steps, so they agree bit for bit.
// Per head: for each block k, 32 int16 of u then 32 of w (32 floats' room
// at 32 k), then at head_dim + 32 k its 16 alpha then 16 beta, then q_k at
// 2 head_dim + k.
inline constexpr int PairStride(int head_dim) { return 2 * head_dim + 16; }
// Fills s.qp from s.q (and s.k_center / s.k_scale); sets s.qp_of.
void PreparePairQuery(FoldState& s);
// Whether key block b is scored by pair products in state s: block-type
// keys in blocks of 32, every key with a rotation row, normal pairs.
bool PairScored(const FoldState& s, const KeyBlock& b);
// The scalar reference of those scores: raw q.k of every key and query head
// into s.scores (unscaled, as the fast paths leave them).
void ScoresPairsScalar(FoldState& s, const KeyBlock& b);
// The same on 512-bit (AVX-512BW) and 256-bit (AVX2) vectors; false
// (nothing done) where PairScored is false.
bool ScoresPairsAvx512(FoldState& s, const KeyBlock& b);
bool ScoresPairsAvx2(FoldState& s, const KeyBlock& b);
// Raw scores of any key type with 32-value blocks, head sizes 32, 64, 96,
// 128 and 256 (false, nothing done, otherwise), each KV head's key decoded
// and rotated once in f32 and dotted with its query heads in f32
// (fold_quant_avx512.cc). FoldAvx2Vnni takes it instead of the pair
// products for deferred block-type keys of GQA groups of 4 or more query
// heads, where one decode serves the group: 1.03-1.28x (median 1.10) the
// pair products' attention on the 1B shape (BENCHMARKS.md, "Forty-seventh
// session").
bool ScoresDecodedAvx512(FoldState& s, const KeyBlock& b);

// Quantizes s.q (n_head heads) into s.q8 / s.q8d in blocks of `qblock`
// elements: d = amax / 127, q = round(x / d) (q8_0's rule), and each block's
// sum of quants into s.q8s (BlockSums); sets s.q8_of.
void QuantizeQuery(FoldState& s, int qblock);
// out[i]: the sum of q[i * block, (i + 1) * block), for the n / block blocks.
void BlockSums(const int8_t* q, int64_t n, int block, int32_t* out);

struct KeyBlock {
  int n = 0;
  Elem tk = Elem::kF32, tv = Elem::kF32;  // element types of the k and v rows
  int k_head_bytes = 0, v_head_bytes = 0;  // bytes of one head of a k (v) row
  int qblock = 32;                         // elements per block of the block types
  const void* k[kBlock];      // each [n_head_kv] heads
  const void* v[kBlock];      // each [n_head_kv] heads
  // Deferred: [head_dim] rotation rows; null when keys are stored rotated.
  // A block's keys are all of one kind (every key of a deferred cache carries
  // its row, even at distance 0): the folds choose one path per block, some
  // from its first key (FoldAvx512), and the pair products take a block only
  // when every key is rotated (PairScored).
  const float* cos[kBlock];
  const float* sin[kBlock];
  // Deferred, two-level: the fine rows to combine with cos/sin by angle
  // addition; null when cos/sin are the whole rotation.
  const float* cos2[kBlock];
  const float* sin2[kBlock];
};

// A tile: one block of keys folded into the states of n query tokens at once
// (prefill: a token's keys are mostly the same as its neighbours'). Token u
// takes the block's first n_keys[u] keys (0 to b.n: the ubatch's own keys
// are a causal prefix). Each K and V head of the block is decoded to f32
// once per tile into the scratch, then scored against every query row of
// the tile as a small matrix product. Block-type keys stored rotated in
// blocks of 32 are instead scored by integer dot products with the query in
// q8_0 blocks, as the one-token folds score them, where the states carry
// the buffers for it (FoldState::tq8: on AVX-512 machines, whose VNNI
// makes it pay; ScoreTileIntAvx512); elsewhere in f32.
// Under cached RoPE the keys carry no rotation rows. Deferred keys carry one
// whole row per key (cos / sin, cos2 / sin2 null), the same for every token
// of the tile: key j is decoded (read back as center + scale x when the
// states' k_center is set), then rotated by its row, k'_l = cos_l k_l +
// sin_l k_partner(l), and each state's q is already rotated to match
// (attention.cc, TaskRunner::RotateTile).
inline constexpr int kTileMax = 32;
struct Tile {
  int n = 0;
  FoldState* s[kTileMax];
  int n_keys[kTileMax];
  float* kt = nullptr;  // scratch [head_dim, kBlock]: one K head of the block, transposed
  float* vf = nullptr;  // scratch [kBlock, head_dim]: one V head of the block
};
// One query row of a tile: a token's query head and its softmax state.
struct TileRow {
  const float* q;  // [head_dim]
  float* sc;       // [kBlock] scaled scores, then exp(score - max)
  float* acc;      // [head_dim]
  float* m;
  float* l;
  int n;       // keys this row takes (a prefix of the block)
  float corr;  // exp(old max - new max)
};
// A row's query for integer scores (FoldState::tq8): its head's quants
// [head_dim], block scales and block sums [head_dim / 32].
struct TileQuery {
  const int8_t* q8;
  const float* qd;
  const int32_t* qs;
};
// Scalar reference of the tile fold: any types and head size.
void FoldTileScalar(Tile& t, const KeyBlock& b);
// Whether a tile scores its block's keys by integer products: K of a block
// type in blocks of 32 stored rotated (no rotation rows), every state with
// FoldState::tq8 buffers.
bool TileScoresIntegers(const Tile& t, const KeyBlock& b);
// Fills s.tq8, tqd and tqs from s.q (every head; head_dim % 32 == 0): ops'
// q8_0 rule in blocks of 32, the same quants and scales as QuantizeQuery's.
void TileQuantize(FoldState& s);
// Integer scores of a tile: for each of n_rows rows (its query: queries[r]) and
// each key j < n8 of KV head g of the block (keys j >= n score 0), the sum
// over the head's blocks i, in order, of fma(isum_i, d_key_i * qd_i, .)
// with isum_i the exact integer dot product of the row's quants and the
// key's integers, times scale, into row.sc[j]. The reference, and the
// 512-bit one (VNNI's vpdpbusd on the key block's integers laid out four
// values of a key per lane, in `scratch`: head_dim * 72 bytes), the same bits.
void ScoreTileIntScalar(TileRow* rows, const TileQuery* queries, int n_rows, const KeyBlock& b,
                        int g, int n, int n8, int head_dim, float scale);
void ScoreTileIntAvx512(TileRow* rows, const TileQuery* queries, int n_rows, const KeyBlock& b,
                        int g, int n, int n8, int head_dim, float scale, void* scratch);
// head_dim % 8 == 0 up to 256 and qblock 8, 16 or 32 (else FoldTileScalar):
// the query rows in chunks of 4 against 16 keys in registers
// (fold_tile_avx2.cc). Runs on AVX-512 machines too. Deferred keys' rows
// must rotate normal pairs (partner(l) = l ^ 1).
void FoldTileAvx2(Tile& t, const KeyBlock& b);
// AVX-512 machines, head_dim % 16 == 0 (else FoldTileAvx2): FoldTileAvx2
// with its scores and V sums on 512-bit vectors (32 keys, 32 values of a
// row per step; fold_tile_avx512.cc); the decoding and softmax are
// FoldTileAvx2's. Every score and sum takes the AVX2 kernels' chain of
// fused multiply-adds, so the results are FoldTileAvx2's, bit for bit.
void FoldTileAvx512(Tile& t, const KeyBlock& b);
// Its kernels: the scaled scores of n_rows rows against keys [0, n8) of kt
// ([head_dim, kBlock], keys past n8 not read), and acc = acc * corr + sum
// over keys [0, n) of p * v for n_rows rows (each row's keys past its own n
// have p = 0), vf [n, head_dim].
void ScoreTileRowsAvx512(TileRow* rows, int n_rows, const float* kt, int head_dim, int n8,
                         float scale);
void AccumulateTileRowsAvx512(TileRow* rows, int n_rows, const float* vf, int head_dim, int n);

// n_rows rows of head_dim floats rotated by one rotation row (normal pairs):
// y_l = cos_l x_l + sin_l x_(l ^ 1) (a deferred tile member's query,
// attention.cc RotateTile). x: [n_rows, head_dim], y the same (not x).
void RotateRowsScalar(const float* cos, const float* sin, const float* x, int n_rows, int head_dim,
                      float* y);
// head_dim % 8 == 0 (else RotateRowsScalar).
void RotateRowsAvx2(const float* cos, const float* sin, const float* x, int n_rows, int head_dim,
                    float* y);

// Scalar reference, any types and head size. Block-type keys without a
// rotation row (cached RoPE) are scored by integer dot products with the
// quantized query (as the fast paths); rotated ones (deferred RoPE) by pair
// products in blocks of 32 (PairScored: ScoresPairsScalar, as the fast
// paths), else as f32 like every other type. V heads are decoded value by
// value into the accumulators.
void FoldScalar(FoldState& s, const KeyBlock& b);

// A token's attention probabilities over n_keys keys, summed over its query
// heads, from the scaled scores a fold left and its final state:
// out[k] = sum_h exp(scores[h * stride + k] - m[h]) / l[h].
// scores: [n_heads, stride]; m, l: [n_heads]; out: [n_keys].
void LaneWeightsScalar(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out);
void LaneWeightsAvx512(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                       const float* l, float* out);
// head_dim % 16 == 0 and normal pairs (or cached keys). GQA, block-type
// keys under cached RoPE and deferred block-type keys in blocks of 32 (pair
// products, ScoresPairsAvx512) go to FoldAvx2Vnni, the other types than
// f32 / f32 and f16 / f16, and keys stored centered (k_center), to
// FoldQuantAvx512.
void FoldAvx512(FoldState& s, const KeyBlock& b);
// Any mix of types with qblock 32 (head_dim % 32 == 0, up to 256; else
// FoldScalar): keys decoded (and rotated) in f32 registers (deferred
// block-type keys: pair products), V decoded in registers
// (fold_quant_avx512.cc).
void FoldQuantAvx512(FoldState& s, const KeyBlock& b);
void LaneWeightsAvx2(const float* scores, size_t stride, int n_heads, int n_keys, const float* m,
                     const float* l, float* out);
// Any mix of types with head_dim % 8 == 0, up to 256 (else FoldScalar), and
// normal pairs (or cached keys): block-type keys under cached RoPE by exact
// integer dot products (vpmaddubsw / vpmaddwd) with the quantized query, in
// blocks of 8, 16 or 32; V decoded in registers (fold_avx2.cc).
void FoldAvx2(FoldState& s, const KeyBlock& b);
// FoldAvx2's scores (raw q.k into s.scores) of block-type keys in blocks
// of 32 stored rotated (every b.cos null), eight keys at a time
// (fold_avx2_cached.cc); false (nothing done) for the others. (The float
// types keep fold_avx2.cc's key-by-key scores there: measured faster end to
// end. FoldAvx2Vnni scores them 16 products at a time: ScoresFloatAvx512.)
bool ScoresCachedAvx2(FoldState& s, const KeyBlock& b);
// AVX-512 machines only: FoldAvx2 with those scores by VNNI's vpdpbusd on
// 512-bit vectors, two blocks of a key in each (ScoresCachedVnni,
// fold_vnni_cached.cc), and the V pass of block-type V on 512-bit vectors
// (AccumulateV32Avx512 below), and float keys' scores 16 at a time
// (ScoresFloatAvx512): the same results, bit for bit.
void FoldAvx2Vnni(FoldState& s, const KeyBlock& b);
bool ScoresCachedVnni(FoldState& s, const KeyBlock& b);
// AVX-512 machines only: FoldAvx2Vnni's scores (raw q.k into s.scores) of
// float keys (f32, f16, bf16; not stored centered), head_dim 64 or 128,
// cached or deferred (normal pairs): H query heads of a
// KV head against 16 / H keys per pass, each key head loaded and rotated
// once for them, the 16 dot products' lanes summed across by one shuffle
// tree (fold_float_avx512.cc). Lane l of a product is the chain of fused
// multiply-adds of FoldAvx2's accumulators (elements l and l + 8 of every
// 16 in its two) and the tree adds as its Hsum, so the scores are FoldAvx2's
// bit for bit (KvQuantFold.Avx2VnniEqualsAvx2BitForBit). False (nothing
// done) for other keys.
bool ScoresFloatAvx512(FoldState& s, const KeyBlock& b);
// AVX-512 machines only: the softmax of query head h's scores in the block
// for every AVX-512 fold (fold_values_avx512.cc): fold_avx2.cc's Softmax on
// 16 keys per vector, each lane's operations the same and the weights summed
// 8 lanes at a time in key order, so FoldAvx2Vnni keeps FoldAvx2's bits. The
// scores scaled in place, the running max and sum updated, the weights into
// p [kBlock] (zero past b.n); returns the factor the accumulators take.
float SoftmaxAvx512(FoldState& s, const KeyBlock& b, int h, float* p);
// AVX-512 machines only: FoldAvx2Vnni's V pass of one query head that shares
// its KV head with no other, over V of block type T (q8_0, q4_0, q5_0) in
// blocks of 32 (head_dim % 32 == 0, up to 256): fold_avx2.cc's AccumulateV32
// on 512-bit vectors, the same operations per lane in the same order, so the
// same bits (fold_values_avx512.cc, which instantiates the block types).
// p: [b.n] the keys' weights; v0: the head's byte offset in a V row; acc:
// [head_dim] the head's accumulators, times corr first.
template <Elem T>
void AccumulateV32Avx512(const KeyBlock& b, const float* p, size_t v0, int head_dim, float corr,
                         float* acc);
// The same for G (2 to 4) query heads that share a KV head (fold_avx2.cc's
// AccumulateV32Group over the whole head): w [G, head_dim / 32, kBlock]
// their weights times each block's scale, wsum [G, head_dim / 32] the sums
// of w's rows, corr [G], acc [G] each head's accumulators.
template <Elem T, int G>
void AccumulateV32GroupAvx512(const KeyBlock& b, const float* w, const float* wsum, size_t v0,
                              int head_dim, const float* corr, float* const* acc);

}  // namespace rotor::attn
