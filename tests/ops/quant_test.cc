// Row conversions and row dot products on every ISA, against ops/ref, the
// GGML test vectors and round-trip error bounds.
#include "ops/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "ops/matmul.h"
#include "ops/kernels.h"
#include "ops/ref/ref.h"
#include "ops_test_util.h"
#include "tensor/fp16.h"

namespace rotor::ops {
namespace {

using testing::kEps;

constexpr DType kBasic[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
constexpr DType kAll[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,  DType::kQ4_0,
                          DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                          DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

bool IsQuant(DType t) { return Traits(t).block_size > 1; }

std::vector<int64_t> Sizes(DType t) {
  if (Traits(t).block_size == 256) return {256, 768, 4096 + 256};
  if (IsQuant(t)) return {32, 64, 96, 4096 + 32};
  return {1, 7, 33, 4099};
}

std::vector<uint8_t> Quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

// Units in the last place between two floats of the same sign (0 if equal).
int64_t UlpDistance(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || (a < 0) != (b < 0)) return INT64_MAX;
  return std::llabs(static_cast<int64_t>(FloatToBits(a)) - static_cast<int64_t>(FloatToBits(b)));
}

// The fast paths convert with the same single f32 multiply d * q (or an exact
// widening), so they must equal the scalar reference bit for bit.
TEST(QuantTest, DequantizeMatchesReferenceExactly) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (DType t : kAll)
      for (int64_t n : Sizes(t)) {
        const std::vector<uint8_t> q =
            Quantized(t, testing::RandomVector(n, static_cast<uint32_t>(n)));
        std::vector<float> got(n), want(n);
        DequantizeRow(t, q.data(), got.data(), n);
        ref::DequantizeRow(t, q.data(), want.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(FloatToBits(got[i]), FloatToBits(want[i]))
              << IsaName(isa) << " " << DTypeName(t) << " i=" << i;
      }
  }
}

// Round trip bounds: f16 and bf16 round to nearest (relative 2^-11, 2^-8 for
// normal values); q8_0 |x - d16 q| <= d / 2 + |d - d16| * 127 <= amax / 254 +
// amax * 2^-11 (d16 is d rounded to f16); q4_0 |x - d16 q'| <= |d| + |d - d16| * 8,
// |d| = amax / 8: half a step, except values of the opposite sign to the
// largest one, which clamp at 7 d while reaching up to 8 d (GGML's asymmetry).
TEST(QuantTest, RoundTripWithinBounds) {
  for (DType t : kBasic)
    for (int64_t n : Sizes(t)) {
      const std::vector<float> x = testing::RandomVector(n, static_cast<uint32_t>(3 * n));
      const std::vector<uint8_t> q = Quantized(t, x);
      std::vector<float> back(n);
      DequantizeRow(t, q.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        double bound = 0;
        const int64_t b0 = i / 32 * 32;
        float amax = 0;
        for (int64_t j = b0; IsQuant(t) && j < b0 + 32; ++j)
          amax = std::fmax(amax, std::fabs(x[j]));
        switch (t) {
          case DType::kF32:
            bound = 0;
            break;
          case DType::kF16:
            bound = std::fabs(x[i]) * std::ldexp(1.0, -11);
            break;
          case DType::kBF16:
            bound = std::fabs(x[i]) * std::ldexp(1.0, -8);
            break;
          case DType::kQ8_0:
            bound = amax / 254.0 + amax * std::ldexp(1.0, -11);
            break;
          default:
            bound = amax / 8.0 + amax * std::ldexp(1.0, -11);
            break;
        }
        ASSERT_LE(std::fabs(back[i] - x[i]), bound * (1 + 1e-6))
            << DTypeName(t) << " n=" << n << " i=" << i;
      }
    }
}

TEST(QuantTest, GgmlScaleChoice) {
  std::vector<float> x(32);  // [32]
  for (int i = 0; i < 32; ++i)
    x[i] = 0.1f * static_cast<float>(i - 20);  // amax 2.0 at i = 0 (negative)
  BlockQ8_0 b8;
  QuantizeRow(DType::kQ8_0, x.data(), &b8, 32);
  EXPECT_EQ(b8.d, F32ToF16(2.0f / 127.f));
  EXPECT_EQ(b8.qs[0], -127);
  EXPECT_EQ(b8.qs[20], 0);
  EXPECT_EQ(b8.qs[21], static_cast<int8_t>(std::roundf(0.1f * (127.f / 2.0f))));
  // q4_0: d = max / -8 with max the signed value of largest magnitude (-2.0):
  // d = 0.25 and x = -2.0 maps to nibble 0; x = 0 maps to 8.
  BlockQ4_0 b4;
  QuantizeRow(DType::kQ4_0, x.data(), &b4, 32);
  EXPECT_EQ(b4.d, F32ToF16(0.25f));
  EXPECT_EQ(b4.qs[0] & 15, 0);
  EXPECT_EQ(b4.qs[4] >> 4, 8);  // x[20] = 0
  // Zero blocks: d = 0, every quant 0 (q8_0) or 8 (q4_0), dequantizing to 0.
  std::vector<float> zero(32, 0.f), back(32);
  QuantizeRow(DType::kQ8_0, zero.data(), &b8, 32);
  DequantizeRow(DType::kQ8_0, &b8, back.data(), 32);
  for (float v : back) EXPECT_EQ(v, 0.f);
  QuantizeRow(DType::kQ4_0, zero.data(), &b4, 32);
  DequantizeRow(DType::kQ4_0, &b4, back.data(), 32);
  for (float v : back) EXPECT_EQ(v, 0.f);
}

// |fast - ref| <= (n / 8 + 16) u sum |w x|: f32 lanes (chains of <= n / 8)
// against the double-accumulated reference; the products are exact in both.
TEST(QuantTest, DotRowMatchesReference) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (DType t : kAll)
      for (int64_t n : Sizes(t)) {
        const std::vector<uint8_t> q =
            Quantized(t, testing::RandomVector(n, static_cast<uint32_t>(n + 1)));
        const std::vector<float> x = testing::RandomVector(n, static_cast<uint32_t>(n + 2));
        std::vector<float> w(n);
        ref::DequantizeRow(t, q.data(), w.data(), n);
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(w[i]) * x[i]);
        const float got = DotRow(t, q.data(), x.data(), n);
        const float want = ref::DotRow(t, q.data(), x.data(), n);
        EXPECT_LE(std::fabs(got - want), (n / 8.0 + 16) * kEps * mag + 1e-30)
            << IsaName(isa) << " " << DTypeName(t) << " n=" << n;
      }
  }
}

