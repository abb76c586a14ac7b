// The sample/stop step, one rule at a time and where two rules meet: the
// documented order decides (sample_step.h).
#include "engine/sample_step.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "../kv/kv_test_util.h"

namespace rotor {
namespace {

class SampleStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromGguf(M().file());
    ASSERT_TRUE(tok.ok()) << tok.message();
    tok_ = std::move(*tok);
    cache_ = Cache(64);
  }
  static const Model& M() { return testing::LoadModelCached(testing::kStories); }
  int n_vocab() const { return M().config().n_vocab; }

  // A full cache of n_ctx cells holding `n` tokens (cells only: no forward pass).
  std::unique_ptr<KvCache> Cache(int n_ctx, int n = 0) {
    auto c = KvCache::Create(M().config().kv_shape(n_ctx), KvConfig{.types = {KvType::kF32, KvType::kF32}});
    EXPECT_TRUE(c.ok()) << c.message();
    if (n > 0) {
      KvPlan plan;
      EXPECT_TRUE((*c)->Plan(n, &plan).ok());
      EXPECT_TRUE((*c)->Prepare(plan).ok());
      (*c)->Commit(plan);
    }
    return std::move(*c);
  }
  // Logits whose argmax is `token` (and `second` next, when given).
  std::vector<float> Peak(int32_t token, int32_t second = -1) const {
    std::vector<float> l(n_vocab(), -1.f);
    if (second >= 0) l[second] = 0.9f;
    l[token] = 1.f;
    return l;
  }
  Sampler Greedy(float repeat_penalty = 1.f) const {
    SamplingParams p;
    p.temperature = 0;
    p.repeat_penalty = repeat_penalty;
    return Sampler(p, n_vocab());
  }

  // Greedy sampling under `gbnf`, lazy when `triggers` are given.
  SamplingParams GreedyUnder(std::string_view gbnf, std::vector<std::string> triggers = {},
                             bool at_start = false) const {
    auto g = grammar::ParseGrammar(gbnf);
    EXPECT_TRUE(g.ok()) << g.message();
    SamplingParams p;
    p.temperature = 0;
    p.grammar = g.ok() ? *g : nullptr;
    p.grammar_triggers = std::move(triggers);
    p.grammar_triggers_at_start = at_start;
    return p;
  }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<KvCache> cache_;
};

// " Once upon a time": 403 407 261 378.
constexpr int32_t kOnce = 403, kUpon = 407, kA = 261, kTime = 378;

TEST_F(SampleStepTest, GeneratesUntilTheBudgetIsSpent) {
  Sampler sampler = Greedy();
  SampleStep step(*tok_, sampler, StopRules{.n_predict = 2});
  Sampled a = step.Next(Peak(kOnce), *cache_);
  EXPECT_EQ(a.token, kOnce);
  EXPECT_TRUE(a.generated && a.continues);
  EXPECT_FALSE(a.finish);
  EXPECT_EQ(a.text, a.piece);
  Sampled b = step.Next(Peak(kUpon), *cache_);
  EXPECT_TRUE(b.generated && b.continues);  // the last token continues the text too
  EXPECT_EQ(b.finish, FinishReason::kLength);
  EXPECT_EQ(a.piece + b.piece, " Once upon");
  Sampled c = step.Next(Peak(kA), *cache_);  // 1: nothing sampled
  EXPECT_EQ(c.token, -1);
  EXPECT_FALSE(c.generated);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(step.n_generated(), 2);

  SampleStep none(*tok_, sampler, StopRules{.n_predict = 0});
  EXPECT_EQ(none.Next(Peak(kA), *cache_).token, -1);
}

