// The cache's sequence operations (Fork, KeepPrefix, RemoveRange,
// ShiftPositions) against recomputation: a fresh run of the text the
// operation leaves, or the naive reference forward with the keys and
// distances the operation promises. Where a policy cannot honour an
// operation, a clear error, and the cache as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "kv_test_util.h"
#include "reference_forward.h"

namespace rotor::testing {
namespace {

constexpr int kCtx = 512;
constexpr int kStep = 7;

const RopeK kRopes[] = {RopeK::kCached, RopeK::kDeferred};

class SeqOps : public ::testing::TestWithParam<std::string> {
 protected:
  const Model& model() { return LoadModelCached(ModelPath(GetParam())); }
  int n_vocab() { return model().config().n_vocab; }

  std::unique_ptr<KvCache> New(const KvConfig& kv, int64_t prompt = 0) {
    auto c = KvCache::Create(model().config().kv_shape(kCtx), kv);
    EXPECT_TRUE(c.ok()) << c.message();
    if (!c.ok()) return nullptr;
    if (prompt > 0) {
      Status s = (*c)->ExpectPrompt(prompt);
      EXPECT_TRUE(s.ok()) << s.message();
    }
    return std::move(*c);
  }
  std::vector<float> Run(KvCache& c, const std::vector<int32_t>& tokens, int step = kStep) {
    return ContinueLogits(model(), c, tokens, step);
  }
  // Rows [from, to) of [n, n_vocab] logits.
  std::vector<float> Rows(const std::vector<float>& logits, int64_t from, int64_t to) {
    return std::vector<float>(logits.begin() + from * n_vocab(), logits.begin() + to * n_vocab());
  }
};

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + from, v.begin() + to);
}

// Everything observable of a cache: its text length, room, every lane's cell
// table and every stored K and V row.
struct Snapshot {
  TextIndex n_seen;
  int64_t remaining;
  int32_t n_used;
  std::vector<TextIndex> index;
  std::vector<int32_t> pos;
  std::vector<float> kv;
  bool operator==(const Snapshot&) const = default;
};

// The K/V a lane keeps for an occupied cell: the lane's layers and kv heads
// of the cell's rows (other lanes' parts of a row, and empty cells, may hold
// anything).
Snapshot Snap(const KvCache& c) {
  Snapshot s{c.n_seen(), c.Remaining(), c.n_used(), {}, {}, {}};
  const KvShape& shape = c.shape();
  const int hd = shape.head_dim, n_lanes = c.n_lanes();
  for (int lane = 0; lane < n_lanes; ++lane) {
    // Shared lanes: every layer and head; per layer; per (layer, kv head).
    int l0 = 0, l1 = shape.n_layer, h0 = 0, h1 = shape.n_head_kv;
    if (n_lanes > 1 && n_lanes == shape.n_layer)
      l0 = lane, l1 = lane + 1;
    else if (n_lanes > 1)
      l0 = lane / shape.n_head_kv, l1 = l0 + 1, h0 = lane % shape.n_head_kv, h1 = h0 + 1;
    for (int32_t cell = 0; cell < c.n_cells(); ++cell) {
      const TextIndex idx = c.CellIndex(cell, lane);
      s.index.push_back(idx);
      if (idx < 0) continue;
      s.pos.push_back(c.CellPos(cell, lane));
      for (int l = l0; l < l1; ++l) {
        const std::vector<float> k = c.CellK(l, cell), v = c.CellV(l, cell);
        s.kv.insert(s.kv.end(), k.begin() + h0 * hd, k.begin() + h1 * hd);
        s.kv.insert(s.kv.end(), v.begin() + h0 * hd, v.begin() + h1 * hd);
      }
    }
  }
  return s;
}

std::string Name(const KvConfig& kv) {
  std::string name = kv.policy;
  name.append("/").append(RopeKName(kv.rope_k));
  if (KvPolicyUses(kv.policy, KvOpt::kPositions))
    name.append("/").append(KvPositionsName(kv.positions));
  return name;
}

// ---- (a) Fork: the copy continues exactly as the original, and both as a
// fresh cache that ran the same text.

