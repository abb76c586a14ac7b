// Matmul on every ISA against ops/ref on seeded random data of odd sizes.
//
// Error bounds (per output y = sum_j w_j x_j; k terms, nb = k / 32 blocks):
// - Fast vs ref, f32/f16/bf16: the weights convert exactly to f32, so both
//   compute the same exact products; ref sums them in double, the fast paths
//   in f32 lanes (each lane a chain of <= k / 8 FMAs, then a reduction tree of
//   <= 16 adds, plus one add per k-chunk). Higham's bound for a chain of n
//   roundings: |err| <= n * u * sum |w_j x_j|, u = 2^-24; we use n = k / 8 + 64.
// - Fast vs ref, q8_0/q4_0: same quantized activations (checked bitwise in
//   quant_test) and exact int32 block sums; both round s_b = d_w * d_x to f32
//   identically; the fast paths accumulate s_b * (lane partial sums) in f32
//   lanes: |err| <= (nb + 64) * u * sum_j |w_j| |qx_j| d_x.
// - Fast vs exact f32 math (loose), q types: activation rounding moves each
//   x_j by at most d_x(block) / 2 (plus a few ulps of x_j from the f32
//   reciprocal), so |err| <= sum_j |w_j| d_x / 2 + 1e-6 sum |w_j x_j| + the
//   bound above. That is about 1/254 of the block's largest |x| per element.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "base/memory.h"
#include "base/thread_pool.h"
#include "ops/kernels.h"
#include "ops/quant.h"
#include "ops/ref/ref.h"
#include "ops_test_util.h"
#include "sanitizers/sweep.h"

