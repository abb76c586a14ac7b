// The tile fold (fold.h, Tile): one key block folded into several query
// tokens' online softmax at once, every token taking a prefix of the block.
// FoldTileAvx2 against FoldTileScalar on every K/V type pair and odd sizes,
// with deferred keys' rotation rows and centers too, and FoldTileScalar
// against the one-token FoldScalar it replaces in prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention/fold.h"
#include "attention/rope_distance.h"
#include "base/cpu.h"
#include "kv/kv_quant.h"
#include "kv_quant_test_util.h"
#include "sanitizers/sweep.h"

namespace rotor {
namespace {



struct TileCase {
  int n_head, n_head_kv, head_dim, n_tokens, n_keys;
  int per_block = attn::kBlock;  // keys per fold call (the last: the rest)
  bool causal = false;           // token u takes fewer keys of each block, down to none
};

// Whether a tile with the quantized-query buffers scores the case's keys by
// integers (block-type keys stored rotated in blocks of 32).
bool IntegerScored(const TileCase& c, KvType tk) {
  return KvTypeQuantized(tk) && c.head_dim % 32 == 0;
}

// Keys each token takes of a block of n: all, or (causal) a prefix shorter
// by 5 per token before the last, down to none.
int KeysOf(const TileCase& c, int u, int n) {
  return c.causal ? std::clamp(n - 5 * (c.n_tokens - 1 - u), 0, n) : n;
}

// One token's fold state and its buffers; `integers`: with the tile's
// quantized-query buffers (FoldState::tq8), so tiles score block-type keys
// in blocks of 32 stored rotated by integers.
struct TokenState {
  std::vector<float> q, scores, k_rot, cs, m, l, acc, q8d, tqd;
  std::vector<int8_t> q8, tq8;
  std::vector<int32_t> tqs, q8s;
  attn::FoldState s;
  TokenState(const TileCase& c, uint32_t seed, bool integers = false) {
    const size_t n = static_cast<size_t>(c.n_head) * c.head_dim;
    q = testing::RandomNormal(n, seed);
    scores.resize(static_cast<size_t>(c.n_head) * attn::kBlock);
    k_rot.resize(c.head_dim), cs.resize(2 * c.head_dim);
    m.assign(c.n_head, -std::numeric_limits<float>::infinity());
    l.assign(c.n_head, 0.f), acc.assign(n, 0.f), q8d.resize(n), q8.resize(n);
    s.n_head = c.n_head, s.n_head_kv = c.n_head_kv, s.head_dim = c.head_dim;
    s.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
    s.q = q.data(), s.scores = scores.data(), s.k_rot = k_rot.data(), s.cs = cs.data();
    s.m = m.data(), s.l = l.data(), s.acc = acc.data(), s.q8 = q8.data(), s.q8d = q8d.data();
    q8s.resize(n / 8), s.q8s = q8s.data();  // [n_head, head_dim / qblock], qblock >= 8
    if (integers) {
      tq8.resize(n), tqd.resize(n / 32), tqs.resize(n / 32);
      s.tq8 = tq8.data(), s.tqd = tqd.data(), s.tqs = tqs.data();
    }
  }
};

enum class How { kTileAvx512, kTileAvx2, kTileScalar, kOneByOne };

// Folds n_keys random keys of types tk / tv into n_tokens tokens, per_block
// keys per call; returns every token's m, l and acc. deferred: every key
// carries a whole rotation row (distances -40, -37, ...: both signs, in and
// past the fine rows), and is stored centered and scaled (random centers
// and scales, as fold.h's Tile reads them).
std::vector<float> RunTile(How how, const TileCase& c, KvType tk, KvType tv, uint32_t seed,
                           bool deferred = false, bool integers = false) {
  const int hd = c.head_dim;
  const RopeDistanceTable table(ops::RopeConfig{hd, hd}, 256);
  // [n_keys, 2, head_dim] each key's row; [n_head_kv, head_dim] centers, scales.
  std::vector<float> rows(deferred ? static_cast<size_t>(c.n_keys) * 2 * hd : 0);
  for (int j = 0; deferred && j < c.n_keys; ++j)
    table.Row(3 * j - 40, rows.data() + static_cast<size_t>(j) * 2 * hd,
              rows.data() + static_cast<size_t>(j) * 2 * hd + hd);
  const std::vector<float> center =
      testing::RandomNormal(static_cast<size_t>(c.n_head_kv) * hd, seed + 3);
  std::vector<float> scale = testing::RandomNormal(center.size(), seed + 4, 0.3f);
  for (float& x : scale) x = 1.f + x;
  const size_t kb = KvHeadBytes(tk, hd) * c.n_head_kv, vb = KvHeadBytes(tv, hd) * c.n_head_kv;
  const std::vector<float> kf = testing::RandomNormal(static_cast<size_t>(c.n_keys) * c.n_head_kv * hd, seed + 1, 2.f);
  const std::vector<float> vf = testing::RandomNormal(kf.size(), seed + 2);
  std::vector<uint8_t> k(kb * c.n_keys), v(vb * c.n_keys);  // [n_keys] rows of K (V)
  for (int j = 0; j < c.n_keys; ++j) {
    const size_t at = static_cast<size_t>(j) * c.n_head_kv * hd;
    KvQuantizeHeads(tk, hd, c.n_head_kv, kf.data() + at, k.data() + j * kb);
    KvQuantizeHeads(tv, hd, c.n_head_kv, vf.data() + at, v.data() + j * vb);
  }
  std::vector<TokenState> tokens;
  tokens.reserve(c.n_tokens);
  for (int u = 0; u < c.n_tokens; ++u) {
    tokens.emplace_back(c, seed + 10 + u, integers);
    if (deferred) tokens.back().s.k_center = center.data(), tokens.back().s.k_scale = scale.data();
  }
  // [kBlock, head_dim] each: the tile's decoded K (transposed) and V heads.
  std::vector<float> kt(static_cast<size_t>(attn::kBlock) * hd), vt(kt.size());
  attn::KeyBlock b;
  b.tk = static_cast<attn::Elem>(tk), b.tv = static_cast<attn::Elem>(tv);
  b.k_head_bytes = static_cast<int>(KvHeadBytes(tk, hd));
  b.v_head_bytes = static_cast<int>(KvHeadBytes(tv, hd));
  b.qblock = KvQuantBlock(hd);
  for (int j0 = 0; j0 < c.n_keys; j0 += c.per_block) {
    const int n = std::min(c.per_block, c.n_keys - j0);
    for (int j = 0; j < n; ++j) {
      b.k[j] = k.data() + (j0 + j) * kb;
      b.v[j] = v.data() + (j0 + j) * vb;
      b.cos[j] = b.sin[j] = b.cos2[j] = b.sin2[j] = nullptr;
      if (deferred) {
        b.cos[j] = rows.data() + static_cast<size_t>(j0 + j) * 2 * hd;
        b.sin[j] = b.cos[j] + hd;
      }
    }
    if (how == How::kOneByOne) {
      for (int u = 0; u < c.n_tokens; ++u) {
        b.n = KeysOf(c, u, n);
        if (b.n > 0) attn::FoldScalar(tokens[u].s, b);
      }
      continue;
    }
    b.n = n;
    attn::Tile t;
    t.kt = kt.data(), t.vf = vt.data();
    for (int u = 0; u < c.n_tokens; ++u) {
      t.s[t.n] = &tokens[u].s;
      t.n_keys[t.n++] = KeysOf(c, u, n);
    }
    (how == How::kTileAvx512 ? attn::FoldTileAvx512
     : how == How::kTileAvx2 ? attn::FoldTileAvx2
                             : attn::FoldTileScalar)(t, b);
  }
  std::vector<float> out;
  for (const TokenState& ts : tokens) {
    out.insert(out.end(), ts.m.begin(), ts.m.end());
    out.insert(out.end(), ts.l.begin(), ts.l.end());
    out.insert(out.end(), ts.acc.begin(), ts.acc.end());
  }
  return out;
}

// The largest |got - want| / (1 + |want|).
double Worst(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    // A token with no key at all keeps m = -inf in both.
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / (1 + std::fabs(want[i])));
  }
  return worst;
}