TEST_P(SeqOps, ForkContinuesAsTheOriginal) {
  const std::vector<int32_t> text = Prompt(70, n_vocab(), 31);
  const std::vector<int32_t> a = Slice(text, 0, 40), b = Slice(text, 40, 70);
  for (RopeK rope : kRopes) {
    struct Case {
      KvConfig kv;
      int64_t prompt;
    };
    // Small caches: every evicting policy evicts during A and B. snapkv's
    // prompt ends inside B: the fork compresses it too.
    const Case cases[] = {
        {Kv("full", 0, 0, rope), 0},
        {Kv("sink", 24, 4, rope, KvPositions::kOriginal), 0},
        {Kv("sink", 24, 4, rope, KvPositions::kCompact), 0},
        {Kv("window", 24, 0, rope, KvPositions::kCompact), 0},
        {Kv("h2o", 24, 0, rope, KvPositions::kOriginal), 0},
        {Kv("h2o", 24, 0, rope, KvPositions::kCompact), 0},
        {Kv("tova", 24, 0, rope, KvPositions::kOriginal), 0},
        {Kv("tova", 24, 0, rope, KvPositions::kCompact), 0},
        {Kv("snapkv", 24, 0, rope, KvPositions::kOriginal, -1, 8), 45},
        {Kv("snapkv", 24, 0, rope, KvPositions::kCompact, -1, 8), 45},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(c.kv));
      std::unique_ptr<KvCache> original = New(c.kv, c.prompt);
      Run(*original, a);
      auto fork = original->Fork();
      ASSERT_TRUE(fork.ok()) << fork.message();
      EXPECT_TRUE(Snap(**fork) == Snap(*original));
      const std::vector<float> got = Run(*original, b);
      const std::vector<float> got_fork = Run(**fork, b);
      EXPECT_EQ(MaxAbsDiff(got, got_fork), 0.0);
      EXPECT_TRUE(Snap(**fork) == Snap(*original));
      std::unique_ptr<KvCache> fresh = New(c.kv, c.prompt);
      Run(*fresh, a);
      EXPECT_EQ(MaxAbsDiff(Run(*fresh, b), got), 0.0);
    }
  }
}

// ---- (b) KeepPrefix(n) then a continuation = a fresh run of the first n
// tokens then the same continuation.

TEST_P(SeqOps, KeepPrefixThenContinueEqualsFreshRun) {
  const std::vector<int32_t> text = Prompt(40, n_vocab(), 33);
  // A continuation other than the dropped tokens, long enough to evict.
  const std::vector<int32_t> next = Slice(Prompt(41, n_vocab(), 34), 1, 41);
  struct Case {
    KvConfig kv;
    int keep;            // tokens kept of the 40 run
    int64_t prompt = 0;  // announced before the 40
  };
  for (RopeK rope : kRopes) {
    std::vector<Case> cases = {
        // Nothing evicted yet in 40 tokens (size 48).
        {Kv("full", 0, 0, rope), 25},
        {Kv("full", 0, 0, rope), 0},
        {Kv("sink", 48, 4, rope, KvPositions::kOriginal), 25},
        {Kv("sink", 48, 4, rope, KvPositions::kCompact), 25},
        {Kv("window", 48, 0, rope, KvPositions::kOriginal), 25},
        {Kv("tova", 48, 0, rope, KvPositions::kOriginal), 25},
        {Kv("tova", 48, 0, rope, KvPositions::kCompact), 25},
        {Kv("snapkv", 48, 0, rope, KvPositions::kOriginal, -1, 8), 25},
        // snapkv after a prompt of 20 (all 12 earlier tokens selected, none
        // evicted): the prefix keeps the prompt and its selection.
        {Kv("snapkv", 48, 0, rope, KvPositions::kOriginal, -1, 8), 25, 20},
        // size 24, 4 sinks: 40 tokens have evicted 4..19; continuing at 39
        // needs the sinks and 20..38, all still held.
        {Kv("sink", 24, 4, rope, KvPositions::kOriginal), 39},
        {Kv("sink", 24, 4, rope, KvPositions::kCompact), 39},
        {Kv("window", 24, 0, rope, KvPositions::kOriginal), 39},
        {Kv("window", 24, 0, rope, KvPositions::kCompact), 39},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << Name(c.kv) << " keep " << c.keep);
      std::unique_ptr<KvCache> cache = New(c.kv, c.prompt);
      Run(*cache, text);
      Status s = cache->KeepPrefix(c.keep);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(cache->n_seen(), c.keep);
      const std::vector<float> got = Run(*cache, next);
      std::unique_ptr<KvCache> fresh = New(c.kv, c.prompt);
      if (c.keep > 0) Run(*fresh, Slice(text, 0, c.keep));
      EXPECT_LT(MaxAbsDiff(Run(*fresh, next), got), 1e-4);
    }
  }
}

