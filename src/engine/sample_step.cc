#include "engine/sample_step.h"

#include <algorithm>

#include "engine/runner.h"

namespace rotor {

SampleStep::SampleStep(const Tokenizer& tokenizer, Sampler& sampler, StopRules rules)
    : tokenizer_(tokenizer),
      sampler_(sampler),
      rules_(std::move(rules)),
      decoder_(tokenizer),
      stops_(rules_.stop) {}

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
  s.token = sampler_.Sample(logits);
  if (!rules_.ignore_eos && Ends(s.token)) {
    s.finish = FinishReason::kEos;
    return s;
  }
  s.generated = true;
  ++n_generated_;
  s.piece = decoder_.Push(s.token);
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
  if (rules_.n_predict >= 0 && n_generated_ >= rules_.n_predict) s.finish = FinishReason::kLength;
  return s;
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