// Head sizes 8 to 256 (blocks of 8, 16 and 32), GQA 1 to 4, 1 to 32 tokens,
// blocks of 1 to 64 keys in sequence, all or causal prefixes (some empty).
const TileCase kCases[] = {
    {1, 1, 8, 1, 1},           {4, 2, 8, 5, 29, 7, true}, {4, 1, 16, 16, 45, 45},
    {2, 2, 40, 3, 97, 33, true}, {8, 2, 48, 7, 77, 13},   {3, 3, 64, 16, 131, 64, true},
    {12, 12, 64, 9, 70, 37},   {4, 1, 128, 11, 65, 64, true}, {8, 2, 256, 4, 66, 33},
    {6, 3, 96, 13, 100, 50, true}, {8, 8, 24, 2, 9, 9}, {4, 1, 64, 32, 140, 64, true},
    // One token of a GQA group of 4 (the 1B shape's decode): 4 rows, V read in place.
    {8, 2, 64, 1, 100, 33}};

TEST(FoldTile, Avx2EqualsScalarReference) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  testing::Sweep sweep(5);  // under the sanitizers: every case and type, fewer pairs
  double worst = 0;
  for (const TileCase& c : kCases)
    for (KvType tk : testing::kAllKvTypes)
      for (KvType tv : testing::kAllKvTypes) {
        if (!sweep.Next({static_cast<int>(&c - kCases), static_cast<int>(tk), static_cast<int>(tv)}))
          continue;
        SCOPED_TRACE(::testing::Message() << KvTypeName(tk) << "/" << KvTypeName(tv) << " heads "
                                          << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim
                                          << " tokens " << c.n_tokens << " keys " << c.n_keys
                                          << " by " << c.per_block << (c.causal ? " causal" : ""));
        const uint32_t seed = c.head_dim * 31 + c.n_keys;
        for (int variant = 0; variant < (IntegerScored(c, tk) ? 3 : 2); ++variant) {
          const bool deferred = variant == 1, integers = variant == 2;
          SCOPED_TRACE(deferred ? "deferred" : integers ? "cached, integer scores" : "cached");
          const double w = Worst(RunTile(How::kTileAvx2, c, tk, tv, seed, deferred, integers),
                                 RunTile(How::kTileScalar, c, tk, tv, seed, deferred, integers));
          // The same decoded values; only the order of the f32 sums, fused
          // multiply-adds and the vectorized exp (~1e-7 relative) differ.
          ASSERT_LE(w, 1e-5);
          worst = std::max(worst, w);
        }
      }
  std::printf("largest relative difference: %.3g\n", worst);
  EXPECT_TRUE(sweep.EveryValueRan());
}