// ---- (c) Operations a policy cannot honour fail with an error that says
// why, and (f) leave the cache as it was: the same cells, keys and values,
// and the same continuation as a fork taken before.

// Runs op on the cache, expects an error containing `why`, and checks that
// nothing changed: the cells, keys and values, and the continuation (a fork
// taken after the refusal continues as one taken before).
void ExpectRefused(
    KvCache& cache, const std::function<Status(KvCache&)>& op, const std::string& why,
    const std::vector<int32_t>& next,
    const std::function<std::vector<float>(KvCache&, const std::vector<int32_t>&)>& run) {
  const Snapshot before = Snap(cache);
  auto fork = cache.Fork();
  ASSERT_TRUE(fork.ok()) << fork.message();
  const Status s = op(cache);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << why << "'";
  EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("kv: ", 0), 0u) << s.message();
  EXPECT_TRUE(Snap(cache) == before) << "the cache changed: " << s.message();
  auto after = cache.Fork();
  ASSERT_TRUE(after.ok()) << after.message();
  EXPECT_EQ(MaxAbsDiff(run(**after, next), run(**fork, next)), 0.0);
}

TEST_P(SeqOps, RefusedOperationsSayWhyAndChangeNothing) {
  const std::vector<int32_t> text = Prompt(40, n_vocab(), 35);
  const std::vector<int32_t> next = Slice(Prompt(11, n_vocab(), 36), 1, 11);
  auto run = [&](KvCache& c, const std::vector<int32_t>& tokens) { return Run(c, tokens); };
  for (RopeK rope : kRopes) {
    SCOPED_TRACE(RopeKName(rope));
    {  // h2o scored every token: its choices depend on the dropped ones.
      std::unique_ptr<KvCache> c = New(Kv("h2o", 48, 0, rope));
      Run(*c, Slice(text, 0, 10));
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(5); }, "depend on them", next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.RemoveRange(2, 4); }, "depend on them", next, run);
    }
    {  // tova after its first eviction.
      std::unique_ptr<KvCache> c = New(Kv("tova", 24, 0, rope));
      Run(*c, text);
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(30); }, "depend on them", next, run);
    }
    {  // snapkv once its window queries have scored the prompt.
      std::unique_ptr<KvCache> c =
          New(Kv("snapkv", 24, 0, rope, KvPositions::kOriginal, -1, 8), 40);
      Run(*c, Slice(text, 0, 35));
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(20); }, "depend on them", next, run);
      Run(*c, Slice(text, 35, 40));  // compressed: 16 of 32 evicted
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(39); }, "depend on them", next, run);
    }
    {  // snapkv after a prompt of 20 whose 12 earlier tokens all fit: nothing
       // evicted, but their selection was made by queries 12..19.
      std::unique_ptr<KvCache> c =
          New(Kv("snapkv", 48, 0, rope, KvPositions::kOriginal, -1, 8), 20);
      Run(*c, Slice(text, 0, 30));
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(15); }, "depend on them", next, run);
    }
    for (KvPositions positions : {KvPositions::kOriginal, KvPositions::kCompact}) {
      // sink 24 (4 sinks + 20): 40 tokens evicted 4..19; continuing at 38
      // would need 19.
      std::unique_ptr<KvCache> c = New(Kv("sink", 24, 4, rope, positions));
      Run(*c, text);
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(38); }, "already evicted tokens it would need",
          next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(10); }, "already evicted tokens it would need",
          next, run);
      std::unique_ptr<KvCache> w = New(Kv("window", 24, 0, rope, positions));
      Run(*w, text);
      ExpectRefused(
          *w, [](KvCache& k) { return k.KeepPrefix(38); }, "already evicted tokens it would need",
          next, run);
    }
    {  // Ranges outside the text, under the full cache.
      std::unique_ptr<KvCache> c = New(Kv("full", 0, 0, rope));
      Run(*c, text);
      const std::string out = "is not within the 40 tokens";
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(41); }, out, next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.KeepPrefix(-1); }, out, next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.RemoveRange(10, 5); }, out, next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.RemoveRange(0, 41); }, out, next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.ShiftPositions(30, 41, -2); }, out, next, run);
      ExpectRefused(
          *c, [](KvCache& k) { return k.ShiftPositions(5, 10, -6); }, "would move below 0", next,
          run);
    }
  }
}