namespace rotor::ops {
namespace {

using ::rotor::testing::Sweep;
using testing::kEps;

struct Case {
  DType type;
  int64_t k, n;
};

bool IsQuant(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

// The weights as stored (type t) and their exact f32 values.
struct TestWeight {
  std::vector<uint8_t> bytes;  // [n, RowBytes(t, k)]
  std::vector<float> deq;      // [n, k]
  Weight view;
  AlignedBuffer<uint8_t> packed;  // [PackedWeightBytes] when Pack() was called
  // Adds the row-interleaved copy, packed in two row ranges.
  void Pack() {
    packed.Resize(static_cast<size_t>(PackedWeightBytes(view)));
    const int64_t half = std::min<int64_t>(view.n, (view.n / 2 + 31) / 32 * 32);
    PackWeight(view, packed.data(), 0, half);
    PackWeight(view, packed.data(), half, view.n);
    view.packed = packed.data();
  }
};

TestWeight MakeWeight(DType t, int64_t k, int64_t n, uint32_t seed) {
  TestWeight w;
  const int64_t rb = RowBytes(t, k);
  w.bytes.resize(n * rb);
  w.deq.resize(n * k);
  std::vector<float> src = testing::RandomVector(n * k, seed, 0.5f);  // [n, k]
  for (int64_t r = 0; r < n; ++r) {
    QuantizeRow(t, src.data() + r * k, w.bytes.data() + r * rb, k);
    ref::DequantizeRow(t, w.bytes.data() + r * rb, w.deq.data() + r * k, k);
  }
  w.view = ops::MakeWeight(t, k, n, w.bytes.data());
  return w;
}

// The sweeps check each weight on many (ISA, m, threads) combinations: it
// is quantized (and packed) once per program, not once per combination
// (making the K-quant weights was 70% of the sweeps' time).
const TestWeight& SharedWeight(DType t, int64_t k, int64_t n, uint32_t seed, bool packed) {
  using Key = std::tuple<DType, int64_t, int64_t, uint32_t, bool>;
  static std::map<Key, std::unique_ptr<TestWeight>> weights;
  std::unique_ptr<TestWeight>& w = weights[Key{t, k, n, seed, packed}];
  if (w == nullptr) {
    w = std::make_unique<TestWeight>(MakeWeight(t, k, n, seed));
    if (packed) w->Pack();
  }
  return *w;
}

void CheckCase(ThreadPool& pool, const Case& c, int64_t m, Isa isa, bool packed = false) {
  SCOPED_TRACE(::testing::Message() << "isa=" << IsaName(isa) << " type=" << DTypeName(c.type)
                                    << " k=" << c.k << " n=" << c.n << " m=" << m
                                    << " threads=" << pool.size() << (packed ? " packed" : ""));
  const TestWeight& w =
      SharedWeight(c.type, c.k, c.n, static_cast<uint32_t>(c.k * 131 + c.n), packed);
  const std::vector<float> x =
      testing::RandomVector(m * c.k, static_cast<uint32_t>(m + 7));  // [m, k]
  const int64_t ldy = c.n + 3;
  std::vector<float> y(m * ldy, -12345.f);   // [m, ldy]
  std::vector<float> yr(m * ldy, -12345.f);  // [m, ldy]
  MatmulScratch scratch(m, c.k);
  {
    testing::ScopedIsa scoped(isa);
    Matmul(pool, w.view, x.data(), m, y.data(), ldy, scratch);
  }
  ref::Matmul(w.view, x.data(), m, yr.data(), ldy);

  const int64_t nb = (c.k + 31) / 32;
  std::vector<int8_t> qx(c.k);  // [k]
  std::vector<float> dx(nb);    // [nb]
  int bad = 0;
  for (int64_t t = 0; t < m; ++t) {
    const float* xt = x.data() + t * c.k;
    if (IsQuant(c.type)) ref::QuantizeActivations(xt, qx.data(), dx.data(), c.k);
    for (int64_t r = 0; r < c.n; ++r) {
      const float* wr = w.deq.data() + r * c.k;
      double exact = 0, mag = 0, mag_q = 0, quant_err = 0;
      for (int64_t j = 0; j < c.k; ++j) {
        exact += static_cast<double>(wr[j]) * xt[j];
        mag += std::fabs(static_cast<double>(wr[j]) * xt[j]);
        if (IsQuant(c.type)) {
          mag_q += std::fabs(static_cast<double>(wr[j]) * qx[j]) * dx[j / 32];
          quant_err += std::fabs(wr[j]) * dx[j / 32] * 0.5;
        }
      }
      const double got = y[t * ldy + r], want = yr[t * ldy + r];
      const double tight =
          IsQuant(c.type) ? (nb + 64) * kEps * mag_q : (c.k / 8.0 + 64) * kEps * mag;
      const double loose = quant_err + 1e-6 * mag + tight + 1e-30;
      if (std::fabs(got - want) > tight + 1e-30 || std::fabs(got - exact) > loose) {
        if (++bad <= 5)
          ADD_FAILURE() << "t=" << t << " r=" << r << " got " << got << " ref " << want << " exact "
                        << exact << " (tight " << tight << ", loose " << loose << ")";
      }
    }
    for (int64_t r = c.n; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -12345.f) << "wrote past n";
  }
  EXPECT_EQ(bad, 0);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t k : {1, 7, 33, 4099})
      for (int64_t n : {1, 7, 33}) cases.push_back({t, k, n});
    cases.push_back({t, 64, 4099});
    cases.push_back({t, 768, 37});
  }
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t k : {32, 64, 96, 4096 + 32})
      for (int64_t n : {1, 7, 33}) cases.push_back({t, k, n});
    cases.push_back({t, 96, 4099});
    cases.push_back({t, 768, 37});
  }
  return cases;
}

class MatmulTest : public ::testing::TestWithParam<int> {};

TEST_P(MatmulTest, MatchesReferenceOnEveryIsa) {
  ThreadPool pool(GetParam());
  const std::vector<Case> cases = Cases();
  Sweep sweep(4);  // under the sanitizers: every ISA, case and m, fewer combinations
  for (Isa isa : testing::Isas())
    for (const Case& c : cases)
      for (int64_t m : {1, 2, 3, 7, 16, 33}) {
        if (c.n * c.k * m > 3'000'000 && m > 7) continue;  // the slow reference; m = 1..7 still run
        if (!sweep.Next(
                {static_cast<int>(isa), static_cast<int>(&c - cases.data()), static_cast<int>(m)}))
          continue;
        CheckCase(pool, c, m, isa);
      }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// Row-interleaved q8_0 / q4_0 (the AVX-512 and AVX2 kernels read the packed
// copy; the scalar ISA the rows): the same bounds. The packed kernel accumulates the scaled block
// sums of a row one block after the other, nb roundings.
TEST_P(MatmulTest, PackedMatchesReferenceOnEveryIsa) {
  ThreadPool pool(GetParam());
  std::vector<Case> cases;
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t k : {32, 64, 96, 4096 + 32})
      for (int64_t n : {1, 7, 16, 33}) cases.push_back({t, k, n});
    cases.push_back({t, 96, 4099});
  }
  Sweep sweep(5);
  for (Isa isa : testing::Isas())
    for (const Case& c : cases)
      for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 33}) {  // 5, 6: each pass's rest
        if (c.n * c.k * m > 3'000'000 && m > 8) continue;
        if (!sweep.Next(
                {static_cast<int>(isa), static_cast<int>(&c - cases.data()), static_cast<int>(m)}))
          continue;
        CheckCase(pool, c, m, isa, /*packed=*/true);
      }
  EXPECT_TRUE(sweep.EveryValueRan());
}

