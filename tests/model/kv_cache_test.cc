#include "kv/kv_cache.h"

#include <gtest/gtest.h>

namespace rotor {
namespace {

const KvShape kShape{2, 2, 4, 16};

TEST(KvConfig, ResolvesDefaultsAndRejectsBadCombinations) {
  auto full = ResolveKvConfig(KvConfig{}, kShape);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->size, 16);
  KvConfig big;
  big.policy = KvPolicy::kSink;
  big.size = 32;
  auto r = ResolveKvConfig(big, kShape);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--kv-size 32 is larger than the context size 16"), std::string::npos);
  KvConfig keep;
  keep.policy = KvPolicy::kSink;
  keep.size = 8;
  keep.keep = 8;
  EXPECT_NE(ResolveKvConfig(keep, kShape).message().find("--kv-keep 8 must be smaller"),
            std::string::npos);
  KvConfig compact;
  compact.positions = KvPositions::kCompact;
  EXPECT_FALSE(ResolveKvConfig(compact, kShape).ok());
  KvConfig h2o;
  h2o.policy = KvPolicy::kH2o;
  h2o.size = 8;
  auto hr = ResolveKvConfig(h2o, kShape);
  ASSERT_TRUE(hr.ok());
  EXPECT_EQ(hr->recent, 4);
}

TEST(KvConfig, ParsesNames) {
  EXPECT_EQ(ParseKvPolicy("sink"), KvPolicy::kSink);
  EXPECT_FALSE(ParseKvPolicy("lru").has_value());
  EXPECT_EQ(ParseRopeK("deferred"), RopeK::kDeferred);
  EXPECT_EQ(ParseKvPositions("compact"), KvPositions::kCompact);
}

TEST(KvCache, FullPlansConsecutiveSlotsAndFailsCleanlyWhenFull) {
  auto cache = KvCache::Create(kShape, KvConfig{});
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  EXPECT_GE(c.memory_bytes(), 2u * 2 * 2 * 16 * 4 * sizeof(float));
  KvPlan plan;
  ASSERT_TRUE(c.Plan(10, &plan).ok());
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
  EXPECT_EQ(view.type, KvType::kF32);
  EXPECT_EQ(view.row_bytes, 8 * sizeof(float));
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