// ---- (d) RemoveRange of a middle range under full (and sink, whose ring
// simply loses those keys): the continuation equals the reference whose
// queries after the removal do not see the removed keys.

TEST_P(SeqOps, RemoveRangeMatchesMaskedReference) {
  const std::vector<int32_t> text = Prompt(60, n_vocab(), 37);
  const int64_t run = 40, from = 10, to = 20;
  auto removed = [&](int64_t t, int64_t j) { return t >= run && j >= from && j < to; };
  const DistanceFn full = [&](int64_t t, int64_t j) -> int64_t {
    return removed(t, j) ? -1 : t - j;
  };
  const DistanceFn ring = RingDistance(48, 4, false);
  const DistanceFn sink = [&](int64_t t, int64_t j) -> int64_t {
    return removed(t, j) ? -1 : ring(t, j);
  };
  const std::vector<float> ref_full = ReferenceLogits(model(), text, full);
  const std::vector<float> ref_sink = ReferenceLogits(model(), text, sink);
  for (RopeK rope : kRopes) {
    for (bool is_sink : {false, true}) {
      const KvConfig kv = is_sink ? Kv("sink", 48, 4, rope) : Kv("full", 0, 0, rope);
      SCOPED_TRACE(Name(kv));
      std::unique_ptr<KvCache> c = New(kv);
      const std::vector<float> head = Run(*c, Slice(text, 0, run));
      Status s = c->RemoveRange(from, to);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(c->n_seen(), run);  // later tokens keep their indices and positions
      const std::vector<float> tail = Run(*c, Slice(text, run, 60));
      const std::vector<float>& ref = is_sink ? ref_sink : ref_full;
      EXPECT_LT(MaxAbsDiff(Rows(ref, 0, run), head), 1e-4);
      EXPECT_LT(MaxAbsDiff(Rows(ref, run, 60), tail), 1e-4);
    }
  }
}

// ---- (e) ShiftPositions: the continuation equals the reference with the
// shifted distances, for the full cache and sink with original positions,
// with cached keys (re-rotated) and deferred ones.

TEST_P(SeqOps, ShiftPositionsMatchesShiftedReference) {
  const std::vector<int32_t> text = Prompt(70, n_vocab(), 39);
  const int64_t run = 40;
  struct Case {
    const char* name;
    TextIndex remove_from, remove_to;  // removed first (to == from: nothing)
    TextIndex from, to;                // shifted by delta
    int32_t delta;
  };
  const Case cases[] = {
      {"tail -5", 0, 0, 20, run, -5},
      // llama.cpp's context shift: drop 4..13, move the rest back over them.
      {"context shift", 4, 14, 14, run, -10},
      {"middle +3", 0, 0, 10, 20, 3},
  };
  for (const Case& cs : cases) {
    // Position of token x as the queries after the shift see it.
    auto pos = [&](int64_t x) -> int64_t {
      if (x >= cs.from && x < cs.to) return x + cs.delta;
      if (x >= cs.to && cs.to == run) return x + cs.delta;  // new tokens continue the tail
      return x;
    };
    auto gone = [&](int64_t t, int64_t j) {
      return t >= run && j >= cs.remove_from && j < cs.remove_to;
    };
    const DistanceFn ring = RingDistance(48, 4, false);
    const DistanceFn full_d = [&](int64_t t, int64_t j) -> int64_t {
      if (gone(t, j)) return -1;
      return t >= run ? pos(t) - pos(j) : t - j;
    };
    const DistanceFn sink_d = [&](int64_t t, int64_t j) -> int64_t {
      if (ring(t, j) < 0) return -1;
      return full_d(t, j);
    };
    const std::vector<float> ref_full = ReferenceLogits(model(), text, full_d);
    const std::vector<float> ref_sink = ReferenceLogits(model(), text, sink_d);
    for (RopeK rope : kRopes) {
      for (bool is_sink : {false, true}) {
        const KvConfig kv = is_sink ? Kv("sink", 48, 4, rope) : Kv("full", 0, 0, rope);
        SCOPED_TRACE(::testing::Message() << Name(kv) << " " << cs.name);
        std::unique_ptr<KvCache> c = New(kv);
        Run(*c, Slice(text, 0, run));
        if (cs.remove_to > cs.remove_from) {
          ASSERT_TRUE(c->RemoveRange(cs.remove_from, cs.remove_to).ok());
        }
        Status s = c->ShiftPositions(cs.from, cs.to, cs.delta);
        ASSERT_TRUE(s.ok()) << s.message();
        for (int32_t cell = 0; cell < c->n_cells(); ++cell) {
          const TextIndex idx = c->CellIndex(cell);
          if (idx >= 0) {
            EXPECT_EQ(c->CellPos(cell), pos(idx)) << "token " << idx;
          }
        }
        const std::vector<float> tail = Run(*c, Slice(text, run, 70));
        EXPECT_LT(MaxAbsDiff(Rows(is_sink ? ref_sink : ref_full, run, 70), tail), 1e-4);
      }
    }
  }
}