INSTANTIATE_TEST_SUITE_P(Threads, MatmulTest, ::testing::Values(1, 2, 3));

// A token's outputs from packed weights do not depend on the other tokens of
// the call (tile position, tile size, thread split): bit for bit.
// AVX-512 and AVX2, every packed type.
TEST(MatmulPackedTest, EachTokenAloneEqualsInABatch) {
  std::vector<Isa> isas;
  for (Isa isa : testing::Isas())
    if (isa != Isa::kScalar) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "the packed kernels are AVX2 and AVX-512";
  for (Isa isa : isas) {
    for (int threads : {1, 2}) {
      testing::ScopedIsa scoped(isa);
      ThreadPool pool(threads);
      for (const Case& c : {Case{DType::kQ8_0, 96, 37}, Case{DType::kQ8_0, 4096 + 32, 33},
                            Case{DType::kQ4_0, 160, 45}, Case{DType::kQ4_0, 4096 + 32, 17},
                            Case{DType::kQ5_0, 160, 45}, Case{DType::kIQ4_NL, 896, 37},
                            Case{DType::kQ2_K, 512, 23}, Case{DType::kQ2_K, 4096, 17},
                            Case{DType::kQ3_K, 768, 37}, Case{DType::kQ3_K, 4096, 17},
                            Case{DType::kQ4_K, 512, 37}, Case{DType::kQ5_K, 768, 19},
                            Case{DType::kQ6_K, 512, 45}, Case{DType::kQ6_K, 4096, 17}}) {
        TestWeight w = MakeWeight(c.type, c.k, c.n, 3);
        w.Pack();
        const int64_t m_max = 300;
        const std::vector<float> x = testing::RandomVector(m_max * c.k, 9, 2.f);  // [m_max, k]
        MatmulScratch scratch(m_max, c.k, threads);
        std::vector<float> alone(m_max * c.n);  // [m_max, n]
        for (int64_t t = 0; t < m_max; ++t)
          Matmul(pool, w.view, x.data() + t * c.k, 1, alone.data() + t * c.n, c.n, scratch);
        // 9-16: one kernel for two tiles (AVX-512 q8_0 / q4_0; q4_0 splits
        // the second tile's tokens 4 + the rest past 12).
        for (int64_t m : {2, 3, 5, 6, 8, 9, 12, 13, 16, 17, 300}) {
          if (c.k > 1000 && m == 300) continue;
          std::vector<float> y(m * c.n);  // [m, n]
          Matmul(pool, w.view, x.data(), m, y.data(), c.n, scratch);
          for (int64_t i = 0; i < m * c.n; ++i)
            ASSERT_EQ(y[i], alone[i]) << IsaName(isa) << " k " << c.k << " m " << m << " token "
                                      << i / c.n << " row " << i % c.n << " threads " << threads;
        }
      }
    }
  }
}