// y += a w: FMA (one rounding) or multiply-add (two): <= 2 u (|y| + |a w|) apart.
TEST(QuantTest, AxpyRowMatchesReference) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (DType t : kAll)
      for (int64_t n : Sizes(t)) {
        const std::vector<uint8_t> q =
            Quantized(t, testing::RandomVector(n, static_cast<uint32_t>(n + 5)));
        std::vector<float> y = testing::RandomVector(n, static_cast<uint32_t>(n + 6)), y_ref = y,
                           w(n);
        ref::DequantizeRow(t, q.data(), w.data(), n);
        AxpyRow(t, 0.75f, q.data(), y.data(), n);
        ref::AxpyRow(t, 0.75f, q.data(), y_ref.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_LE(std::fabs(y[i] - y_ref[i]),
                    2 * kEps * (std::fabs(y_ref[i]) + std::fabs(0.75f * w[i])) + 1e-30)
              << IsaName(isa) << " " << DTypeName(t) << " i=" << i;
      }
  }
}

// The KV cache's f32 -> f16 conversion: the reference's bytes on every ISA,
// for odd lengths and values across f16's range (ties to even, subnormals,
// overflow to inf, signed zeros, infinities).
TEST(QuantTest, F32ToF16RowMatchesReferenceBytes) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int64_t n : {1, 7, 15, 16, 17, 33, 4099}) {
      std::vector<float> x = testing::RandomVector(n, static_cast<uint32_t>(n + 11));
      for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 48) - 30);
      const float special[] = {0.f, -0.f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.f, 65520.f,
                               -1e9f, INFINITY, -INFINITY, 6e-8f, 3e-8f, -2.9e-8f, 1e-45f};
      for (size_t j = 0; j < std::size(special) && static_cast<int64_t>(j) < n; ++j)
        x[(j * 13) % n] = special[j];
      std::vector<uint16_t> got(n), want(n);
      F32ToF16Row(x.data(), got.data(), n);
      QuantizeRow(DType::kF16, x.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " n=" << n << " x=" << x[i];
    }
  }
}

