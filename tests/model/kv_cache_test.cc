#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace rotor {
namespace {

const KvShape kShape{2, 2, 4, 16};

TEST(KvConfig, ResolvesDefaultsAndRejectsBadCombinations) {
  auto full = ResolveKvConfig(KvConfig{.types = {KvType::kF32, KvType::kF32}}, kShape);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->size, 16);
  KvConfig big;
  ASSERT_TRUE(big.Set(KvOpt::kPolicy, "sink").ok());
  ASSERT_TRUE(big.SetInt(KvOpt::kSize, 32).ok());
  auto r = ResolveKvConfig(big, kShape);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--kv-size 32 is larger than the context size 16"), std::string::npos);
  KvConfig keep;
  ASSERT_TRUE(keep.Set(KvOpt::kPolicy, "sink").ok());
  ASSERT_TRUE(keep.SetInt(KvOpt::kSize, 8).ok());
  ASSERT_TRUE(keep.SetInt(KvOpt::kKeep, 8).ok());
  EXPECT_NE(ResolveKvConfig(keep, kShape).message().find("--kv-keep 8 must be smaller"),
            std::string::npos);
  // A limit the user did not set is named as the default; h2o's own lower
  // bound on the size comes before the default it derives from the size.
  const std::pair<std::vector<std::pair<KvOpt, std::string>>, std::string> defaults[] = {
      {{{KvOpt::kPolicy, "sink"}, {KvOpt::kSize, "4"}},
       "--kv-keep 4 (the default) must be smaller than --kv-size 4"},
      {{{KvOpt::kPolicy, "snapkv"}, {KvOpt::kSize, "16"}},
       "--kv-window 32 (the default) must be smaller than --kv-size 16"},
      {{{KvOpt::kPolicy, "h2o"}, {KvOpt::kSize, "1"}}, "--kv-size 1 is too small for h2o"},
      {{{KvOpt::kPolicy, "h2o"}, {KvOpt::kSize, "4"}, {KvOpt::kRecent, "4"}},
       "--kv-recent 4 must be smaller than --kv-size 4"},
  };
  for (const auto& [options, message] : defaults) {
    KvConfig c;
    for (const auto& [o, v] : options) ASSERT_TRUE(c.Set(o, v).ok());
    const std::string got = ResolveKvConfig(c, kShape).message();
    EXPECT_NE(got.find(message), std::string::npos) << got;
  }
  // The full cache has no positions to choose: compact, given, is an error.
  KvConfig compact;
  ASSERT_TRUE(compact.Set(KvOpt::kPositions, "compact").ok());
  auto cr = ResolveKvConfig(compact, kShape);
  ASSERT_FALSE(cr.ok());
  EXPECT_NE(cr.message().find("--kv-positions is not used by --kv full"), std::string::npos)
      << cr.message();
  KvConfig h2o;
  ASSERT_TRUE(h2o.Set(KvOpt::kPolicy, "h2o").ok());
  ASSERT_TRUE(h2o.SetInt(KvOpt::kSize, 8).ok());
  auto hr = ResolveKvConfig(h2o, kShape);
  ASSERT_TRUE(hr.ok());
  EXPECT_EQ(hr->recent, 6);  // 4/5 of the cells: 20% heavy hitters (docs/EVALUATION.md)
  // The evicting policies default to compact positions, window to original.
  EXPECT_EQ(hr->positions, KvPositions::kCompact);
  for (const char* policy : {"sink", "snapkv", "tova"}) {
    KvConfig c;
    ASSERT_TRUE(c.Set(KvOpt::kPolicy, policy).ok());
    ASSERT_TRUE(c.SetInt(KvOpt::kSize, 8).ok());
    if (std::string_view(policy) == "snapkv") {
      ASSERT_TRUE(c.SetInt(KvOpt::kWindow, 4).ok());
    }
    auto r = ResolveKvConfig(c, kShape);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->positions, KvPositions::kCompact) << policy;
    ASSERT_TRUE(c.Set(KvOpt::kPositions, "original").ok());
    EXPECT_EQ(ResolveKvConfig(c, kShape)->positions, KvPositions::kOriginal) << policy;
  }
  KvConfig window;
  ASSERT_TRUE(window.Set(KvOpt::kPolicy, "window").ok());
  EXPECT_EQ(ResolveKvConfig(window, kShape)->positions, KvPositions::kOriginal);
}