// -inf is a banned token, any NaN (either sign) or +inf is a broken model:
// the step ends with an error instead of a token.
TEST_F(SampleStepTest, NanOrPlusInfinityLogitsEndWithAnError) {
  const float inf = std::numeric_limits<float>::infinity();
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              -std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0xffffffffu), std::bit_cast<float>(0x7f800001u),
                              inf};
  for (const int at : {0, 5, n_vocab() - 1}) {
    for (const float v : bad_values) {
      Sampler sampler = Greedy();
      SampleStep step(*tok_, sampler, StopRules{.n_predict = 4});
      std::vector<float> l = Peak(kOnce);
      l[at] = v;
      const Sampled s = step.Next(l, *cache_);
      EXPECT_EQ(s.finish, FinishReason::kError) << at << " " << v;
      EXPECT_EQ(s.token, -1);
      EXPECT_NE(s.error.find("NaN or infinite"), std::string::npos) << s.error;
    }
    Sampler sampler = Greedy();
    SampleStep step(*tok_, sampler, StopRules{.n_predict = 4});
    std::vector<float> l = Peak(kOnce);
    l[at == kOnce ? 0 : at] = -inf;
    l[kUpon] = std::numeric_limits<float>::max();
    const Sampled s = step.Next(l, *cache_);
    EXPECT_EQ(s.token, kUpon);
    EXPECT_FALSE(s.finish);
  }
}

TEST_F(SampleStepTest, EndTokensAreDroppedUnlessIgnored) {
  Sampler sampler = Greedy();
  const int32_t eos = tok_->eos();
  ASSERT_TRUE(tok_->IsEndOfGeneration(eos));
  // 3 before 7: an end token at the last budget token is kEos, not kLength.
  SampleStep step(*tok_, sampler, StopRules{.n_predict = 1});
  Sampled t = step.Next(Peak(eos), *cache_);
  EXPECT_EQ(t.token, eos);
  EXPECT_FALSE(t.generated || t.continues);
  EXPECT_EQ(t.finish, FinishReason::kEos);
  EXPECT_EQ(step.n_generated(), 0);

  SampleStep turn(*tok_, sampler, StopRules{.end_tokens = {kTime}});
  EXPECT_EQ(turn.Next(Peak(kTime), *cache_).finish, FinishReason::kEos);

  SampleStep ignoring(*tok_, sampler, StopRules{.ignore_eos = true, .end_tokens = {kTime}});
  Sampled e = ignoring.Next(Peak(eos), *cache_);
  EXPECT_TRUE(e.generated && e.continues);
  EXPECT_FALSE(e.finish);
  EXPECT_FALSE(ignoring.Next(Peak(kTime), *cache_).finish);
}

TEST_F(SampleStepTest, StopStringEndsBeforeTheTokenContinues) {
  Sampler sampler = Greedy();
  // 5 before 6 and 7: the stop string wins over a full cache and a spent budget.
  auto full = Cache(8, 8);
  ASSERT_EQ(full->Remaining(), 0);
  SampleStep step(*tok_, sampler, StopRules{.n_predict = 3, .stop = {"pon a"}});
  Sampled once = step.Next(Peak(kOnce), *cache_);
  Sampled upon = step.Next(Peak(kUpon), *cache_);
  EXPECT_TRUE(upon.continues);
  Sampled a = step.Next(Peak(kA), *full);
  EXPECT_TRUE(a.generated);
  EXPECT_FALSE(a.continues);
  EXPECT_EQ(a.finish, FinishReason::kStop);
  EXPECT_EQ(once.text + upon.text + a.text, " Once u");  // up to the stop string
  EXPECT_EQ(step.Flush().text, "");                      // nothing after it
  EXPECT_EQ(step.n_generated(), 3);
}

TEST_F(SampleStepTest, FullCacheEndsBeforeTheBudget) {
  Sampler sampler = Greedy();
  auto full = Cache(8, 8);
  // 6 before 7: a kLength token always has room to run.
  SampleStep step(*tok_, sampler, StopRules{.n_predict = 1});
  Sampled t = step.Next(Peak(kOnce), *full);
  EXPECT_TRUE(t.generated);  // output, not run
  EXPECT_FALSE(t.continues);
  EXPECT_EQ(t.finish, FinishReason::kContext);
  EXPECT_EQ(t.text, t.piece);

  auto room = Cache(8, 7);
  SampleStep last(*tok_, sampler, StopRules{.n_predict = 1});
  EXPECT_EQ(last.Next(Peak(kOnce), *room).finish, FinishReason::kLength);
}