// A prefix kept after a shift: the text continues from the last kept token's
// position, shifted or not, as for a fresh run of the prefix with the same shift.
TEST_P(SeqOps, KeepPrefixAfterShiftContinuesFromTheLastKeptPosition) {
  const std::vector<int32_t> text = Prompt(40, n_vocab(), 43);
  const std::vector<int32_t> next = Slice(Prompt(21, n_vocab(), 44), 1, 21);
  for (RopeK rope : kRopes) {
    for (bool is_sink : {false, true}) {
      const KvConfig kv = is_sink ? Kv("sink", 48, 4, rope) : Kv("full", 0, 0, rope);
      for (TextIndex keep : {15, 30}) {
        SCOPED_TRACE(::testing::Message() << Name(kv) << " keep " << keep);
        // Tokens 20..39 move back by 5, then the text is cut at `keep`.
        std::unique_ptr<KvCache> c = New(kv);
        Run(*c, text);
        ASSERT_TRUE(c->ShiftPositions(20, 40, -5).ok());
        ASSERT_TRUE(c->KeepPrefix(keep).ok());
        const std::vector<float> got = Run(*c, next);
        // The same prefix run fresh, its part from 20 on shifted the same way.
        std::unique_ptr<KvCache> fresh = New(kv);
        Run(*fresh, Slice(text, 0, keep));
        if (keep > 20) {
          ASSERT_TRUE(fresh->ShiftPositions(20, keep, -5).ok());
        }
        EXPECT_LT(MaxAbsDiff(Run(*fresh, next), got), 1e-4);
      }
    }
  }
}

TEST_P(SeqOps, ShiftRefusedWhereThePolicyOwnsPositions) {
  const std::vector<int32_t> text = Prompt(40, n_vocab(), 41);
  const std::vector<int32_t> next = Slice(Prompt(11, n_vocab(), 42), 1, 11);
  auto run = [&](KvCache& c, const std::vector<int32_t>& tokens) { return Run(c, tokens); };
  auto shift = [](KvCache& k) { return k.ShiftPositions(20, 40, -5); };
  for (RopeK rope : kRopes) {
    SCOPED_TRACE(RopeKName(rope));
    for (const char* p : {"sink", "window"}) {
      std::unique_ptr<KvCache> c = New(Kv(p, 24, 4, rope, KvPositions::kCompact));
      Run(*c, text);
      ExpectRefused(*c, shift, "compact positions", next, run);
    }
    for (const char* p : {"h2o", "snapkv", "tova"}) {
      for (KvPositions positions : {KvPositions::kOriginal, KvPositions::kCompact}) {
        SCOPED_TRACE(::testing::Message() << p << "/" << KvPositionsName(positions));
        std::unique_ptr<KvCache> c = New(Kv(p, 48, 0, rope, positions, -1, 8));
        Run(*c, text);  // nothing evicted yet: still refused
        ExpectRefused(*c, shift, "chooses tokens by attention", next, run);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SeqOps, ::testing::Values("stories260K", "gqa"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rotor::testing