// f32 / f16 / bf16 weights: a token's outputs do not depend on the other
// tokens of the call (m == 1, the small-batch kernel, the panels; tile
// position, thread split): bit for bit, on every ISA (kernels.h, kFloatSumK).
// k covers a lone partial chunk, whole chunks, groups of 4 chunks side by
// side plus a partial one, and tails that are not a multiple of the vector.
TEST(MatmulFloatTest, EachTokenAloneEqualsInABatch) {
  Sweep sweep(3);  // under the sanitizers: every ISA, type and k, fewer m
  for (Isa isa : testing::Isas()) {
    for (int threads : {1, 2}) {
      testing::ScopedIsa scoped(isa);
      ThreadPool pool(threads);
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (const int64_t k : {int64_t{33}, int64_t{288}, int64_t{777}, int64_t{1040},
                                int64_t{2311}}) {
          const int64_t n = 13 + k % 29;
          const TestWeight& w = SharedWeight(t, k, n, static_cast<uint32_t>(k + 1), false);
          const int64_t m_max = k > 1000 ? 40 : 300;
          const std::vector<float> x = testing::RandomVector(m_max * k, 9, 2.f);  // [m_max, k]
          MatmulScratch scratch(m_max, k, threads);
          std::vector<float> alone(m_max * n);  // [m_max, n]
          for (int64_t i = 0; i < m_max; ++i)
            Matmul(pool, w.view, x.data() + i * k, 1, alone.data() + i * n, n, scratch);
          for (int64_t m : {2, 3, 5, 6, 9, 16, 17, 40, 300}) {
            if (m > m_max) continue;
            if (!sweep.Next({static_cast<int>(isa), threads, static_cast<int>(t),
                             static_cast<int>(k), static_cast<int>(m)}))
              continue;
            std::vector<float> y(m * n);  // [m, n]
            Matmul(pool, w.view, x.data(), m, y.data(), n, scratch);
            for (int64_t i = 0; i < m * n; ++i)
              ASSERT_EQ(y[i], alone[i]) << IsaName(isa) << " " << DTypeName(t) << " k " << k
                                        << " m " << m << " token " << i / n << " row " << i % n
                                        << " threads " << threads;
          }
        }
      }
    }
  }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// The other block types: q4_1, q5_0, q5_1 and iq4_nl run the f32 order on
// dequantized rows for every m; unpacked K-quants the integer kernel up to
// kGemvKMaxTokens tokens (in tiles of several tokens and token by token; more:
// the f32 panels, another rounding of x). A token alone equals its outputs in
// a batch, bit for bit.
TEST(MatmulBlockTypesTest, EachTokenAloneEqualsInABatch) {
  Sweep sweep(3);
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    ThreadPool pool(2);
    for (const Case& c : {Case{DType::kQ4_1, 96, 37}, Case{DType::kQ5_0, 800, 19},
                          Case{DType::kQ5_1, 1056, 13}, Case{DType::kIQ4_NL, 288, 21},
                          Case{DType::kQ2_K, 512, 17}, Case{DType::kQ3_K, 768, 19},
                          Case{DType::kQ4_K, 256, 9}, Case{DType::kQ5_K, 512, 11},
                          Case{DType::kQ6_K, 1280, 7}}) {
      const TestWeight& w = SharedWeight(c.type, c.k, c.n, 5, false);
      const int64_t m_max =
          Traits(c.type).block_size == 256 ? internal::kGemvKMaxTokens : int64_t{40};
      const std::vector<float> x = testing::RandomVector(m_max * c.k, 9, 2.f);  // [m_max, k]
      MatmulScratch scratch(m_max, c.k, 2);
      std::vector<float> alone(m_max * c.n);  // [m_max, n]
      for (int64_t i = 0; i < m_max; ++i)
        Matmul(pool, w.view, x.data() + i * c.k, 1, alone.data() + i * c.n, c.n, scratch);
      for (int64_t m : {2, 3, 5, 8, 13, 16, 17, 40}) {
        if (m > m_max || !sweep.Next({static_cast<int>(isa), static_cast<int>(c.type)})) continue;
        std::vector<float> y(m * c.n);  // [m, n]
        Matmul(pool, w.view, x.data(), m, y.data(), c.n, scratch);
        for (int64_t i = 0; i < m * c.n; ++i)
          ASSERT_EQ(y[i], alone[i]) << IsaName(isa) << " " << DTypeName(c.type) << " k " << c.k
                                    << " m " << m << " token " << i / c.n << " row " << i % c.n;
      }
    }
  }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// The AVX2 packed kernels run the AVX-512 ones' integer block sums and f32
