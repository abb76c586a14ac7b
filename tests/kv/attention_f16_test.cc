// The attention kernels over an f16 cache, on every ISA: exactly (bit for bit)
// the attention over an f32 cache holding the same f16-rounded values, for
// every policy, RoPE mode and head layout, through ubatches of several sizes
// (and so through Write, Commit and the chunk's own keys).
#include <gtest/gtest.h>

#include <random>

#include "attention/attention.h"
#include "base/cpu.h"
#include "kv/kv_cache.h"
#include "attend_util.h"
#include "kv_test_util.h"
#include "sanitizers/sweep.h"
#include "tensor/fp16.h"

namespace rotor {
namespace {

struct Shape {
  int n_head, n_head_kv, head_dim;
};

float RoundF16(float x) { return F16ToF32(F32ToF16(x)); }

void RunSteps(const Shape& s, KvConfig cfg, Isa isa, int threads) {
  const int hd = s.head_dim, q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  ops::RopeConfig rope{hd, hd};
  KvShape shape{1, s.n_head_kv, hd, 512, rope};
  KvConfig cfg16 = cfg;
  cfg16.types = KvTypes{KvType::kF16, KvType::kF16};
  auto c32 = std::move(KvCache::Create(shape, cfg)).value();
  auto c16 = std::move(KvCache::Create(shape, cfg16)).value();
  ThreadPool pool(threads);
  AttentionScratch scratch(threads, s.n_head, s.n_head_kv, hd);
  RopeDistanceTable table(rope, 512);
  std::mt19937 rng(hd * 131 + s.n_head);
  std::normal_distribution<float> dist(0.f, 1.f);
  const int steps[] = {5, 1, 33, 1, 1, 7, 64, 1, 300, 2};
  for (int m : steps) {
    // [m, n_head, hd] queries, [m, n_head_kv, hd] keys and values; *_r rounded to f16.
    std::vector<float> q(m * q_dim), k(m * kv_dim), v(m * kv_dim), k_r, v_r;
    for (float& x : q) x = dist(rng);
    for (float& x : k) x = 2 * dist(rng);
    for (float& x : v) x = dist(rng);
    k_r = k, v_r = v;
    for (float& x : k_r) x = RoundF16(x);
    for (float& x : v_r) x = RoundF16(x);
    std::vector<float> out32(m * q_dim), out16(m * q_dim);
    KvPlan p32, p16;
    ASSERT_TRUE(c32->Plan(m, &p32).ok());
    ASSERT_TRUE(c16->Plan(m, &p16).ok());
    ASSERT_TRUE(c32->Prepare(p32).ok());
    ASSERT_TRUE(c16->Prepare(p16).ok());
    testing::AttendOneLayer(pool, scratch, table, *c32, p32, s.n_head, s.n_head_kv, hd, q.data(),
                            k_r.data(), v_r.data(), out32.data(), isa);
    testing::AttendOneLayer(pool, scratch, table, *c16, p16, s.n_head, s.n_head_kv, hd, q.data(),
                            k.data(), v.data(), out16.data(), isa);
    for (size_t e = 0; e < out32.size(); ++e)
      ASSERT_EQ(out16[e], out32[e]) << "element " << e << " of a ubatch of " << m << " after "
                                    << c16->n_seen() - m << " tokens";
  }
}

TEST(AttentionF16, EqualsF32CacheOfTheRoundedValuesOnEveryIsa) {
  const Isa saved = ActiveIsa();
  const Shape shapes[] = {{8, 2, 64}, {4, 4, 16}, {6, 3, 80}, {2, 1, 24}, {4, 2, 128}};
  struct Policy {
    std::string_view policy;
    int size;
    RopeK rope;
    KvPositions positions;
  };
  // Compact positions with cached keys re-round each re-rotated key: not the
  // same as rotating the rounded f32 key (kv_f16_test bounds that case).
  const Policy policies[] = {
      {"full", 0, RopeK::kCached, KvPositions::kOriginal},
      {"full", 0, RopeK::kDeferred, KvPositions::kOriginal},
      {"sink", 48, RopeK::kCached, KvPositions::kOriginal},
      {"sink", 48, RopeK::kDeferred, KvPositions::kCompact},
      {"window", 40, RopeK::kDeferred, KvPositions::kOriginal},
      {"h2o", 64, RopeK::kCached, KvPositions::kOriginal},
      {"h2o", 64, RopeK::kDeferred, KvPositions::kCompact},
      {"tova", 64, RopeK::kCached, KvPositions::kOriginal},
      {"tova", 64, RopeK::kDeferred, KvPositions::kCompact},
      {"snapkv", 64, RopeK::kDeferred, KvPositions::kOriginal}};
  testing::Sweep sweep(7);  // under the sanitizers: every shape and policy, fewer pairs
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa)
    for (const Shape& s : shapes)
      for (const Policy& p : policies)
        for (int threads : {1, 2}) {
          if (!sweep.Next({isa, static_cast<int>(&s - shapes), static_cast<int>(&p - policies), threads}))
            continue;
          SCOPED_TRACE(::testing::Message()
                       << IsaName(static_cast<Isa>(isa)) << " heads " << s.n_head << "/"
                       << s.n_head_kv << " hd " << s.head_dim << " " << p.policy
                       << "/" << RopeKName(p.rope) << "/" << KvPositionsName(p.positions)
                       << " threads " << threads);
          RunSteps(s, testing::Kv(p.policy, p.size, 4, p.rope, p.positions),
                   static_cast<Isa>(isa), threads);
        }
  SetIsa(saved);
  EXPECT_TRUE(sweep.EveryValueRan());
}

}  // namespace
}  // namespace rotor
