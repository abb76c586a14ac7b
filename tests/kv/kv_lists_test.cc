#include "kv/kv_lists.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rotor {
namespace {

using ::testing::HasSubstr;

TEST(KvListsTest, EmptyListsAreOneDefaultConfig) {
  Result<std::vector<KvConfig>> r = ExpandKvLists(KvLists{});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].policy, KvConfig{}.policy);
}

// Every combination, policy outermost; a policy takes only the options it uses.
TEST(KvListsTest, EveryCombinationFullOnce) {
  KvLists l;
  l[KvOpt::kPolicy] = {"full", "sink"};
  l[KvOpt::kSize] = {"64", "128"};
  l[KvOpt::kKeep] = {"2", "4"};
  Result<std::vector<KvConfig>> r = ExpandKvLists(l);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 5u);
  EXPECT_EQ((*r)[0].policy, "full");
  const std::vector<std::pair<int, int>> sink = {{64, 2}, {64, 4}, {128, 2}, {128, 4}};
  for (size_t i = 0; i < sink.size(); ++i) {
    EXPECT_EQ((*r)[i + 1].policy, "sink");
    EXPECT_EQ((*r)[i + 1].size, sink[i].first) << i;
    EXPECT_EQ((*r)[i + 1].keep, sink[i].second) << i;
  }
}

TEST(KvListsTest, ErrorsNameTheFlag) {
  KvLists unused;
  unused[KvOpt::kPolicy] = {"full"};
  unused[KvOpt::kSize] = {"64"};
  Result<std::vector<KvConfig>> r = ExpandKvLists(unused);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("--kv-size"));

  KvLists bad;
  bad[KvOpt::kPolicy] = {"sink"};
  bad[KvOpt::kSize] = {"-3"};
  r = ExpandKvLists(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("-3"));

  KvLists unknown;
  unknown[KvOpt::kPolicy] = {"no-such-policy"};
  EXPECT_FALSE(ExpandKvLists(unknown).ok());
}

}  // namespace
}  // namespace rotor