// steps: the same outputs, bit for bit (only where both ISAs run).
TEST(MatmulPackedTest, Avx2EqualsAvx512BitForBit) {
  if (BestIsa() != Isa::kAvx512) GTEST_SKIP() << "needs AVX-512 beside AVX2";
  ThreadPool pool(2);
  for (const Case& c :
       {Case{DType::kQ8_0, 96, 37}, Case{DType::kQ8_0, 2048, 33}, Case{DType::kQ4_0, 160, 45},
        Case{DType::kQ4_0, 2048, 17}, Case{DType::kQ5_0, 896, 21}, Case{DType::kIQ4_NL, 288, 33},
        Case{DType::kQ2_K, 768, 21}, Case{DType::kQ3_K, 1024, 29},
        Case{DType::kQ4_K, 512, 37}, Case{DType::kQ5_K, 768, 19}, Case{DType::kQ6_K, 2048, 45}}) {
    TestWeight w = MakeWeight(c.type, c.k, c.n, 5);
    w.Pack();
    for (int64_t m : {1, 2, 5, 8, 13, 16}) {
      const std::vector<float> x = testing::RandomVector(m * c.k, 17, 2.f);  // [m, k]
      MatmulScratch scratch(m, c.k, 2);
      std::vector<float> y2(m * c.n), y5(m * c.n);  // [m, n]
      {
        testing::ScopedIsa scoped(Isa::kAvx2);
        Matmul(pool, w.view, x.data(), m, y2.data(), c.n, scratch);
      }
      Matmul(pool, w.view, x.data(), m, y5.data(), c.n, scratch);
      ASSERT_EQ(y2, y5) << DTypeName(c.type) << " k " << c.k << " m " << m;
    }
  }
}

// The AVX-512 activation tiles (quantized and laid out in one pass) hold the
// bytes of the reference: QuantizeActivations, then PackActivations per token.
// Blocks of zeros, of one tiny value and of halves that round away from zero
// (with a scale of 1 and of 2, and the values beside those halves);
// partial tiles; block ranges that start and end inside the row.
TEST(MatmulPackedTest, Avx512ActivationTilesEqualTheReference) {
  if (BestIsa() != Isa::kAvx512) GTEST_SKIP() << "needs AVX-512";
  for (int64_t k : {32, 96, 800}) {
    const int64_t nb = k / 32;
    for (int64_t m : {1, 2, 3, 4, 6, 7, 8, 9, 13, 15, 16, 17}) {  // tiles of every size
      std::vector<float> x = testing::RandomVector(m * k, 23 + static_cast<uint32_t>(m), 3.f);
      std::fill(x.begin(), x.begin() + 32, 0.f);  // token 0, block 0: zeros
      if (nb > 1) x[32 + 5] = 1e-30f;             // block 1: one tiny value
      if (nb > 2) {  // block 2: amax 254, so x / d halves x: odd values and their neighbours
        float* b2 = x.data() + 64;  // [32]
        for (int i = 0; i < 31; ++i) {
          const float odd = static_cast<float>(2 * (i - 15) + 1);
          b2[i] = i % 3 == 0 ? odd : std::nextafter(odd, i % 3 == 1 ? 1e9f : -1e9f);
        }
        // 0.49999997 after the scale: the product below a half whose sum with
        // 0.5 would round up to 1 (RoundHalfAway's constant is 0.5 - 2^-25)
        b2[0] = std::nextafter(1.f, 0.f), b2[1] = -b2[0];
        b2[31] = -254.f;
      }
      // The last token's last block: amax 127, so d = 1 and every other value
      // is a half that roundf takes away from zero.
      float* halves = x.data() + (m - 1) * k + (nb - 1) * 32;  // [32]
      for (int i = 0; i < 31; ++i) halves[i] = static_cast<float>(i) - 15.5f;
      halves[31] = 127.f;
      const int64_t bytes = m * nb * internal::kPackedActBytes;
      for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, nb}, {nb / 3, nb - nb / 4}}) {
        std::vector<uint8_t> want(bytes, 0xAB), got(bytes, 0xAB);  // [m, nb, 56] in tiles
        std::vector<int8_t> q(k);                                  // [k]
        std::vector<float> d(nb);                                  // [nb]
        for (int64_t t = 0; t < m; ++t) {
          ref::QuantizeActivations(x.data() + t * k, q.data(), d.data(), k);
          ref::PackActivations(q.data(), d.data(), t, m, k, j0, j1, want.data());
        }
        internal::avx512::PackActivationTiles(x.data(), m, k, j0, j1, got.data());
        ASSERT_EQ(got, want) << "k " << k << " m " << m << " blocks [" << j0 << ", " << j1 << ")";
      }
    }
  }
}