// 7: only a token that continues the text enters the sampler's history.
TEST_F(SampleStepTest, SamplerAcceptsOnlyTokensThatContinue) {
  Sampler sampler = Greedy(/*repeat_penalty=*/4.f);
  SampleStep step(*tok_, sampler, StopRules{.stop = {" upon"}});
  Sampled t = step.Next(Peak(kUpon, kOnce), *cache_);
  ASSERT_EQ(t.finish, FinishReason::kStop);
  EXPECT_EQ(sampler.Sample(Peak(kUpon, kOnce)), kUpon);  // not penalised

  SampleStep go_on(*tok_, sampler, StopRules{});
  ASSERT_TRUE(go_on.Next(Peak(kUpon, kOnce), *cache_).continues);
  EXPECT_EQ(sampler.Sample(Peak(kUpon, kOnce)), kOnce);  // kUpon penalised now
}

TEST_F(SampleStepTest, FlushReleasesHeldText) {
  Sampler sampler = Greedy();
  SampleStep step(*tok_, sampler, StopRules{.stop = {" time to go"}});
  Sampled a = step.Next(Peak(kA), *cache_);
  Sampled t = step.Next(Peak(kTime), *cache_);
  EXPECT_EQ(a.text, " a");
  EXPECT_EQ(t.text, "");  // " time" may start the stop string
  EXPECT_EQ(step.Flush().text, " time");
}

