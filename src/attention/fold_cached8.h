// Internal to the AVX2 and AVX-512 translation units of attention (each
// compiles its own copy: everything here has internal linkage).
//
// The decode scores of a block of block-type keys stored rotated (cached
// RoPE): per Dot::kHeads query heads of a KV head (GQA: each key's integers
// and scales read and decoded once for them; AVX2: pairs, measured as fast
// as fours, which spill; VNNI: fours), eight keys at a time, each key's products summed across
// lanes for the eight at once (a transposed horizontal sum: 9 instructions
// for 8 keys, not 6 per key), by exact integer dot products (q8_0: |k| (u8)
// times q with k's sign (s8); the nibble types: their unsigned quants times
// q, the offset taken off after the sum), each block's eight int32 sums
// scaled by the eight keys' d_k (gathered) and the query's d_q. The keys'
// rows are read in order, and the V rows fetched ahead of the V pass.
//
// `Dot` is the product of 32 u8 x s8 bytes into eight int32 lanes (each the
// sum of four products): vpmaddubsw + vpmaddwd on AVX2
// (fold_avx2_cached.cc), VNNI's vpdpbusd on AVX-512 (fold_vnni_cached.cc,
// whose Dot::kWide replaces Scores8Int by one taking two blocks of a key per
// 512-bit vector, and q8_0's k as k + 128 with the offset taken off after
// the sum, as the nibble types'). The sums are exact (|k| <= 128 and |q| <= 127, or
// n <= 31: no int16 pair sum of vpmaddubsw saturates), so both give the same
// scores, bit for bit.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

namespace rotor::attn {
namespace {

// Lane i of the result: the sum of the 8 lanes of a[i].
inline __m256i Sum8(const __m256i a[8]) {
  const __m256i h0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i h1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                          _mm256_permute2x128_si256(h0, h1, 0x31));
}

// prefetcht0 of the line holding p. Inline assembly: GCC 12 at -O2 drops
// _mm_prefetch in these loops (nothing else in them has an effect).
inline void PrefetchLine(const char* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

// Rows [c + i0, c + i1) (none past n) of `bytes` each, each row's lines in
// order.
inline void PrefetchRows(const void* const* rows, int c, int n, int i0, int i1, int bytes) {
  const int end = std::min(c + i1, n);
  for (int j = c + i0; j < end; ++j) {
    const char* p = static_cast<const char*>(rows[j]);
    for (int o = 0; o < bytes; o += 64) PrefetchLine(p + o);
    PrefetchLine(p + bytes - 1);  // a row not aligned to a line
  }
}

// Block k's eight int32 sums of query head h (the offset of unsigned quants
// times sum(q) off first, kOffset: the nibble types', or 128 for q8_0 keys
// taken as k + 128; qsum: [n_head, nb]) times d_k (dk, the eight keys') and
// the query's d_q, added to acc.
template <Elem T, int kOffset = QuantOffset<T>()>
[[gnu::always_inline]] inline void ScaleBlock(const FoldState& s, int h, int nb, int k, __m256i sum,
                                              __m256 dk, const int32_t* qsum, __m256& acc) {
  if constexpr (kOffset != 0)
    sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(kOffset * qsum[h * nb + k]));
  const __m256 dq = _mm256_set1_ps(s.q8d[static_cast<size_t>(h) * nb * 8 + k * 8]);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dk, dq), acc);
}

// Block k of the eight keys kp (their rows' bytes at one KV head) scored
// against query heads [h0, h0 + G) into acc; the keys' integers and scales
// are read once for the G heads (GQA). q8_0: |k| (u8) times q with k's sign
// (s8). The nibble types: their unsigned quants n (u8) times q, less
// offset * sum(q) after the sum: the same exact integers.
template <class Dot, Elem T, int G>
[[gnu::always_inline]] inline void Block8Int(const FoldState& s, const uint8_t* const kp[8], int h0,
                                             int k, const int32_t* qsum, __m256 (&acc)[G]) {
  const int hd = s.head_dim, nb = hd / 32;
  constexpr int kBytes = BlockBytes<T, 32>();
  __m256i q[G];
  for (int u = 0; u < G; ++u)
    q[u] = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(s.q8 + static_cast<size_t>(h0 + u) * hd + 32 * k));
  __m256i dot[G][8];
  for (int i = 0; i < 8; ++i) {
    if constexpr (T == Elem::kQ8_0) {
      const __m256i x = Ints32<T>(kp[i] + k * kBytes);
      const __m256i ax = _mm256_abs_epi8(x);
      for (int u = 0; u < G; ++u) dot[u][i] = Dot::U8S8(ax, _mm256_sign_epi8(q[u], x));
    } else {
      const __m256i n = Unsigned32<T>(kp[i] + k * kBytes);
      for (int u = 0; u < G; ++u) dot[u][i] = Dot::U8S8(n, q[u]);
    }
  }
  const uint8_t* blk[8];  // the eight keys' block k (its d_k first)
  for (int i = 0; i < 8; ++i) blk[i] = kp[i] + k * kBytes;
  const __m256 dk = F16x8(blk);
  for (int u = 0; u < G; ++u) ScaleBlock<T>(s, h0 + u, nb, k, Sum8(dot[u]), dk, qsum, acc[u]);
}