// The activation quantizers of the fast paths this machine runs.
std::vector<void (*)(const float*, int8_t*, float*, int64_t)> FastActivationQuantizers() {
  std::vector<void (*)(const float*, int8_t*, float*, int64_t)> fast;
  if (BestIsa() >= Isa::kAvx2) fast.push_back(&internal::avx2::QuantizeActivations);
  if (BestIsa() >= Isa::kAvx512) fast.push_back(&internal::avx512::QuantizeActivations);
  return fast;
}

// The integer kernels' activation quantizer must equal the reference bit for
// bit, including round-half-away ties (x / d = 2.5 rounds to 3, not 2).
TEST(QuantTest, ActivationQuantizationIsExact) {
  for (int64_t k : {32, 64, 96, 4096 + 32}) {
    std::vector<float> x = testing::RandomVector(k, static_cast<uint32_t>(k + 9));
    x[0] = 127.f;  // block 0: d = 1, ties below
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.5f;
    x[4] = -0.49999997f;
    for (int j = 32; j < 64 && j < k; ++j) x[j] = 0.f;  // a zero block
    std::vector<int8_t> q_ref(k);
    std::vector<float> d_ref(k / 32);
    ref::QuantizeActivations(x.data(), q_ref.data(), d_ref.data(), k);
    EXPECT_EQ(q_ref[1], 3);
    EXPECT_EQ(q_ref[2], -3);
    EXPECT_EQ(q_ref[3], 1);
    EXPECT_EQ(q_ref[4], 0);
    for (auto fn : FastActivationQuantizers()) {
      std::vector<int8_t> q(k);
      std::vector<float> d(k / 32);
      fn(x.data(), q.data(), d.data(), k);
      EXPECT_EQ(q, q_ref) << "k=" << k;
      for (int64_t b = 0; b < k / 32; ++b) EXPECT_EQ(FloatToBits(d[b]), FloatToBits(d_ref[b]));
    }
  }
}

// The AVX2 and AVX-512 quantizers round by truncating x / d + (0.5 - 2^-25)
// with the sign of x / d: roundf for every float up to 2^22 in magnitude
// (all 2.5e9 checked once, BENCHMARKS.md, "Sixty-seventh session"). Here,
// against the reference on every fast path: the 1,024 floats on either side
// of each half and each integer up to 127, both signs, with d = 1 (x / d
// exact), among them the floats just below 0.5 whose sum with 0.5 itself
// would round up; and, with scales of 128 / 127 and more, the x whose
// product with 1 / d rounds up onto 0.5: an FMA of that product and the
// added half (a contraction the compiler may make) would see the exact
// product below the half and round down.
TEST(QuantTest, ActivationRoundingIsRoundfBesideEveryHalf) {
  // Blocks of 31 values and their maximum last, so d is scale_max / 127.
  auto check = [](const std::vector<float>& values, float scale_max) {
    std::vector<float> x;  // [blocks * 32]
    for (size_t i = 0; i < values.size(); i += 31) {
      for (size_t j = i; j < i + 31; ++j) x.push_back(j < values.size() ? values[j] : 0.f);
      x.push_back(scale_max);
    }
    const int64_t k = static_cast<int64_t>(x.size());
    std::vector<int8_t> q_ref(k);
    std::vector<float> d_ref(k / 32);
    ref::QuantizeActivations(x.data(), q_ref.data(), d_ref.data(), k);
    for (auto fn : FastActivationQuantizers()) {
      std::vector<int8_t> q(k);
      std::vector<float> d(k / 32);
      fn(x.data(), q.data(), d.data(), k);
      for (int64_t i = 0; i < k; ++i)
        ASSERT_EQ(q[i], q_ref[i]) << "x " << x[i] << " (bits " << FloatToBits(x[i])
                                  << "), scale max " << scale_max;
    }
  };
  std::vector<float> beside;
  for (int n = 0; n <= 254; ++n) {  // n / 2: every half and integer in [0, 127]
    const uint32_t at = FloatToBits(static_cast<float>(n) / 2);
    for (uint32_t b = at > 1024 ? at - 1024 : 0; b <= at + 1024; ++b) {
      const float v = std::bit_cast<float>(b);
      if (v > 127.f) break;
      beside.push_back(v), beside.push_back(-v);
    }
  }
  check(beside, 127.f);

  // Scales whose 1 / d takes some x to a product just below 0.5 that rounds
  // to 0.5 (for halves above 0.5 the final sum's rounding hides the
  // difference).
  int sensitive = 0;
  for (int s = 128; s < 400; ++s) {
    const float scale_max = static_cast<float>(s);
    const float d = scale_max / 127.f, id = 1.f / d;  // the reference's
    std::vector<float> onto_half;
    const uint32_t at = FloatToBits(0.5f * d);
    for (uint32_t b = at - 256; b <= at + 256; ++b) {
      const float v = std::bit_cast<float>(b);
      if (v * id == 0.5f && static_cast<double>(v) * static_cast<double>(id) < 0.5)
        onto_half.push_back(v), onto_half.push_back(-v);
    }
    if (onto_half.empty()) continue;
    ++sensitive;
    check(onto_half, scale_max);
  }
  ASSERT_GT(sensitive, 10) << "too few products round up onto 0.5: the case is hardly tested";
}