// The per-lane policies keep keys before RoPE with compact positions (they
// would re-rotate kept keys at every eviction, lane_policy.h), unless told
// otherwise: h2o and tova whatever the type, snapkv for block-type keys.
// With original positions, and for the other policies, keys are cached after
// RoPE. A policy chosen later takes its own default.
TEST(KvConfig, RenumberingLanePoliciesDeferRopeUnlessTold) {
  const KvShape shape{2, 2, 8, 16};  // block types need a head size of 8 or more
  const auto resolve = [&](const char* policy, const char* positions, const char* rope_k,
                           const char* type = "q8_0") {
    KvConfig c;
    EXPECT_TRUE(c.Set(KvOpt::kPolicy, policy).ok());
    Status s = Status::Ok();
    if (std::string_view(policy) != "full") s = c.SetInt(KvOpt::kSize, 8);
    if (s.ok() && std::string_view(policy) == "snapkv") s = c.SetInt(KvOpt::kWindow, 4);
    if (s.ok() && positions != nullptr) s = c.Set(KvOpt::kPositions, positions);
    if (s.ok() && rope_k != nullptr) s = c.Set(KvOpt::kRopeK, rope_k);
    if (s.ok()) s = c.Set(KvOpt::kType, type);
    EXPECT_TRUE(s.ok()) << s.message();
    auto r = ResolveKvConfig(c, shape);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? r->rope_k : RopeK::kCached;
  };
  for (const char* policy : {"h2o", "snapkv", "tova"}) {
    SCOPED_TRACE(policy);
    const RopeK float_keys = std::string_view(policy) == "snapkv" ? RopeK::kCached : RopeK::kDeferred;
    EXPECT_EQ(resolve(policy, nullptr, nullptr, "f16"), float_keys);
    EXPECT_EQ(resolve(policy, nullptr, nullptr, "f32"), float_keys);
    EXPECT_EQ(resolve(policy, nullptr, nullptr, "q4_0"), RopeK::kDeferred);
    EXPECT_EQ(resolve(policy, "original", nullptr, "q8_0"), RopeK::kCached);
    EXPECT_EQ(resolve(policy, nullptr, "cached", "q5_0"), RopeK::kCached);
    EXPECT_EQ(resolve(policy, nullptr, nullptr), RopeK::kDeferred);
    EXPECT_EQ(resolve(policy, "compact", nullptr), RopeK::kDeferred);
    EXPECT_EQ(resolve(policy, "original", nullptr), RopeK::kCached);
    EXPECT_EQ(resolve(policy, nullptr, "cached"), RopeK::kCached);
    EXPECT_EQ(resolve(policy, "original", "deferred"), RopeK::kDeferred);
  }
  for (const char* policy : {"full", "sink", "window"}) {
    SCOPED_TRACE(policy);
    EXPECT_EQ(resolve(policy, nullptr, nullptr), RopeK::kCached);
  }
  EXPECT_EQ(resolve("sink", "compact", nullptr), RopeK::kCached);
  // rope_k given for one policy carries over to the next (kv_config.cc).
  KvConfig c;
  ASSERT_TRUE(c.Set(KvOpt::kRopeK, "cached").ok());
  ASSERT_TRUE(c.Set(KvOpt::kPolicy, "tova").ok());
  EXPECT_EQ(ResolveKvConfig(c, shape)->rope_k, RopeK::kCached);
  KvConfig d;
  ASSERT_TRUE(d.Set(KvOpt::kPolicy, "tova").ok());
  EXPECT_EQ(ResolveKvConfig(d, shape)->rope_k, RopeK::kDeferred);
}

// An option the policy does not use is an error only when given, worded in
// the caller's spelling; setting another policy forgets the options given for
// the previous one.
TEST(KvConfig, OptionsNotUsedByThePolicy) {
  KvConfig c;
  ASSERT_TRUE(c.Set(KvOpt::kPolicy, "window").ok());
  ASSERT_TRUE(c.SetInt(KvOpt::kKeep, 2).ok());
  auto r = ResolveKvConfig(c, kShape);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--kv-keep is not used by --kv window"), std::string::npos)
      << r.message();
  auto f = ResolveKvConfig(c, kShape, KvSpelling::kField);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("kv_keep is not used by kv window"), std::string::npos) << f.message();
  ASSERT_TRUE(c.Set(KvOpt::kPolicy, "sink").ok());
  EXPECT_FALSE(c.Given(KvOpt::kKeep));
  EXPECT_TRUE(ResolveKvConfig(c, kShape).ok());
  KvConfig t;
  ASSERT_TRUE(t.Set(KvOpt::kRopeK, "deferred").ok());
  ASSERT_TRUE(t.Set(KvOpt::kPolicy, "tova").ok());
  EXPECT_EQ(t.rope_k, RopeK::kDeferred);  // every policy's options carry over
  ASSERT_TRUE(t.SetInt(KvOpt::kWindow, 4).ok());
  EXPECT_NE(ResolveKvConfig(t, kShape).message().find("--kv-window is not used by --kv tova"),
            std::string::npos);
  for (const char* p : {"full", "sink", "window", "h2o", "snapkv", "tova"}) {
    EXPECT_TRUE(KvPolicyUses(p, KvOpt::kRopeK)) << p;
    EXPECT_EQ(KvPolicyUses(p, KvOpt::kSize), std::string_view(p) != "full") << p;
  }
  EXPECT_TRUE(KvPolicyUses("snapkv", KvOpt::kWindow));
  EXPECT_FALSE(KvPolicyUses("h2o", KvOpt::kWindow));
  EXPECT_TRUE(KvPolicyUses("h2o", KvOpt::kRecent));
}