// The scores of query heads [h0, h0 + G) against the eight keys kp, into
// lanes [c, c + 8) of each head's scratch row, block by block (qsum:
// [n_head, nb], the nibble types' query sums).
template <class Dot, Elem T, int G>
void Scores8Int(FoldState& s, const uint8_t* const kp[8], int h0, int c, const int32_t* qsum) {
  if constexpr (Dot::kWide) {  // AVX-512: two blocks per vector (fold_vnni_cached.cc)
    Dot::template Scores8<T, G>(s, kp, h0, c, qsum);
    return;
  }
  __m256 acc[G];
  for (int u = 0; u < G; ++u) acc[u] = _mm256_setzero_ps();
  for (int k = 0; k < s.head_dim / 32; ++k) Block8Int<Dot, T, G>(s, kp, h0, k, qsum, acc);
  for (int u = 0; u < G; ++u) _mm256_storeu_ps(s.scores + (h0 + u) * kBlock + c, acc[u]);
}

// Eight keys at a time, every head of them, so K rows are read in order
// (the hardware prefetchers follow). While the chunk is scored, its V rows
// and the next chunk's K rows are fetched, a part per head, in address
// order: spread over the pass, and the V pass (head by head, a row's stride
// between keys) finds its rows in cache. Past b.n the last key is scored
// again into unused lanes. Dot::kHeads query heads of a KV head are scored
// together (Scores8Int's G).

template <class Dot, Elem T>
void Scores(FoldState& s, const KeyBlock& b) {
  if (s.q8_of != s.q) QuantizeQuery(s, 32);  // (s.q8s with it, once per step)
  const int32_t* sums = s.q8s;  // [n_head, hd / 32]: the offsets' sum(q) (AVX2's q8_0 takes none)
  const int group = s.n_head / s.n_head_kv;
  const int k_bytes = s.n_head_kv * b.k_head_bytes, v_bytes = s.n_head_kv * b.v_head_bytes;
  // Part g of n_head_kv of a chunk's eight rows: rows [part[g], part[g + 1]),
  // part[g] = ceil(8 g / n_head_kv).
  thread_local std::vector<int> part;
  part.resize(static_cast<size_t>(s.n_head_kv) + 1);
  for (int g = 0; g <= s.n_head_kv; ++g) part[g] = (8 * g + s.n_head_kv - 1) / s.n_head_kv;
  PrefetchRows(b.k, 0, b.n, 0, 8, k_bytes);
  PrefetchRows(b.k, 8, b.n, 0, 8, k_bytes);
  for (int c = 0; c < b.n; c += 8) {
    const uint8_t* kp[8];
    for (int i = 0; i < 8; ++i) kp[i] = static_cast<const uint8_t*>(b.k[std::min(c + i, b.n - 1)]);
    for (int g = 0; g < s.n_head_kv; ++g) {
      PrefetchRows(b.v, c, b.n, part[g], part[g + 1], v_bytes);
      PrefetchRows(b.k, c + 16, b.n, part[g], part[g + 1], k_bytes);
      for (int h0 = g * group; h0 < (g + 1) * group; h0 += Dot::kHeads) {
        switch (std::min(Dot::kHeads, (g + 1) * group - h0)) {
          case 1: Scores8Int<Dot, T, 1>(s, kp, h0, c, sums); break;
          case 2: Scores8Int<Dot, T, 2>(s, kp, h0, c, sums); break;
          case 3: Scores8Int<Dot, T, 3>(s, kp, h0, c, sums); break;
          default: Scores8Int<Dot, T, 4>(s, kp, h0, c, sums); break;
        }
      }
      for (int i = 0; i < 8; ++i) kp[i] += b.k_head_bytes;
    }
  }
}

// Scores of cached block-type keys in blocks of 32 (every b.cos null) by
// Dot; false (nothing done) for the others.
template <class Dot>
bool ScoresCached(FoldState& s, const KeyBlock& b) {
  if (b.qblock != 32 || s.head_dim % 32 != 0 || s.head_dim > 256 || b.n == 0) return false;
  for (int j = 0; j < b.n; ++j)
    if (b.cos[j] != nullptr) return false;
  switch (b.tk) {
    case Elem::kQ8_0: return Scores<Dot, Elem::kQ8_0>(s, b), true;
    case Elem::kQ4_0: return Scores<Dot, Elem::kQ4_0>(s, b), true;
    case Elem::kQ5_0: return Scores<Dot, Elem::kQ5_0>(s, b), true;
    default: return false;
  }
}

}  // namespace
}  // namespace rotor::attn