// 2 with a grammar: a refused draw falls back to the best allowed token;
// EOS only where the grammar may end; a complete grammar ends the step.
TEST_F(SampleStepTest, GrammarRefusesTokensAndEndsWhenComplete) {
  Sampler sampler(GreedyUnder(R"g(root ::= " a" " time"?)g"), n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  // The argmax " Once" is refused; " a" is allowed (the second best is " upon",
  // refused too, so the fallback is the best of the allowed).
  std::vector<float> l = Peak(kOnce, kUpon);
  l[kA] = 0.5f;
  const Sampled a = step.Next(l, *cache_);
  EXPECT_EQ(a.token, kA);
  EXPECT_TRUE(a.continues);
  EXPECT_FALSE(a.finish);
  const Sampled t = step.Next(Peak(kTime), *cache_);
  EXPECT_EQ(t.token, kTime);
  EXPECT_EQ(t.finish, FinishReason::kEos);  // nothing can follow " a time"
  EXPECT_TRUE(t.continues);
}

// A grammar too ambiguous to follow ends the step with an error that says so,
// not as a stop (matcher.h: exponentially many open stacks).
// A chat reply (trim_leading_space) skips its leading whitespace, for the
// grammar too; a grammar that must begin with whitespace keeps it instead
// (skipped, it could never be met: the reply came back empty).
TEST_F(SampleStepTest, ChatReplyKeepsTheLeadingSpaceItsGrammarAsksFor) {
  const std::pair<const char*, const char*> cases[] = {
      {R"g(root ::= " a" " time"?)g", " a"},
      {R"g(root ::= [ \t\n]+ "a" " time"?)g", " a"},
      {R"g(root ::= "a" " time"?)g", "a"},
      {R"g(root ::= [ ]? "a" " time"?)g", "a"},  // may begin with it: skipped, as before
  };
  for (const auto& [gbnf, first] : cases) {
    Sampler sampler(GreedyUnder(gbnf), n_vocab());
    SampleStep step(*tok_, sampler, StopRules{.trim_leading_space = true});
    std::vector<float> l = Peak(kOnce, kUpon);
    l[kA] = 0.5f;
    const Sampled a = step.Next(l, *cache_);
    EXPECT_EQ(a.token, kA) << gbnf;
    EXPECT_EQ(a.text, first) << gbnf;
    const Sampled t = step.Next(Peak(kTime), *cache_);
    EXPECT_EQ(t.token, kTime) << gbnf;
    EXPECT_EQ(t.text, " time") << gbnf;
    EXPECT_EQ(t.finish, FinishReason::kEos) << gbnf;
  }
}

TEST_F(SampleStepTest, GrammarTooAmbiguousIsAnError) {
  Sampler sampler(GreedyUnder(R"g(root ::= x
x ::= " a" x y | " a" x z | " a"
y ::= " a"
z ::= " a")g"), n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  Sampled s;
  int n = 0;
  for (; n < 40; ++n) {
    s = step.Next(Peak(kA), *cache_);
    if (s.finish) break;
    EXPECT_EQ(s.token, kA);
  }
  ASSERT_TRUE(s.finish);
  EXPECT_EQ(*s.finish, FinishReason::kError);
  EXPECT_GE(n, 10);
  EXPECT_NE(s.error.find("grammar: too ambiguous"), std::string::npos) << s.error;
}

TEST_F(SampleStepTest, GrammarAllowsEosOnlyWhereItMayEnd) {
  Sampler sampler(GreedyUnder(R"g(root ::= " a"+)g"), n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  std::vector<float> l = Peak(tok_->eos());
  l[kA] = 0.5f;
  EXPECT_EQ(step.Next(l, *cache_).token, kA);  // EOS refused: nothing yet
  const Sampled e = step.Next(l, *cache_);
  EXPECT_EQ(e.token, tok_->eos());
  EXPECT_EQ(e.finish, FinishReason::kEos);
}

// A lazy grammar: free text until a trigger (here two tokens long) is
// complete; from then on the grammar decides, and its end ends the step.
TEST_F(SampleStepTest, LazyGrammarAppliesFromItsTrigger) {
  Sampler sampler(GreedyUnder(R"g(root ::= " Once upon a")g", {" Once upon"}), n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  // Free: the grammar would refuse each of these.
  for (int32_t t : {kTime, kA, kOnce, kTime, kOnce}) {
    const Sampled s = step.Next(Peak(t), *cache_);
    EXPECT_EQ(s.token, t);
    EXPECT_FALSE(s.finish);
  }
  // " Once" + " upon" completes the trigger: " Once upon" is the grammar's.
  EXPECT_EQ(step.Next(Peak(kUpon), *cache_).token, kUpon);
  std::vector<float> l = Peak(kTime, kOnce);
  l[kA] = 0.5f;
  const Sampled a = step.Next(l, *cache_);  // " time" and " Once" refused now
  EXPECT_EQ(a.token, kA);
  EXPECT_EQ(a.finish, FinishReason::kEos);  // the grammar is complete
}

// The token that completes a trigger must leave text the grammar accepts;
// before the trigger an end of generation is allowed as in free text.
TEST_F(SampleStepTest, LazyGrammarRefusesATriggerItCannotContinue) {
  Sampler sampler(GreedyUnder(R"g(root ::= " up" " a")g", {" up"}), n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  // " upon" holds the trigger, but " upon" is not " up" " a": refused, and
  // the best other token is free text.
  const Sampled a = step.Next(Peak(kUpon, kA), *cache_);
  EXPECT_EQ(a.token, kA);
  EXPECT_FALSE(a.finish);
  const Sampled e = step.Next(Peak(tok_->eos()), *cache_);
  EXPECT_EQ(e.finish, FinishReason::kEos);
}

// Triggers at the start: a text that begins otherwise is free to its end; one
// that begins with the trigger is the grammar's.
TEST_F(SampleStepTest, LazyGrammarAtTheStart) {
  // The grammar holds the text from the trigger on (after the whitespace).
  const SamplingParams p = GreedyUnder(R"g(root ::= "Once a")g", {"Once"}, /*at_start=*/true);
  {
    Sampler sampler(p, n_vocab());
    SampleStep step(*tok_, sampler, StopRules{});
    EXPECT_EQ(step.Next(Peak(kTime), *cache_).token, kTime);
    EXPECT_EQ(step.Next(Peak(kOnce), *cache_).token, kOnce);  // not at the start
    const Sampled u = step.Next(Peak(kUpon), *cache_);
    EXPECT_EQ(u.token, kUpon);
    EXPECT_FALSE(u.finish);
  }
  {
    Sampler sampler(p, n_vocab());
    SampleStep step(*tok_, sampler, StopRules{});
    EXPECT_EQ(step.Next(Peak(kOnce), *cache_).token, kOnce);  // " Once": after whitespace
    std::vector<float> l = Peak(kUpon);
    l[kA] = 0.5f;
    const Sampled a = step.Next(l, *cache_);
    EXPECT_EQ(a.token, kA);
    EXPECT_EQ(a.finish, FinishReason::kEos);
  }
}

// A preserved control token is its text for the grammar, the triggers and
// the output (Mistral v0.3's [TOOL_CALLS]); other control tokens have none.
TEST_F(SampleStepTest, PreservedControlTokensAreText) {
  const int32_t bos = tok_->bos();  // "<s>", a control token
  ASSERT_GE(bos, 0);
  SamplingParams p = GreedyUnder(R"g(root ::= "<s>" " a")g", {"<s>"});
  {
    Sampler sampler(p, n_vocab());
    SampleStep step(*tok_, sampler, StopRules{});
    // Not preserved: "<s>" has no text, so it never completes the trigger.
    const Sampled b = step.Next(Peak(bos), *cache_);
    EXPECT_EQ(b.text, "");
    EXPECT_EQ(step.Next(Peak(kTime), *cache_).token, kTime);  // still free
  }
  p.preserved_tokens = {bos};
  Sampler sampler(p, n_vocab());
  SampleStep step(*tok_, sampler, StopRules{});
  EXPECT_EQ(step.Next(Peak(kOnce), *cache_).text, " Once");  // free
  const Sampled b = step.Next(Peak(bos), *cache_);             // the trigger
  EXPECT_EQ(b.token, bos);
  EXPECT_EQ(b.text, "<s>");
  std::vector<float> l = Peak(kTime);
  l[kA] = 0.5f;
  const Sampled a = step.Next(l, *cache_);  // the grammar's now: " time" refused
  EXPECT_EQ(a.token, kA);
  EXPECT_EQ(a.finish, FinishReason::kEos);
}

TEST(SamplingParamsTest, GrammarTriggersNeedAGrammarAndText) {
  SamplingParams p;
  p.grammar_triggers = {"<tool_call>"};
  EXPECT_NE(ValidateSamplingParams(p).message().find("without a grammar"), std::string::npos);
  auto g = grammar::ParseGrammar(R"g(root ::= "x")g");
  ASSERT_TRUE(g.ok());
  p.grammar = *g;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.grammar_triggers = {""};
  EXPECT_NE(ValidateSamplingParams(p).message().find("must not be empty"), std::string::npos);
}

TEST(ComputeLogprobsTest, IsTheLogSoftmaxOfTheRawLogits) {
  std::vector<float> logits(257);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * i) * 6 + 0.01f * i;
  logits[3] = -std::numeric_limits<float>::infinity();
  TokenLogprobs all;
  ComputeLogprobs(logits, 7, static_cast<int>(logits.size()), &all);
  ASSERT_EQ(all.top.size(), logits.size());
  // Direct: log(exp(l_i) / sum exp(l_j)).
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  double mass = 0;
  for (size_t i = 0; i < all.top.size(); ++i) {
    const auto [id, lp] = all.top[i];
    if (i > 0) {
      EXPECT_GE(all.top[i - 1].second, lp);
    }
    EXPECT_LE(lp, 0.0f);
    if (id != 3) {
      EXPECT_NEAR(lp, std::log(std::exp(static_cast<double>(logits[id])) / sum), 1e-4);
    }
    mass += std::exp(static_cast<double>(lp));
  }
  EXPECT_NEAR(mass, 1.0, 1e-4);
  EXPECT_NEAR(all.logprob, logits[7] - std::log(sum), 1e-4);
  // The -inf token: the lowest finite float (JSON has no -inf).
  EXPECT_EQ(all.top.back().first, 3);
  EXPECT_TRUE(std::isfinite(all.top.back().second));
  // The best few: the same values, best first.
  TokenLogprobs few;
  ComputeLogprobs(logits, 7, 5, &few);
  ASSERT_EQ(few.top.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(few.top[i], all.top[i]);
  TokenLogprobs none;
  ComputeLogprobs(logits, 7, 0, &none);
  EXPECT_TRUE(none.top.empty());
  EXPECT_EQ(none.logprob, all.logprob);
}

}  // namespace
}  // namespace rotor