// The 512-bit products run each key's and each value's chain of fused
// multiply-adds in the AVX2 kernels' order: the same bits, every type pair,
// head size (those not a multiple of 16 run the AVX2 ones) and tile shape.
TEST(FoldTile, Avx512EqualsAvx2BitForBit) {
  if (BestIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  testing::Sweep sweep(5);
  for (const TileCase& c : kCases)
    for (KvType tk : testing::kAllKvTypes)
      for (KvType tv : testing::kAllKvTypes) {
        if (!sweep.Next(
                {static_cast<int>(&c - kCases), static_cast<int>(tk), static_cast<int>(tv)}))
          continue;
        SCOPED_TRACE(::testing::Message() << KvTypeName(tk) << "/" << KvTypeName(tv) << " heads "
                                          << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim
                                          << " tokens " << c.n_tokens << " keys " << c.n_keys);
        const uint32_t seed = c.head_dim * 29 + c.n_keys;
        for (int variant = 0; variant < (IntegerScored(c, tk) ? 3 : 2); ++variant) {
          const bool deferred = variant == 1, integers = variant == 2;
          ASSERT_EQ(RunTile(How::kTileAvx512, c, tk, tv, seed, deferred, integers),
                    RunTile(How::kTileAvx2, c, tk, tv, seed, deferred, integers))
              << (deferred ? "deferred" : integers ? "cached, integer scores" : "cached");
        }
      }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// ScoreTileIntAvx512 (VNNI on the keys' unsigned integers, each row's sum
// started at -offset * its block's quant sum) against ScoreTileIntScalar
// (plain integer sums): the same bits, for every block type, head sizes 32
// to 256, 1 to 64 keys (one to four groups of 16, zero keys past n), 1 to 9
// rows (register blocks of 4 and every remainder), and keys and queries
// at their types' extremes (q8_0 -127 and 127, nibbles 0 and their top).
TEST(FoldTile, IntegerScoresEqualTheScalarReferenceBitForBit) {
  if (BestIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  std::mt19937 rng(7);
  for (KvType tk : {KvType::kQ8_0, KvType::kQ4_0, KvType::kQ5_0})
    for (int hd : {32, 64, 96, 128, 256})
      for (int n : {1, 7, 8, 16, 17, 31, 32, 33, 48, 63, 64})
        for (int n_rows : {1, 4, 5, 9}) {
          SCOPED_TRACE(::testing::Message() << KvTypeName(tk) << " hd " << hd << " keys " << n
                                            << " rows " << n_rows);
          const int n_head_kv = 2, g = 1, n8 = (n + 7) / 8 * 8;
          const size_t kb = KvHeadBytes(tk, hd) * n_head_kv;
          std::vector<float> kf = testing::RandomNormal(static_cast<size_t>(n) * n_head_kv * hd,
                                                        hd * 100 + n, 3.f);
          // Key 0's head g: one value far out in each block, so the others
          // round to the extremes' neighbours and it to the extreme itself.
          for (int e = 0; e < hd; e += 32) kf[g * hd + e + 5] = (e / 32) % 2 == 0 ? 100.f : -100.f;
          std::vector<uint8_t> k(kb * n);
          for (int j = 0; j < n; ++j)
            KvQuantizeHeads(tk, hd, n_head_kv, kf.data() + static_cast<size_t>(j) * n_head_kv * hd,
                            k.data() + j * kb);
          attn::KeyBlock b;
          b.tk = static_cast<attn::Elem>(tk);
          b.k_head_bytes = static_cast<int>(KvHeadBytes(tk, hd));
          b.qblock = 32;
          b.n = n;
          for (int j = 0; j < n; ++j) b.k[j] = k.data() + j * kb, b.cos[j] = nullptr;
          // Each row's query in q8_0 blocks (TileQuantize), one row at +-127.
          std::vector<float> q =
              testing::RandomNormal(static_cast<size_t>(n_rows) * hd, hd + n + n_rows);
          for (int e = 0; e < hd; ++e) q[e] = e % 3 == 0 ? 1.f : -1.f;
          std::vector<int8_t> q8(q.size());
          std::vector<float> qd(q.size() / 32);
          std::vector<int32_t> qs(q.size() / 32);
          attn::FoldState s;
          s.n_head = n_rows, s.head_dim = hd, s.q = q.data();
          s.tq8 = q8.data(), s.tqd = qd.data(), s.tqs = qs.data();
          attn::TileQuantize(s);
          std::vector<float> want(static_cast<size_t>(n_rows) * attn::kBlock, -1.f);
          std::vector<float> got(want.size(), -2.f);
          std::vector<float> scratch(static_cast<size_t>(hd) * attn::kBlock);
          auto rows_of = [&](std::vector<float>& sc) {
            std::vector<attn::TileRow> rows(n_rows);
            for (int r = 0; r < n_rows; ++r) rows[r].sc = sc.data() + r * attn::kBlock;
            return rows;
          };
          std::vector<attn::TileQuery> queries(n_rows);
          for (int r = 0; r < n_rows; ++r)
            queries[r] = {q8.data() + r * hd, qd.data() + r * hd / 32, qs.data() + r * hd / 32};
          std::vector<attn::TileRow> rw = rows_of(want), rg = rows_of(got);
          attn::ScoreTileIntScalar(rw.data(), queries.data(), n_rows, b, g, n, n8, hd, 0.125f);
          attn::ScoreTileIntAvx512(rg.data(), queries.data(), n_rows, b, g, n, n8, hd, 0.125f,
                                   scratch.data());
          for (int r = 0; r < n_rows; ++r)
            for (int j = 0; j < n8; ++j)
              ASSERT_EQ(got[r * attn::kBlock + j], want[r * attn::kBlock + j])
                  << "row " << r << " key " << j;
          // The scores are the keys' dot products with the rounded query.
          std::vector<float> key(hd);
          KvDequantizeHeads(tk, hd, 1, k.data() + g * b.k_head_bytes, key.data());
          double dot = 0, mag = 0;
          for (int e = 0; e < hd; ++e) {
            const double qe = static_cast<double>(q8[e]) * qd[e / 32];
            dot += qe * key[e], mag += std::fabs(qe * key[e]);
          }
          ASSERT_NEAR(want[0], 0.125 * dot, 1e-5 * mag);
        }
}

// A deferred tile member's query rotation (attention.cc RotateTile).
TEST(FoldTile, RotateRowsAvx2EqualsScalarReference) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  for (int hd : {8, 24, 64, 128, 256})
    for (int64_t d : {-300, -5, 0, 7, 100}) {
      const RopeDistanceTable table(ops::RopeConfig{hd, hd}, 128);
      std::vector<float> cs(2 * hd);  // [2, head_dim]
      table.Row(d, cs.data(), cs.data() + hd);
      const int rows = 3;
      const std::vector<float> x = testing::RandomNormal(static_cast<size_t>(rows) * hd, hd + 1);
      std::vector<float> want(x.size()), got(x.size());
      attn::RotateRowsScalar(cs.data(), cs.data() + hd, x.data(), rows, hd, want.data());
      attn::RotateRowsAvx2(cs.data(), cs.data() + hd, x.data(), rows, hd, got.data());
      // One fused multiply-add against a multiply and an add.
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6f) << hd << " " << d;
      // A rotation: each pair keeps its length.
      for (int l = 0; l < rows * hd; l += 2)
        ASSERT_NEAR(std::hypot(got[l], got[l + 1]), std::hypot(x[l], x[l + 1]), 1e-5f);
    }
}

// Row(d) is the table's rotation by -d: two rows compose by adding their
// distances, and a row and the row of -d undo each other.
TEST(RopeDistanceTable, RowOfAnyDistanceComposes) {
  const int hd = 64;
  const RopeDistanceTable table(ops::RopeConfig{hd, hd}, 1024);
  std::vector<float> a(2 * hd), b(2 * hd), ab(2 * hd), far(2 * hd);
  for (auto [d1, d2] :
       {std::pair<int64_t, int64_t>{5, -5}, {-70, 30}, {-1000, 999}, {700, -2000}}) {
    table.Row(d1, a.data(), a.data() + hd);
    table.Row(d2, b.data(), b.data() + hd);
    table.Compute(d1 + d2, far.data(), far.data() + hd);
    for (int l = 0; l < hd; ++l) {
      ab[l] = a[l] * b[l] - a[hd + l] * b[hd + l];  // angle addition, sign folded in
      ab[hd + l] = a[hd + l] * b[l] + a[l] * b[hd + l];
      ASSERT_NEAR(ab[l], far[l], 1e-3f) << d1 << " + " << d2 << " lane " << l;
      ASSERT_NEAR(ab[hd + l], far[hd + l], 1e-3f) << d1 << " + " << d2 << " lane " << l;
    }
  }
  // The stored negated fine rows are Row of the negative distance, bit for bit.
  for (int64_t d = 0; d < RopeDistanceTable::kFine; ++d) {
    table.Row(-d, a.data(), a.data() + hd);
    for (int l = 0; l < hd; ++l) {
      ASSERT_EQ(a[l], table.FineCos(d)[l]);
      ASSERT_EQ(a[hd + l], table.FineSinNegated(d)[l]);
    }
  }
}

// The tile fold against folding each token alone (what decode and the
// tokens of an untiled ubatch do): float keys give the same scores; block-type
// keys differ by the one-token fold's quantized query (q8_0 blocks: integer
// dot products), which a tile without the quantized-query buffers does not
// quantize: it scores the decoded keys with the f32 query. With them (blocks
// of 32) it takes the same integers.
TEST(FoldTile, ScalarEqualsOneTokenFolds) {
  double worst_float = 0, worst_int = 0, worst_tile_int = 0;
  for (const TileCase& c : kCases)
    for (KvType tk : testing::kAllKvTypes) {
      const KvType tv = tk == KvType::kF32 ? KvType::kQ4_0 : KvType::kF16;
      SCOPED_TRACE(::testing::Message() << KvTypeName(tk) << "/" << KvTypeName(tv) << " hd "
                                        << c.head_dim << " tokens " << c.n_tokens);
      const uint32_t seed = c.head_dim * 17 + c.n_tokens;
      const double w = Worst(RunTile(How::kTileScalar, c, tk, tv, seed), RunTile(How::kOneByOne, c, tk, tv, seed));
      if (IntegerScored(c, tk)) {
        // With the quantized-query buffers the tile's integers are the one-token
        // fold's (the same quants of the query): only f32 rounding differs.
        const double wi = Worst(RunTile(How::kTileScalar, c, tk, tv, seed, false, true),
                                RunTile(How::kOneByOne, c, tk, tv, seed));
        ASSERT_LE(wi, 1e-5) << "integer scores";
        worst_tile_int = std::max(worst_tile_int, wi);
      }
      if (KvTypeQuantized(tk)) {
        ASSERT_LE(w, 0.12);  // measured: at most 0.079 (q4_0 keys in blocks of 16)
        worst_int = std::max(worst_int, w);
      } else {
        ASSERT_LE(w, 1e-5);
        worst_float = std::max(worst_float, w);
      }
    }
  std::printf(
      "largest relative difference: %.3g (float keys), %.3g (block-type keys, f32 tile scores), "
      "%.3g (integer tile scores)\n",
      worst_float, worst_int, worst_tile_int);
}

}  // namespace
}  // namespace rotor
