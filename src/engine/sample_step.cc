#include "engine/sample_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "base/check.h"

#include "engine/runner.h"

namespace rotor {

SampleStep::SampleStep(const Tokenizer& tokenizer, Sampler& sampler, StopRules rules,
                       const TokenTrieCache* trie)
    : tokenizer_(tokenizer),
      sampler_(sampler),
      rules_(std::move(rules)),
      decoder_(tokenizer),
      stops_(rules_.stop),
      trie_(trie) {
  if (sampler_.params().grammar) grammar_.emplace(sampler_.params().grammar);
  lazy_ = grammar_ && !sampler_.params().grammar_triggers.empty();
  // A grammar that must begin with whitespace asks for it: the reply keeps it
  // (skipped, as a chat reply's start, the grammar could never be met).
  if (rules_.trim_leading_space && grammar_ && !lazy_ && MustBeginWithSpace(*grammar_))
    rules_.trim_leading_space = false;
  if (grammar_) grammar_->ClearOverflow();
}

namespace {
constexpr std::string_view kSpace = " \t\n\r\f\v";
}  // namespace

bool SampleStep::MustBeginWithSpace(const grammar::Matcher& g) {
  // Every byte a text can begin with (lead bytes of longer characters
  // included: the matcher holds them pending): only whitespace is accepted.
  bool space = false;
  for (int b = 1; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (!g.Accepts(std::string_view(&c, 1))) continue;
    if (kSpace.find(c) == std::string_view::npos) return false;
    space = true;
  }
  return space;
}

bool SampleStep::CompletesTrigger(int32_t token, std::string* from_trigger) const {
  const SamplingParams& p = sampler_.params();
  std::string text = before_;
  text += Text(token);
  size_t at = std::string::npos;
  if (p.grammar_triggers_at_start) {
    const size_t first = text.find_first_not_of(kSpace);
    if (first == std::string::npos) return false;
    for (const std::string& t : p.grammar_triggers)
      if (std::string_view(text).substr(first).starts_with(t)) at = first;
  } else {
    // before_ is shorter than any trigger, so an occurrence ends in the token.
    for (const std::string& t : p.grammar_triggers) at = std::min(at, text.find(t));
  }
  if (at == std::string::npos) return false;
  *from_trigger = text.substr(at);
  return true;
}

void SampleStep::AdvanceLazy(int32_t token) {
  const SamplingParams& p = sampler_.params();
  std::string from_trigger;
  if (CompletesTrigger(token, &from_trigger)) {
    CHECK(grammar_->Accept(from_trigger));  // Allowed() said so
    grammar_started_ = true;
    lazy_ = false;
    before_.clear();
    return;
  }
  before_ += Text(token);
  if (p.grammar_triggers_at_start) {
    const size_t first = before_.find_first_not_of(kSpace);
    if (first == std::string::npos) return;
    const std::string_view head = std::string_view(before_).substr(first);
    // Still possibly the start of a trigger?
    for (const std::string& t : p.grammar_triggers)
      if (std::string_view(t).starts_with(head)) return;
    grammar_.reset();  // the text began otherwise: free to the end
    lazy_ = false;
    before_.clear();
    return;
  }
  size_t keep = 0;
  for (const std::string& t : p.grammar_triggers) keep = std::max(keep, t.size() - 1);
  if (before_.size() > keep) before_.erase(0, before_.size() - keep);
}

bool SampleStep::Ends(int32_t token) const {
  return tokenizer_.IsEndOfGeneration(token) ||
         std::find(rules_.end_tokens.begin(), rules_.end_tokens.end(), token) !=
             rules_.end_tokens.end();
}

Sampled SampleStep::Next(std::span<const float> logits, const KvCache& cache) {
  Sampled s;
  const bool budget_spent = rules_.n_predict >= 0 && n_generated_ >= rules_.n_predict;
  if (budget_spent) {
    s.finish = FinishReason::kLength;
    return s;
  }
  if (!LogitsAreNumbers(logits)) {
    // Weights (or a computation) holding NaN or Inf: every choice would be
    // garbage, and greedy decoding took the lowest id each step in silence.
    s.finish = FinishReason::kError;
    s.error = fmt::format(
        "the model's logits hold NaN or infinite values (after {} generated tokens): its "
        "weights may hold NaN or Inf values",
        n_generated_);
    return s;
  }
  if (!grammar_) {
    s.token = sampler_.Sample(logits);
  } else {
    s.token = SampleConstrained(logits);
    if (s.token < 0) {
      s.finish = FinishReason::kStop;
      if (grammar_->overflowed()) {
        s.finish = FinishReason::kError;
        s.error = grammar::Matcher::OverflowMessage();
      }
      return s;
    }
  }
  if (!rules_.ignore_eos && Ends(s.token)) {
    s.finish = FinishReason::kEos;
    return s;
  }
  s.generated = true;
  ++n_generated_;
  if (rules_.logprobs >= 0) ComputeLogprobs(logits, s.token, rules_.logprobs, &s.logprobs.emplace());
  if (lazy_) {
    AdvanceLazy(s.token);
  } else if (grammar_) {
    const std::string_view text = GrammarText(s.token);
    grammar_started_ |= !text.empty();
    CHECK(grammar_->Accept(text));  // Allowed() said so
  }
  if (Preserved(s.token)) {
    // Its text, after whatever the decoder held (an unfinished character).
    s.piece = decoder_.Flush();
    s.piece += Text(s.token);
  } else {
    s.piece = decoder_.Push(s.token);
  }
  s.text = Release(stops_.Push(s.piece));
  if (stops_.stopped()) {
    s.finish = FinishReason::kStop;
    return s;
  }
  if (!FitsCache(cache, 1).ok()) {
    s.finish = FinishReason::kContext;
    return s;
  }
  s.continues = true;
  sampler_.Accept(s.token);
  if (grammar_ && !lazy_ && grammar_->Done()) {
    s.finish = FinishReason::kEos;
    return s;
  }
  if (rules_.n_predict >= 0 && n_generated_ >= rules_.n_predict) s.finish = FinishReason::kLength;
  return s;
}

bool SampleStep::Preserved(int32_t token) const {
  const std::vector<int32_t>& p = sampler_.params().preserved_tokens;
  return !p.empty() && std::find(p.begin(), p.end(), token) != p.end();
}

std::string_view SampleStep::Text(int32_t token) const {
  return tokenizer_.PieceView(token, /*special=*/Preserved(token));
}

std::string_view SampleStep::GrammarText(int32_t token) const {
  std::string_view text = Text(token);
  if (rules_.trim_leading_space && !grammar_started_) {
    const size_t first = text.find_first_not_of(" \t\n\r\f\v");
    text = first == std::string_view::npos ? std::string_view() : text.substr(first);
  }
  return text;
}

bool SampleStep::Allowed(int32_t token) const {
  if (Ends(token)) return lazy_ || (!rules_.ignore_eos && grammar_->CanEnd());
  if (lazy_) {
    std::string from_trigger;
    return !CompletesTrigger(token, &from_trigger) || grammar_->Accepts(from_trigger);
  }
  // A token without text (control, unused) would let the model stall.
  const std::string_view text = GrammarText(token);
  return !text.empty() && grammar_->Accepts(text);
}

int32_t SampleStep::SampleConstrained(std::span<const float> logits) {
  // The first text too ambiguous to decide ends the search (and the reply,
  // with an error): each costs the matcher's whole step budget.
  grammar_->ClearOverflow();
  const int32_t first = sampler_.Sample(logits);
  if (Allowed(first)) return first;
  if (grammar_->overflowed()) return -1;
  const auto n = static_cast<int32_t>(logits.size());
  if (!MaskAllowed(n)) return -1;
  allowed_[first] = 0;
  masked_.resize(logits.size());
  bool any = false;
  for (int32_t t = 0; t < n; ++t) {
    masked_[t] = allowed_[t] ? logits[t] : -std::numeric_limits<float>::infinity();
    any |= allowed_[t] != 0;
  }
  if (!any) return -1;
  const int32_t t = sampler_.Sample(masked_);
  if (allowed_[t]) return t;
  // Every allowed logit was -inf too (the sampler's fallback): the first allowed.
  for (int32_t i = 0; i < n; ++i)
    if (allowed_[i]) return i;
  return -1;
}

bool SampleStep::MaskAllowed(int32_t n) {
  // Room for the trie's ids too (the engine checks that the two agree).
  allowed_.assign(std::max(n, tokenizer_.n_vocab()), 0);
  if (lazy_) {
    // The grammar's text is from a trigger on: token by token.
    for (int32_t t = 0; t < n; ++t) {
      allowed_[t] = Allowed(t);
      if (grammar_->overflowed()) return false;
    }
    return true;
  }
  if (trie_ == nullptr) {
    own_trie_ = std::make_unique<TokenTrieCache>(tokenizer_);
    trie_ = own_trie_.get();
  }
  const bool skip_space = rules_.trim_leading_space && !grammar_started_;  // GrammarText()
  if (!grammar_->AllowedTokens(trie_->Get(), allowed_, skip_space)) return false;
  // The tokens whose Allowed() is not their piece's: ends and preserved ones.
  if (end_ids_.empty()) {
    for (int32_t t = 0; t < n; ++t)
      if (Ends(t)) end_ids_.push_back(t);
    end_ids_.push_back(-1);  // found (a vocabulary without ends is not searched again)
  }
  for (const int32_t t : end_ids_)
    if (t >= 0) allowed_[t] = Allowed(t);
  for (const int32_t t : sampler_.params().preserved_tokens)
    if (t >= 0 && t < n) allowed_[t] = Allowed(t);
  return !grammar_->overflowed();
}

void ComputeLogprobs(std::span<const float> logits, int32_t token, int n_top, TokenLogprobs* out) {
  // NaN counts as -inf, as in the sampler.
  auto value = [&](size_t i) { return logits[i] == logits[i] ? logits[i] : -INFINITY; };
  float max = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, value(i));
  double sum = 0;
  if (std::isfinite(max))
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(static_cast<double>(value(i)) - max);
  const double lse = std::isfinite(max) ? max + std::log(sum) : 0;
  auto logprob = [&](size_t i) {
    const double lp = static_cast<double>(value(i)) - lse;
    return static_cast<float>(std::max(lp, static_cast<double>(-FLT_MAX)));  // -inf -> finite (JSON)
  };
  out->logprob = logprob(token);
  out->top.clear();
  if (n_top <= 0) return;
  // A small heap of the best n_top (worst at the front).
  auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  auto& heap = out->top;
  for (size_t i = 0; i < logits.size(); ++i) {
    const std::pair<int32_t, float> c{static_cast<int32_t>(i), value(i)};
    if (static_cast<int>(heap.size()) < n_top) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  for (auto& [id, v] : heap) v = logprob(id);
}

SampleStep::Tail SampleStep::Flush() {
  Tail t;
  t.piece = decoder_.Flush();
  t.text = Release(stops_.Push(t.piece) + stops_.Flush());
  return t;
}

std::string SampleStep::Release(std::string text) {
  if (released_ || !rules_.trim_leading_space) {
    released_ |= !text.empty();
    return text;
  }
  const size_t first = text.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return "";
  released_ = true;
  return text.substr(first);
}

}  // namespace rotor