// q8_0 blocks of 8, 16 and 32 (the KV cache's) on every ISA: the reference's
// bytes, ties rounded half away from zero, a zero block stored as d = 0; the
// same with f32 scales (QuantizeQ8BlocksF32, attention's query).
TEST(QuantTest, Q8BlocksMatchReferenceBytes) {
  for (Isa isa : testing::Isas()) {
    testing::ScopedIsa scoped(isa);
    for (int block : {4, 8, 16, 32})
      for (int64_t blocks : {1, 2, 5, 31}) {
        const int64_t n = blocks * block;
        std::vector<float> x = testing::RandomVector(n, static_cast<uint32_t>(block + 7 * blocks));
        for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 19) - 14);
        for (int j = 4; j < block; ++j) x[j] = std::clamp(x[j], -100.f, 100.f);
        x[0] = 127.f;  // block 0: d = 1, ties below
        x[1] = 2.5f;
        x[2] = -2.5f;
        x[3] = 0.49999997f;
        if (blocks > 1)
          for (int j = block; j < 2 * block; ++j) x[j] = 0.f;  // a zero block
        std::vector<uint8_t> got(blocks * (2 + block)), want(got.size());
        QuantizeQ8Blocks(x.data(), n, block, got.data());
        ref::QuantizeQ8Blocks(x.data(), n, block, want.data());
        ASSERT_EQ(got, want) << IsaName(isa) << " block=" << block << " blocks=" << blocks;
        // The f32 scales and the quants apart: the reference's values, and the
        // bytes above once d is rounded to f16.
        std::vector<int8_t> q(n), want_q(n);
        std::vector<float> d(blocks), want_d(blocks);
        QuantizeQ8BlocksF32(x.data(), n, block, q.data(), d.data());
        ref::QuantizeQ8BlocksF32(x.data(), n, block, want_q.data(), want_d.data());
        ASSERT_EQ(q, want_q) << IsaName(isa) << " block=" << block << " blocks=" << blocks;
        ASSERT_EQ(d, want_d) << IsaName(isa) << " block=" << block << " blocks=" << blocks;
        for (int64_t b = 0; b < blocks; ++b) {
          uint16_t dh;
          std::memcpy(&dh, want.data() + b * (2 + block), 2);
          EXPECT_EQ(dh, F32ToF16(d[b]));
          EXPECT_EQ(std::memcmp(want.data() + b * (2 + block) + 2, q.data() + b * block, block), 0);
        }
        EXPECT_EQ(static_cast<int8_t>(want[2 + 1]), 3);
        EXPECT_EQ(static_cast<int8_t>(want[2 + 2]), -3);
        EXPECT_EQ(static_cast<int8_t>(want[2 + 3]), 0);
        for (int64_t b = 0; b < blocks; ++b) {  // d = amax / 127 as f16, |q| <= 127
          const uint8_t* blk = want.data() + b * (2 + block);
          float amax = 0.f;
          for (int j = 0; j < block; ++j) amax = std::fmax(amax, std::fabs(x[b * block + j]));
          uint16_t dh;
          std::memcpy(&dh, blk, 2);
          EXPECT_EQ(dh, F32ToF16(amax / 127.f));
          for (int j = 0; j < block; ++j) EXPECT_LE(std::abs(static_cast<int8_t>(blk[2 + j])), 127);
        }
      }
  }
}