// A large m exercises several token chunks and the full register tiles.
TEST(MatmulLargeTest, ManyTokens) {
  ThreadPool pool(2);
  for (Isa isa : testing::Isas())
    for (DType t : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0})
      CheckCase(pool, {t, 256, 45}, 300, isa);
}

TEST(MatmulScratchTest, GrowsForLargerPools) {
  MatmulScratch scratch(4, 64, 1);
  ThreadPool pool(3);
  TestWeight w = MakeWeight(DType::kQ8_0, 64, 40, 1);
  std::vector<float> x = testing::RandomVector(4 * 64, 2);  // [4, 64]
  std::vector<float> y(4 * 40), yr(4 * 40);                 // [4, 40]
  Matmul(pool, w.view, x.data(), 4, y.data(), 40, scratch);
  ref::Matmul(w.view, x.data(), 4, yr.data(), 40);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], yr[i], 1e-4 * (1 + std::fabs(yr[i])));
}

// Rows with zero scale (all-zero blocks) and zero activations give exact zeros.
TEST(MatmulEdgeTest, ZeroBlocks) {
  ThreadPool pool(2);
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      std::vector<float> wsrc(9 * 96, 0.f);  // [9, 96]
      std::vector<uint8_t> bytes(9 * RowBytes(t, 96));
      for (int r = 0; r < 9; ++r)
        QuantizeRow(t, wsrc.data() + r * 96, bytes.data() + r * RowBytes(t, 96), 96);
      std::vector<float> x(3 * 96, 0.f), y(3 * 9, 1.f);  // [3, 96], [3, 9]
      x[5] = 3.f;
      MatmulScratch scratch(3, 96);
      Matmul(pool, ops::MakeWeight(t, 96, 9, bytes.data()), x.data(), 3, y.data(), 9, scratch);
      for (float v : y) EXPECT_EQ(v, 0.f) << DTypeName(t) << " " << IsaName(isa);
    }
  }
}

// The block types beyond q8_0 / q4_0 against dequantize-then-dot in double.
// Bound per output: the f32 paths (dequantized weights, x unquantized):
// (k / 8 + 64) u sum |w x|; the K-quant integer kernels (AVX-512 / AVX2,
// m <= kGemvKMaxTokens) quantize x as q8_0 does: + sum_j |w_j| d_x / 2 +
// 1e-6 sum |w x| (the reciprocal's ulps), + (k / 4 + 64) u sum |w| (|x| + d_x).
// Packed (row-interleaved) weights on AVX2 and AVX-512 quantize x for every m.
bool QuantizesActivations(DType t, int64_t m, Isa isa, bool packed) {
  if (packed && isa != Isa::kScalar) return true;
  return isa != Isa::kScalar && m <= internal::kGemvKMaxTokens &&
         internal::HasIntegerGemv(t, isa == Isa::kAvx512);
}

void CheckBlockCase(ThreadPool& pool, const Case& c, int64_t m, Isa isa, bool packed = false) {
  SCOPED_TRACE(::testing::Message()
               << "isa=" << IsaName(isa) << " type=" << DTypeName(c.type) << " k=" << c.k
               << " n=" << c.n << " m=" << m << (packed ? " packed" : ""));
  const TestWeight& w =
      SharedWeight(c.type, c.k, c.n, static_cast<uint32_t>(c.k * 17 + c.n), packed);
  const std::vector<float> x = testing::RandomVector(m * c.k, static_cast<uint32_t>(m + 3));
  const int64_t ldy = c.n + 1;
  std::vector<float> y(m * ldy, -12345.f);  // [m, ldy]
  MatmulScratch scratch(m, c.k);
  {
    testing::ScopedIsa scoped(isa);
    Matmul(pool, w.view, x.data(), m, y.data(), ldy, scratch);
  }
  const bool qa = QuantizesActivations(c.type, m, isa, packed);
  std::vector<int8_t> qx(c.k);      // [k]
  std::vector<float> dx(c.k / 32);  // [k / 32]
  int bad = 0;
  for (int64_t t = 0; t < m; ++t) {
    const float* xt = x.data() + t * c.k;
    ref::QuantizeActivations(xt, qx.data(), dx.data(), c.k);
    for (int64_t r = 0; r < c.n; ++r) {
      const float* wr = w.deq.data() + r * c.k;
      double exact = 0, mag = 0, quant_err = 0, mag_q = 0;
      for (int64_t j = 0; j < c.k; ++j) {
        exact += static_cast<double>(wr[j]) * xt[j];
        mag += std::fabs(static_cast<double>(wr[j]) * xt[j]);
        quant_err += std::fabs(wr[j]) * dx[j / 32] * 0.5;
        mag_q += std::fabs(wr[j]) * (std::fabs(xt[j]) + dx[j / 32]);
      }
      double bound = (c.k / 8.0 + 64) * kEps * mag + 1e-30;
      if (qa) bound += quant_err + 1e-6 * mag + (c.k / 4.0 + 64) * kEps * mag_q;
      const double got = y[t * ldy + r];
      if (!(std::fabs(got - exact) <= bound) && ++bad <= 5)
        ADD_FAILURE() << "t=" << t << " r=" << r << " got " << got << " exact " << exact
                      << " bound " << bound;
    }
    for (int64_t r = c.n; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -12345.f) << "wrote past n";
  }
  EXPECT_EQ(bad, 0);
}

