// AVX2 tile fold (fold.h, Tile): one key block folded into the online
// softmax of several query tokens at once. Per KV head, the block's K head is
// decoded to f32 and transposed into t.kt, its V head decoded into t.vf, both
// once for the whole tile; the query rows of the tile (tokens x the query
// heads sharing the KV head) are then scored four at a time against 16 keys
// held in registers (q broadcast, keys as vectors: no horizontal sums), and
// their probabilities accumulated against V the same way. A prefill at depth
// thus reads and decodes each K/V row once per tile, not once per token.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/fold.h"
#include "attention/fold_avx2_decode.h"

namespace rotor::attn {
namespace {

constexpr int kRows = 4;  // query rows per register block

using Row = TileRow;  // one query row of the tile (fold.h)

// Whether T in blocks of B is decoded a whole 32-element block at a time
// (DecodeBlock32; head_dim is then a multiple of 32, kv_quant.h).
template <Elem T, int B>
constexpr bool kWholeBlocks = IsBlockType(T) && B == 32;

// K head g of keys [0, n) into kt ([head_dim, kBlock]), keys [n, n8) zero.
// kRot (deferred keys): each key read back as center + scale x (when center
// is not null: head g's [head_dim] each), then rotated by its row in b.cos /
// b.sin (normal pairs: a lane's partner is its neighbour in the vector).
template <Elem T, int B, bool kRot>
void DecodeK(const KeyBlock& b, int g, int n, int n8, int hd, const float* center,
             const float* scale, float* kt) {
  for (int j0 = 0; j0 < n8; j0 += 8) {
    const uint8_t* head[8];
    for (int i = 0; i < 8; ++i)
      head[i] = j0 + i < n ? static_cast<const uint8_t*>(b.k[j0 + i]) +
                                 static_cast<size_t>(g) * b.k_head_bytes
                           : nullptr;
    // Elements [e, e + 8) of the 8 keys (r[i]: key j0 + i) rotated and
    // stored transposed.
    auto put = [&](__m256 r[8], int e) {
      if constexpr (kRot) {
        for (int i = 0; i < 8 && head[i] != nullptr; ++i) {
          if (center != nullptr)
            r[i] = _mm256_fmadd_ps(r[i], _mm256_loadu_ps(scale + e), _mm256_loadu_ps(center + e));
          const __m256 swapped = _mm256_permute_ps(r[i], 0xB1);  // lanes 2i <-> 2i + 1
          r[i] = _mm256_fmadd_ps(_mm256_loadu_ps(b.cos[j0 + i] + e), r[i],
                                 _mm256_mul_ps(_mm256_loadu_ps(b.sin[j0 + i] + e), swapped));
        }
      }
      Transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (e + i) * kBlock + j0, r[i]);
    };
    if constexpr (kWholeBlocks<T, B>) {
      for (int e = 0; e < hd; e += 32) {
        __m256 r[4][8];  // [part of the block][key]
        for (int i = 0; i < 8; ++i) {
          __m256 x[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
          if (head[i] != nullptr) DecodeBlock32<T>(head[i], e, x);
          for (int p = 0; p < 4; ++p) r[p][i] = x[p];
        }
        for (int p = 0; p < 4; ++p) put(r[p], e + 8 * p);
      }
    } else {
      for (int e = 0; e < hd; e += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = head[i] != nullptr ? Load8<T, B>(head[i], e) : _mm256_setzero_ps();
        put(r, e);
      }
    }
  }
}

// V head g of keys [0, n) into vf ([kBlock, head_dim]).
template <Elem T, int B>
void DecodeV(const KeyBlock& b, int g, int n, int hd, float* vf) {
  for (int j = 0; j < n; ++j) {
    const uint8_t* head =
        static_cast<const uint8_t*>(b.v[j]) + static_cast<size_t>(g) * b.v_head_bytes;
    float* row = vf + j * hd;
    if constexpr (kWholeBlocks<T, B>) {
      for (int e = 0; e < hd; e += 32) {
        __m256 x[4];
        DecodeBlock32<T>(head, e, x);
        for (int p = 0; p < 4; ++p) _mm256_storeu_ps(row + e + 8 * p, x[p]);
      }
    } else {
      for (int e = 0; e < hd; e += 8) _mm256_storeu_ps(row + e, Load8<T, B>(head, e));
    }
  }
}

// Fetches K and V head g of keys [0, n) ahead of their decoding: the heads
// of a block are a row apart, a stride the hardware prefetchers miss.
void Prefetch(const KeyBlock& b, int g, int n) {
  for (int j = 0; j < n; ++j) {
    const char* k = static_cast<const char*>(b.k[j]) + static_cast<size_t>(g) * b.k_head_bytes;
    const char* v = static_cast<const char*>(b.v[j]) + static_cast<size_t>(g) * b.v_head_bytes;
    for (int o = 0; o < b.k_head_bytes; o += 64) _mm_prefetch(k + o, _MM_HINT_T1);
    for (int o = 0; o < b.v_head_bytes; o += 64) _mm_prefetch(v + o, _MM_HINT_T1);
  }
}

// Scaled scores of R rows against keys [0, n8) of kt.
template <int R>
void ScoreRows(Row* rows, const float* kt, int hd, int n8, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  int j = 0;
  for (; j + 16 <= n8; j += 16) {
    __m256 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * kBlock + j);
      const __m256 k1 = _mm256_loadu_ps(kt + d * kBlock + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 q = _mm256_broadcast_ss(rows[r].q + d);
        a0[r] = _mm256_fmadd_ps(q, k0, a0[r]);
        a1[r] = _mm256_fmadd_ps(q, k1, a1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(rows[r].sc + j, _mm256_mul_ps(a0[r], vs));
      _mm256_storeu_ps(rows[r].sc + j + 8, _mm256_mul_ps(a1[r], vs));
    }
  }
  if (j < n8) {  // the last 8
    __m256 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * kBlock + j);
      for (int r = 0; r < R; ++r)
        a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(rows[r].q + d), k0, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(rows[r].sc + j, _mm256_mul_ps(a[r], vs));
  }
}

// The row's online-softmax step: its scores [0, n) become exp(score - max)
// and [n, n8) zero; m and l move on, corr is what acc must be scaled by.
void SoftmaxRow(Row& row, int n8) {
  if (row.n == 0) {  // no key: the state stays
    std::fill(row.sc, row.sc + n8, 0.f);
    row.corr = 1.f;
    return;
  }
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 vmax = neg_inf;
  for (int c = 0; c < row.n; c += 8) {
    const __m256 valid = _mm256_castsi256_ps(FirstLanes(row.n - c));
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(row.sc + c), valid));
  }
  const float new_max = std::max(*row.m, Hmax(vmax));
  row.corr = std::exp(*row.m - new_max);  // 0 on the first block (m = -inf)
  const __m256 vm = _mm256_set1_ps(new_max);
  __m256 vsum = _mm256_setzero_ps();
  for (int c = 0; c < n8; c += 8) {
    const __m256 valid = _mm256_castsi256_ps(FirstLanes(row.n - c));
    const __m256 e = _mm256_and_ps(Exp8(_mm256_sub_ps(_mm256_loadu_ps(row.sc + c), vm)), valid);
    _mm256_storeu_ps(row.sc + c, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  *row.l = *row.l * row.corr + Hsum(vsum);
  *row.m = new_max;
}

// V rows as AccumulateRows reads them: decoded into vf ([n, head_dim] f32)...
struct DecodedV {
  const float* vf;
  int hd;
  __m256 Load(int j, int e) const { return _mm256_loadu_ps(vf + j * hd + e); }
};
// ...or the block's V head g, decoded where it is read (the same f32 values).
template <Elem T, int B>
struct TypedV {
  const KeyBlock* b;
  int g;
  __m256 Load(int j, int e) const {
    return Load8<T, B>(
        static_cast<const uint8_t*>(b->v[j]) + static_cast<size_t>(g) * b->v_head_bytes, e);
  }
};

// acc = acc * corr + sum over keys [0, n) of p * v, for R rows.
template <int R, class V>
void AccumulateRows(Row* rows, const V& v, int hd, int n) {
  int e = 0;
  for (; e + 16 <= hd; e += 16) {
    __m256 a0[R], a1[R];
    for (int r = 0; r < R; ++r) {
      const __m256 c = _mm256_set1_ps(rows[r].corr);
      a0[r] = _mm256_mul_ps(_mm256_loadu_ps(rows[r].acc + e), c);
      a1[r] = _mm256_mul_ps(_mm256_loadu_ps(rows[r].acc + e + 8), c);
    }
    for (int j = 0; j < n; ++j) {
      const __m256 v0 = v.Load(j, e), v1 = v.Load(j, e + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 p = _mm256_broadcast_ss(rows[r].sc + j);
        a0[r] = _mm256_fmadd_ps(p, v0, a0[r]);
        a1[r] = _mm256_fmadd_ps(p, v1, a1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(rows[r].acc + e, a0[r]);
      _mm256_storeu_ps(rows[r].acc + e + 8, a1[r]);
    }
  }
  if (e < hd) {  // the last 8
    __m256 a[R];
    for (int r = 0; r < R; ++r)
      a[r] = _mm256_mul_ps(_mm256_loadu_ps(rows[r].acc + e), _mm256_set1_ps(rows[r].corr));
    for (int j = 0; j < n; ++j) {
      const __m256 v0 = v.Load(j, e);
      for (int r = 0; r < R; ++r)
        a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(rows[r].sc + j), v0, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(rows[r].acc + e, a[r]);
  }
}

// Runs F<R> over rows [0, n) in blocks of kRows (the last one smaller).
template <template <int> class F, typename... Args>
void ByRows(Row* rows, int n, Args... args) {
  int r = 0;
  for (; r + kRows <= n; r += kRows) F<kRows>::Run(rows + r, args...);
  switch (n - r) {
    case 1: return F<1>::Run(rows + r, args...);
    case 2: return F<2>::Run(rows + r, args...);
    case 3: return F<3>::Run(rows + r, args...);
    default: return;
  }
}
template <int R>
struct ScoreFn {
  static void Run(Row* rows, const float* kt, int hd, int n8, float scale) {
    ScoreRows<R>(rows, kt, hd, n8, scale);
  }
};
template <int R>
struct AccumulateFn {
  template <class V>
  static void Run(Row* rows, V v, int hd, int n) {
    int longest = 0;  // the rows' p are zero past their own n
    for (int r = 0; r < R; ++r) longest = std::max(longest, rows[r].n);
    AccumulateRows<R>(rows, v, hd, std::min(longest, n));
  }
};

// Rows [0, n_rows) (at most kRows: one pass over V) against V head g read in
// place: no decoded copy when each V value is used by one pass only.
using AccumulateTypedFn = void (*)(Row*, int, const KeyBlock&, int, int, int);
template <Elem T, int B>
void AccumulateTyped(Row* rows, int n_rows, const KeyBlock& b, int g, int hd, int n) {
  ByRows<AccumulateFn>(rows, n_rows, TypedV<T, B>{&b, g}, hd, n);
}

using DecodeKFn = void (*)(const KeyBlock&, int, int, int, int, const float*, const float*, float*);
using DecodeVFn = void (*)(const KeyBlock&, int, int, int, float*);

template <Elem T>
void PickDecoders(int qblock, bool is_v, bool rot, DecodeKFn* k, DecodeVFn* v,
                  AccumulateTypedFn* a) {
  auto set = [&]<int B>() {
    if (is_v) *v = DecodeV<T, B>, *a = AccumulateTyped<T, B>;
    else
      *k = rot ? DecodeK<T, B, true> : DecodeK<T, B, false>;
  };
  if (!IsBlockType(T) || qblock == 32) set.template operator()<32>();
  else if (qblock == 16) set.template operator()<16>();
  else set.template operator()<8>();
}

void Pick(Elem t, int qblock, bool is_v, bool rot, DecodeKFn* k, DecodeVFn* v,
          AccumulateTypedFn* a) {
  switch (t) {
    case Elem::kF32:
      return PickDecoders<Elem::kF32>(qblock, is_v, rot, k, v, a);
    case Elem::kF16:
      return PickDecoders<Elem::kF16>(qblock, is_v, rot, k, v, a);
    case Elem::kBF16:
      return PickDecoders<Elem::kBF16>(qblock, is_v, rot, k, v, a);
    case Elem::kQ8_0:
      return PickDecoders<Elem::kQ8_0>(qblock, is_v, rot, k, v, a);
    case Elem::kQ4_0:
      return PickDecoders<Elem::kQ4_0>(qblock, is_v, rot, k, v, a);
    case Elem::kQ5_0:
      return PickDecoders<Elem::kQ5_0>(qblock, is_v, rot, k, v, a);
  }
}

}  // namespace

void RotateRowsAvx2(const float* cos, const float* sin, const float* x, int n_rows, int head_dim,
                    float* y) {
  if (head_dim % 8 != 0) return RotateRowsScalar(cos, sin, x, n_rows, head_dim, y);
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * head_dim;
    float* yr = y + static_cast<size_t>(r) * head_dim;
    for (int e = 0; e < head_dim; e += 8) {
      const __m256 v = _mm256_loadu_ps(xr + e);
      _mm256_storeu_ps(yr + e, _mm256_fmadd_ps(_mm256_loadu_ps(cos + e), v,
                                               _mm256_mul_ps(_mm256_loadu_ps(sin + e),
                                                             _mm256_permute_ps(v, 0xB1))));
    }
  }
}

namespace {

// The tile fold; `wide`: the scores and the decoded V's sums by the 512-bit
// kernels (head_dim % 16 == 0, AVX-512 machines), the same bits.
void FoldTile(Tile& t, const KeyBlock& b, bool wide) {
  const FoldState& s0 = *t.s[0];
  const int hd = s0.head_dim, group = s0.n_head / s0.n_head_kv;
  const bool blocks = IsBlockType(b.tk) || IsBlockType(b.tv);
  const bool block_ok = b.qblock == 8 || b.qblock == 16 || b.qblock == 32;
  if (hd % 8 != 0 || hd > 256 || (blocks && !block_ok)) return FoldTileScalar(t, b);
  int n = 0;
  for (int u = 0; u < t.n; ++u) n = std::max(n, t.n_keys[u]);
  if (n == 0) return;
  const int n8 = (n + 7) / 8 * 8;
  DecodeKFn decode_k = nullptr;
  DecodeVFn decode_v = nullptr;
  AccumulateTypedFn accumulate_typed = nullptr;
  // Deferred keys: every key carries its row (fold.h, Tile).
  const bool rot = b.cos[0] != nullptr;
  // Block-type keys scored by integers (fold.h, FoldState::tq8): the rows'
  // quantized queries, made once per token and query.
  const bool integers = TileScoresIntegers(t, b);
  if (integers)
    for (int u = 0; u < t.n; ++u)
      if (t.s[u]->tq_of != t.s[u]->q) TileQuantize(*t.s[u]);
  Pick(b.tk, b.qblock, /*is_v=*/false, rot, &decode_k, &decode_v, &accumulate_typed);
  Pick(b.tv, b.qblock, /*is_v=*/true, rot, &decode_k, &decode_v, &accumulate_typed);
  thread_local std::vector<Row> rows;  // [t.n * group] token-major
  rows.resize(static_cast<size_t>(t.n) * group);
  thread_local std::vector<TileQuery> queries;  // [t.n * group] the rows' integer queries
  if (integers) queries.resize(rows.size());
  // One pass of rows over V (a decode step's token, or a few query heads):
  // V is read where it is, not decoded into t.vf first.
  const bool v_in_place = static_cast<int>(rows.size()) <= kRows;
  for (int g = 0; g < s0.n_head_kv; ++g) {
    if (g + 1 < s0.n_head_kv) Prefetch(b, g + 1, n);
    const size_t at = static_cast<size_t>(g) * hd;
    if (!integers)
      decode_k(b, g, n, n8, hd, s0.k_center != nullptr ? s0.k_center + at : nullptr,
               s0.k_scale != nullptr ? s0.k_scale + at : nullptr, t.kt);
    if (!v_in_place) decode_v(b, g, n, hd, t.vf);
    for (int u = 0; u < t.n; ++u) {
      FoldState& s = *t.s[u];
      for (int i = 0; i < group; ++i) {
        const int h = g * group + i;
        rows[u * group + i] = Row{s.q + static_cast<size_t>(h) * hd, s.scores + h * kBlock,
                                  s.acc + static_cast<size_t>(h) * hd, s.m + h, s.l + h,
                                  t.n_keys[u], 1.f};
        if (integers) {
          const size_t hq = static_cast<size_t>(h) * hd;
          queries[u * group + i] = TileQuery{s.tq8 + hq, s.tqd + hq / 32, s.tqs + hq / 32};
        }
      }
    }
    const int n_rows = static_cast<int>(rows.size());
    if (integers && wide)
      ScoreTileIntAvx512(rows.data(), queries.data(), n_rows, b, g, n, n8, hd, s0.scale, t.kt);
    else if (integers)
      ScoreTileIntScalar(rows.data(), queries.data(), n_rows, b, g, n, n8, hd, s0.scale);
    else if (wide)
      ScoreTileRowsAvx512(rows.data(), n_rows, t.kt, hd, n8, s0.scale);
    else
      ByRows<ScoreFn>(rows.data(), n_rows, static_cast<const float*>(t.kt), hd, n8, s0.scale);
    for (Row& r : rows) SoftmaxRow(r, n8);
    if (v_in_place)
      accumulate_typed(rows.data(), n_rows, b, g, hd, n);
    else if (wide)
      AccumulateTileRowsAvx512(rows.data(), n_rows, t.vf, hd, n);
    else
      ByRows<AccumulateFn>(rows.data(), n_rows, DecodedV{t.vf, hd}, hd, n);
  }
}

}  // namespace

void FoldTileAvx2(Tile& t, const KeyBlock& b) { FoldTile(t, b, /*wide=*/false); }

void FoldTileAvx512(Tile& t, const KeyBlock& b) {
  FoldTile(t, b, /*wide=*/t.s[0]->head_dim % 16 == 0);
}

}  // namespace rotor::attn