// GGML test vectors: T.q as llama-quantize wrote it, T.deq its dequantization
// by gguf-py (numpy), T.src the values before quantization.
constexpr const char* kVectorTypes[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
                                        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"};

struct Vectors {
  const GgufTensor* q;
  const GgufTensor* deq;
  const GgufTensor* src;
};

Vectors FindVectors(const GgufFile& file, const std::string& name) {
  return {file.FindTensor(name + ".q"), file.FindTensor(name + ".deq"),
          file.FindTensor(name + ".src")};
}

std::vector<float> F32Row(const GgufTensor* t, int64_t r) {
  std::vector<float> row(t->ne[0]);
  std::memcpy(row.data(), t->data + r * t->ne[0] * 4, t->ne[0] * 4);
  return row;
}

TEST(QuantTest, GgmlTestVectorsDequantize) {
  auto file = GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/quant-vectors.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  for (const char* name : kVectorTypes) {
    SCOPED_TRACE(name);
    const Vectors v = FindVectors(**file, name);
    ASSERT_TRUE(v.q && v.deq && v.src);
    ASSERT_EQ(v.deq->type, DType::kF32);
    ASSERT_EQ(v.q->ne, v.deq->ne);
    EXPECT_EQ(ParseDType(name), v.q->type);
    EXPECT_TRUE(IsSupported(v.q->type));
    const int64_t k = v.q->ne[0], rows = v.q->rows();
    EXPECT_EQ(rows, 8);
    const int64_t rb = RowBytes(v.q->type, k);
    for (Isa isa : testing::Isas()) {
      testing::ScopedIsa scoped(isa);
      std::vector<float> got(k);
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(v.q->type, v.q->data + r * rb, got.data(), k);
        const std::vector<float> want = F32Row(v.deq, r);
        for (int64_t i = 0; i < k; ++i)
          ASSERT_LE(UlpDistance(got[i], want[i]), 4) << IsaName(isa) << " row " << r << " i " << i
                                                     << ": " << got[i] << " vs " << want[i];
        // Every dot path agrees with dequantize-then-dot on these rows.
        const std::vector<float> x = testing::RandomVector(k, static_cast<uint32_t>(r + 77));
        double want_dot = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          want_dot += static_cast<double>(want[i]) * x[i];
          mag += std::fabs(static_cast<double>(want[i]) * x[i]);
        }
        EXPECT_LE(std::fabs(DotRow(v.q->type, v.q->data + r * rb, x.data(), k) - want_dot),
                  (k / 8.0 + 16) * kEps * mag + 4 * kEps * mag)
            << IsaName(isa) << " row " << r;
      }
    }
  }
}