TEST(KvConfig, ParsesNames) {
  EXPECT_TRUE(KvPolicyExists("sink"));
  EXPECT_FALSE(KvPolicyExists("lru"));
  KvConfig c;
  Status s = c.Set(KvOpt::kPolicy, "lru");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--kv 'lru' is not one of full, sink, window, h2o, snapkv or tova"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(c.policy, "full");
  ASSERT_TRUE(c.Set(KvOpt::kPolicy, "snapkv").ok());
  EXPECT_EQ(c.policy, "snapkv");
  EXPECT_FALSE(c.Set(KvOpt::kSize, "12x").ok());
  EXPECT_FALSE(c.SetInt(KvOpt::kRecent, 0).ok());  // below its range
  EXPECT_EQ(ParseRopeK("deferred"), RopeK::kDeferred);
  EXPECT_EQ(ParseKvPositions("compact"), KvPositions::kCompact);
}

TEST(KvCache, FullPlansConsecutiveSlotsAndFailsCleanlyWhenFull) {
  auto cache = KvCache::Create(kShape, KvConfig{.types = {KvType::kF32, KvType::kF32}});
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  EXPECT_GE(c.memory_bytes(), 2u * 2 * 2 * 16 * 4 * sizeof(float));
  KvPlan plan;
  ASSERT_TRUE(c.Plan(10, &plan).ok());
  ASSERT_TRUE(c.Prepare(plan).ok());
  EXPECT_EQ(plan.first, 0);
  EXPECT_EQ(plan.slot[9].v, 9);
  EXPECT_EQ(plan.pos[9], 9);
  EXPECT_EQ(c.n_seen(), 0);  // planning mutates nothing
  std::vector<float> k(10 * 8), v(10 * 8);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i), v[i] = -static_cast<float>(i);
  for (int l = 0; l < 2; ++l) c.Write(l, plan, k.data(), v.data(), 8);
  c.Commit(plan);
  EXPECT_EQ(c.n_seen(), 10);
  EXPECT_EQ(c.n_used(), 10);
  EXPECT_EQ(c.Remaining(), 6);
  KvLayerView view = c.View(1);
  EXPECT_EQ(view.n_cells, 10);
  EXPECT_EQ(view.index[3], 3);
  // Head 1 of token 3 is k[3 * 8 + 4 ...]; storage is [cell, head, dim].
  EXPECT_EQ(view.types, (KvTypes{KvType::kF32, KvType::kF32}));
  EXPECT_EQ(view.k_row_bytes, 8 * sizeof(float));
  EXPECT_EQ(static_cast<const float*>(view.KRow(3))[1 * 4 + 2], k[3 * 8 + 4 + 2]);
  EXPECT_EQ(static_cast<const float*>(view.VRow(9))[0], v[9 * 8]);
  Status s = c.Plan(7, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context full"), std::string::npos) << s.message();
  EXPECT_EQ(c.n_seen(), 10);
  c.Clear();
  EXPECT_EQ(c.n_seen(), 0);
  EXPECT_EQ(c.View(0).n_cells, 0);
}

TEST(Visibility, Rules) {
  Visibility full;
  EXPECT_TRUE(full.Visible(10, 0));
  EXPECT_FALSE(full.Visible(10, 11));
  Visibility sink{4, 3};
  EXPECT_TRUE(sink.Visible(100, 2));
  EXPECT_TRUE(sink.Visible(100, 98));
  EXPECT_FALSE(sink.Visible(100, 97));
}

}  // namespace
}  // namespace rotor