TEST(MatmulBlockTypesTest, EveryTypeIsaAndBatch) {
  ThreadPool pool(2);
  std::vector<Case> cases;
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t n : {1, 7, 33}) cases.push_back({t, 256, n});
    cases.push_back({t, 768, 37});
    cases.push_back({t, 256, 4099});
  }
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL}) {
    for (int64_t n : {1, 7, 33}) cases.push_back({t, 96, n});
    cases.push_back({t, 768, 37});
    cases.push_back({t, 32, 4099});
  }
  Sweep sweep(5);  // under the sanitizers: every ISA, case and m, fewer combinations
  for (Isa isa : testing::Isas())
    for (const Case& c : cases)
      for (int64_t m : {1, 3, 8, 17, 70}) {
        if (c.n > 1000 && m > 8) continue;  // the double reference; the kernels repeat per chunk
        if (!sweep.Next(
                {static_cast<int>(isa), static_cast<int>(&c - cases.data()), static_cast<int>(m)}))
          continue;
        CheckBlockCase(pool, c, m, isa);
      }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// Row-interleaved q2_K .. q6_K, and q5_0 / iq4_nl in q8_0's layout
// (PackWeight): the AVX-512 and AVX2 kernels read the packed copy for every
// m (the scalar ISA the rows), within the same bound.
// n covers partial groups of 16 rows; k up to 16 super-blocks.
TEST(MatmulBlockTypesTest, PackedKQuantsEveryIsaAndBatch) {
  Sweep sweep(7);  // under the sanitizers: every thread count, ISA, case and m, fewer combinations
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<Case> cases;
    for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      for (int64_t n : {1, 7, 16, 33}) cases.push_back({t, 256, n});
      cases.push_back({t, 768, 37});
      cases.push_back({t, 4096, 17});
      cases.push_back({t, 256, 4099});
    }
    for (DType t : {DType::kQ5_0, DType::kIQ4_NL}) {
      for (int64_t n : {1, 33}) cases.push_back({t, 96, n});
      cases.push_back({t, 896, 37});
      cases.push_back({t, 32, 4099});
    }
    for (Isa isa : testing::Isas())
      for (const Case& c : cases)
        for (int64_t m : {1, 2, 3, 5, 7, 8, 9, 17, 70}) {
          if (c.n * c.k * m > 3'000'000 && m > 8) continue;  // the double reference
          if (threads != 2 && (m == 70 || c.n > 1000)) continue;
          if (!sweep.Next({threads, static_cast<int>(isa), static_cast<int>(&c - cases.data()),
                           static_cast<int>(m)}))
            continue;
          CheckBlockCase(pool, c, m, isa, /*packed=*/true);
        }
  }
  EXPECT_TRUE(sweep.EveryValueRan());
}