// Matmul (every path: the integer kernels at m = 1, 3 and 12, the f32
// fallbacks at m = 20) on llama-quantize's rows against dequantize-then-dot in
// double. Bound: f32 accumulation (k / 4 + 64) u sum |w| (|x| + d_x), plus,
// where the kernel quantizes x (q8_0 / q4_0 always; K-quants on AVX2 /
// AVX-512 with m <= kGemvKMaxTokens = 16), the
// activation rounding sum |w| d_x / 2 + 1e-6 sum |w x|.
TEST(QuantTest, GgmlTestVectorsMatmul) {
  auto file = GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/quant-vectors.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  ThreadPool pool(2);
  for (const char* name : kVectorTypes) {
    SCOPED_TRACE(name);
    const Vectors v = FindVectors(**file, name);
    ASSERT_TRUE(v.q && v.deq);
    const DType t = v.q->type;
    const int64_t k = v.q->ne[0], rows = v.q->rows();
    const Weight w = MakeWeight(t, k, rows, v.q->data);
    for (int64_t m : {1, 3, 12, 20}) {
      const std::vector<float> x = testing::RandomVector(m * k, static_cast<uint32_t>(m + 11));
      std::vector<int8_t> qx(k);     // [k]
      std::vector<float> dx(k / 32);  // [k / 32]
      for (Isa isa : testing::Isas()) {
        testing::ScopedIsa scoped(isa);
        std::vector<float> y(m * rows);  // [m, rows]
        MatmulScratch scratch(m, k);
        Matmul(pool, w, x.data(), m, y.data(), rows, scratch);
        const bool quantizes = t == DType::kQ8_0 || t == DType::kQ4_0 ||
                               (isa != Isa::kScalar && m <= internal::kGemvKMaxTokens &&
                                internal::HasIntegerGemv(t, isa == Isa::kAvx512));
        for (int64_t tok = 0; tok < m; ++tok) {
          ref::QuantizeActivations(x.data() + tok * k, qx.data(), dx.data(), k);
          for (int64_t r = 0; r < rows; ++r) {
            const std::vector<float> wr = F32Row(v.deq, r);
            double exact = 0, mag = 0, magq = 0, qerr = 0;
            for (int64_t i = 0; i < k; ++i) {
              const double xi = x[tok * k + i];
              exact += wr[i] * xi;
              mag += std::fabs(wr[i] * xi);
              magq += std::fabs(wr[i]) * (std::fabs(xi) + dx[i / 32]);
              qerr += std::fabs(wr[i]) * dx[i / 32] * 0.5;
            }
            double bound = (k / 4.0 + 64) * kEps * magq + 1e-30;
            if (quantizes) bound += qerr + 1e-6 * mag;
            EXPECT_LE(std::fabs(y[tok * rows + r] - exact), bound)
                << IsaName(isa) << " m=" << m << " t=" << tok << " r=" << r;
          }
        }
      }
    }
  }
}

// q8_0 / q4_0: our quantizer reproduces llama-quantize's bytes.
TEST(QuantTest, GgmlTestVectorsRequantizeIdentically) {
  auto file = GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/quant-vectors.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  for (const char* name : {"Q8_0", "Q4_0"}) {
    SCOPED_TRACE(name);
    const Vectors v = FindVectors(**file, name);
    ASSERT_TRUE(v.q && v.src);
    const int64_t k = v.q->ne[0], rows = v.q->rows(), rb = RowBytes(v.q->type, k);
    int64_t same = 0;
    std::vector<uint8_t> mine(rb);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row = F32Row(v.src, r);
      QuantizeRow(v.q->type, row.data(), mine.data(), k);
      same += std::memcmp(mine.data(), v.q->data + r * rb, rb) == 0;
    }
    EXPECT_EQ(same, rows) << "rows re-quantized identically";
  }
}

// Every type: quantizing T.src with QuantizeRow and dequantizing gives an RMS
// error at most 1.25x that of llama-quantize's own T.q (dequantized as T.deq).
TEST(QuantTest, QuantizeErrorComparableToLlamaQuantize) {
  auto file = GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/quant-vectors.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  for (const char* name : kVectorTypes) {
    SCOPED_TRACE(name);
    const Vectors v = FindVectors(**file, name);
    ASSERT_TRUE(v.q && v.deq && v.src);
    const DType t = v.q->type;
    const int64_t k = v.q->ne[0], rows = v.q->rows();
    double err_mine = 0, err_llama = 0;
    std::vector<uint8_t> q(RowBytes(t, k));
    std::vector<float> back(k);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> src = F32Row(v.src, r), theirs = F32Row(v.deq, r);
      QuantizeRow(t, src.data(), q.data(), k);
      DequantizeRow(t, q.data(), back.data(), k);
      for (int64_t i = 0; i < k; ++i) {
        err_mine += std::pow(static_cast<double>(back[i]) - src[i], 2);
        err_llama += std::pow(static_cast<double>(theirs[i]) - src[i], 2);
      }
    }
    const double rms_mine = std::sqrt(err_mine / (k * rows)),
                 rms_llama = std::sqrt(err_llama / (k * rows));
    std::printf("%-7s rms error: rotor %.6g, llama-quantize %.6g (ratio %.3f)\n", name, rms_mine,
                rms_llama, rms_mine / rms_llama);
    EXPECT_LE(rms_mine, 1.25 * rms_llama);
    EXPECT_GT(rms_llama, 0);
  }
}

}  // namespace
}  // namespace rotor::ops
