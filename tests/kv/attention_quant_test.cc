// The attention kernels over caches of every stored type (f16, bf16, q8_0,
// q5_0, q4_0, and a mix) against the attention over an f32 cache given the
// same values, on every ISA: the outputs within a relative bound per type
// measured on these inputs, and above a lower bound (a cache that silently
// kept f32 would fail), for both RoPE modes, a per-head policy and GQA, head
// sizes with blocks of 32, 16 and 8, through ubatches of several sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "attention/attention.h"
#include "base/cpu.h"
#include "kv/kv_cache.h"
#include "attend_util.h"
#include "kv_test_util.h"
#include "sanitizers/sweep.h"

namespace rotor {
namespace {
namespace attention_quant_test {

struct Shape {
  int n_head, n_head_kv, head_dim;
};

// The largest |out - out_f32| over every step, relative to the largest
// |out_f32| of that step.
double RelativeError(const Shape& s, KvConfig cfg, KvTypes types, Isa isa, int threads) {
  const int hd = s.head_dim, q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  ops::RopeConfig rope{hd, hd};
  KvShape shape{1, s.n_head_kv, hd, 512, rope};
  KvConfig typed = cfg;
  typed.types = types;
  cfg.types = KvTypes{KvType::kF32, KvType::kF32};
  auto c32 = std::move(KvCache::Create(shape, cfg)).value();
  auto ct = std::move(KvCache::Create(shape, typed)).value();
  ThreadPool pool(threads);
  AttentionScratch scratch(threads, s.n_head, s.n_head_kv, hd);
  RopeDistanceTable table(rope, 512);
  std::mt19937 rng(hd * 131 + s.n_head);
  std::normal_distribution<float> dist(0.f, 1.f);
  double worst = 0;
  for (int m : {5, 1, 33, 1, 7, 64, 1, 90, 2}) {
    // [m, n_head, hd] queries, [m, n_head_kv, hd] keys and values.
    std::vector<float> q(m * q_dim), k(m * kv_dim), v(m * kv_dim);
    for (float& x : q) x = dist(rng);
    for (float& x : k) x = 2 * dist(rng);
    for (float& x : v) x = dist(rng);
    std::vector<float> out32(m * q_dim), outt(m * q_dim);  // [m, n_head, hd]
    KvPlan p32, pt;
    EXPECT_TRUE(c32->Plan(m, &p32).ok());
    EXPECT_TRUE(ct->Plan(m, &pt).ok());
    EXPECT_TRUE(c32->Prepare(p32).ok());
    EXPECT_TRUE(ct->Prepare(pt).ok());
    testing::AttendOneLayer(pool, scratch, table, *c32, p32, s.n_head, s.n_head_kv, hd, q.data(),
                            k.data(), v.data(), out32.data(), isa);
    testing::AttendOneLayer(pool, scratch, table, *ct, pt, s.n_head, s.n_head_kv, hd, q.data(),
                            k.data(), v.data(), outt.data(), isa);
    double diff = 0, scale = 0;
    for (size_t e = 0; e < out32.size(); ++e) {
      EXPECT_TRUE(std::isfinite(outt[e]));
      diff = std::max(diff, std::fabs(static_cast<double>(outt[e]) - out32[e]));
      scale = std::max(scale, std::fabs(static_cast<double>(out32[e])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

struct TypeCase {
  KvTypes types;
  // The relative error of every configuration is within [low, high]: high
  // ~1.5x the largest measured, low half the smallest (the comment in each
  // row: measured min .. max over every ISA, shape and policy).
  double low, high;
};

TEST(AttentionQuant, NearF32CacheWithinEachTypesBoundOnEveryIsa) {
  const Isa saved = ActiveIsa();
  const Shape shapes[] = {{8, 2, 64}, {4, 4, 32}, {6, 3, 40}, {4, 1, 48}, {2, 1, 128}, {4, 4, 256}};
  struct Policy {
    std::string_view policy;
    int size;
    RopeK rope;
  };
  // h2o sized past the 204 tokens written: the per-lane path and its weights,
  // no eviction (which would follow the caches' different scores).
  const Policy policies[] = {{"full", 0, RopeK::kCached},
                             {"full", 0, RopeK::kDeferred},
                             {"window", 40, RopeK::kCached},
                             {"h2o", 256, RopeK::kDeferred}};
  // Random keys of standard deviation 2 make sharp softmaxes: a block type's
  // score errors move much of a head's weight (q4_0: up to a third of the
  // output's scale). Scalar and AVX2 measured the same errors (within 2%).
  const TypeCase types[] = {{{KvType::kF16, KvType::kF16}, 2e-4, 2.1e-3},      // 4.2e-4 .. 1.42e-3
                            {{KvType::kBF16, KvType::kBF16}, 1.8e-3, 1.3e-2},  // 3.7e-3 .. 8.8e-3
                            {{KvType::kQ8_0, KvType::kQ8_0}, 4.4e-3, 4.2e-2},  // 8.9e-3 .. 2.8e-2
                            {{KvType::kQ5_0, KvType::kQ5_0}, 0.035, 0.25},     // 0.071 .. 0.168
                            {{KvType::kQ4_0, KvType::kQ4_0}, 0.068, 0.53},     // 0.136 .. 0.354
                            {{KvType::kQ8_0, KvType::kQ4_0}, 0.04, 0.225}};    // 0.080 .. 0.150
  // Measured errors per type: [min, max] over everything run.
  std::map<std::string, std::pair<double, double>> seen;
  testing::Sweep sweep(7);  // under the sanitizers: every ISA, shape and type, fewer combinations
  for (int isa = 0; isa <= static_cast<int>(BestIsa()); ++isa)
    for (const Shape& s : shapes)
      for (const Policy& p : policies)
        for (const TypeCase& t : types)
          for (int threads : {2}) {  // (attention_f16_test runs 1 and 2)
            if (!sweep.Next({isa, static_cast<int>(&s - shapes), static_cast<int>(&p - policies),
                             static_cast<int>(&t - types), threads}))
              continue;
            const std::string name = KvTypesName(t.types);
            SCOPED_TRACE(::testing::Message()
                         << IsaName(static_cast<Isa>(isa)) << " heads " << s.n_head << "/"
                         << s.n_head_kv << " hd " << s.head_dim << " " << p.policy << "/"
                         << RopeKName(p.rope) << " " << name << " threads " << threads);
            const double err = RelativeError(s, testing::Kv(p.policy, p.size, 4, p.rope), t.types,
                                             static_cast<Isa>(isa), threads);
            EXPECT_LE(err, t.high);
            EXPECT_GE(err, t.low);
            auto [it, fresh] = seen.try_emplace(name, err, err);
            it->second.first = std::min(it->second.first, err);
            it->second.second = std::max(it->second.second, err);
          }
  for (const auto& [name, r] : seen)
    std::printf("%-10s relative error %.3g .. %.3g\n", name.c_str(), r.first, r.second);
  SetIsa(saved);
  EXPECT_TRUE(sweep.EveryValueRan());
}

}  // namespace attention_quant_test
}  // namespace
}  // namespace rotor