// The integer kernels' activation quantization is what the bound above
// allows for: with x exactly representable (d_x = 1, integer x) they are exact
// up to f32 accumulation.
TEST(MatmulBlockTypesTest, IntegerActivationsExact) {
  ThreadPool pool(1);
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
      for (bool packed : {false, true}) {
        if (packed && !internal::IsPackedK(t)) continue;
        TestWeight w = MakeWeight(t, 512, 9, 5);
        if (packed) w.Pack();
        std::vector<float> x(512);  // [512] integers in [-127, 127], each block's amax 127
        for (int j = 0; j < 512; ++j)
          x[j] = j % 32 == 0 ? 127.f : static_cast<float>((j * 37) % 255 - 127);
        std::vector<float> y(9);
        MatmulScratch scratch(1, 512);
        Matmul(pool, w.view, x.data(), 1, y.data(), 9, scratch);
        for (int r = 0; r < 9; ++r) {
          double exact = 0, mag = 0;
          for (int j = 0; j < 512; ++j) {
            exact += static_cast<double>(w.deq[r * 512 + j]) * x[j];
            mag += std::fabs(static_cast<double>(w.deq[r * 512 + j]) * x[j]);
          }
          EXPECT_LE(std::fabs(y[r] - exact), (512 / 4.0 + 64) * kEps * mag)
              << DTypeName(t) << " " << IsaName(isa) << " r=" << r << (packed ? " packed" : "");
        }
      }
  }
}

}  // namespace
}  // namespace rotor::ops

namespace rotor::ops {
namespace {

// A group gives exactly the separate Matmuls' results (same kernels, same
// rows): for every fusable type and for groups that must fall back (mixed
// types, a block type without a fused path), on every ISA, 1 and 2 threads.
TEST(MatmulGroupTest, EqualsSeparateMatmulsBitForBit) {
  struct G {
    DType types[3];
    int64_t k;
    bool packed = false;  // row-interleaved copies
  };
  const G groups[] = {{{DType::kF32, DType::kF32, DType::kF32}, 96},
                      {{DType::kF16, DType::kF16, DType::kF16}, 64},
                      {{DType::kBF16, DType::kBF16, DType::kBF16}, 33},
                      {{DType::kQ8_0, DType::kQ8_0, DType::kQ8_0}, 96},
                      {{DType::kQ8_0, DType::kQ8_0, DType::kQ8_0}, 96, true},
                      {{DType::kQ4_0, DType::kQ4_0, DType::kQ4_0}, 160, true},
                      {{DType::kQ4_0, DType::kQ8_0, DType::kQ4_0}, 64, true},
                      {{DType::kQ4_0, DType::kQ4_0, DType::kQ4_0}, 160},
                      {{DType::kQ4_K, DType::kQ4_K, DType::kQ4_K}, 256},
                      {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, 256},
                      {{DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}, 512, true},
                      {{DType::kQ3_K, DType::kQ3_K, DType::kQ6_K}, 256, true},
                      {{DType::kQ2_K, DType::kQ3_K, DType::kQ2_K}, 512, true},
                      {{DType::kQ5_0, DType::kQ8_0, DType::kIQ4_NL}, 96, true},
                      {{DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}, 256, true}};
  const int64_t ns[3] = {37, 8, 13};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (Isa isa : testing::Isas()) {
      testing::ScopedIsa scoped(isa);
      for (const G& g : groups) {
        std::vector<TestWeight> ws;
        for (int i = 0; i < 3; ++i) {
          ws.push_back(MakeWeight(g.types[i], g.k, ns[i], 11 + i));
          if (g.packed) ws.back().Pack();
        }
        for (int64_t m : {1, 3, 8, 17}) {
          std::vector<float> x = testing::RandomVector(m * g.k, 5, 1.f);  // [m, k]
          MatmulScratch scratch(m, g.k, threads);
          std::vector<std::vector<float>> want(3), got(3);  // each [m, n_i + 2]
          std::vector<MatmulOut> outs;
          for (int i = 0; i < 3; ++i) {
            const int64_t ldy = ns[i] + 2;
            want[i].assign(m * ldy, -7.f);
            got[i].assign(m * ldy, -7.f);
            Matmul(pool, ws[i].view, x.data(), m, want[i].data(), ldy, scratch);
          }
          for (int i = 0; i < 3; ++i) outs.push_back({&ws[i].view, got[i].data(), ns[i] + 2});
          MatmulGroup(pool, outs, x.data(), m, scratch);
          for (int i = 0; i < 3; ++i)
            ASSERT_EQ(got[i], want[i])
                << DTypeName(g.types[i]) << " k " << g.k << " m " << m << " weight " << i << " "
                << IsaName(isa) << " threads " << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotor::ops
