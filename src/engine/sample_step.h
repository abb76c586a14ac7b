// The sample/stop step: what every generating caller (a Scheduler sequence, a
// ChatSession reply) does with the logits after its sequence's last token.
// One order for everyone:
//   1. the budget is spent (n_predict tokens generated)  -> kLength, nothing sampled
//   2. sample a token; with a grammar (SamplingParams::grammar) only one
//      whose text the grammar accepts, or an end-of-generation token when
//      the grammar may end here. The draw is checked first and the
//      vocabulary masked only when it is refused, so most steps test one
//      token; none allowed (the vocabulary cannot continue) -> kStop,
//      nothing sampled. A lazy grammar (SamplingParams::grammar_triggers)
//      allows every token until one completes a trigger; that token must
//      leave text from the trigger's first character that the grammar
//      accepts, and from then on the grammar applies as above. With
//      grammar_triggers_at_start, once the text (after whitespace) cannot
//      begin with a trigger the grammar is dropped for good.
//   3. an end-of-generation token, or one of end_tokens
//      (chat: the template's end of turn), unless
//      ignore_eos                                         -> kEos; the token is dropped
//   4. the token is generated: counted, decoded (whole UTF-8 characters; a
//      preserved control token as its text, SamplingParams::preserved_tokens)
//      and its text scanned for stop strings
//   5. a stop string is complete                          -> kStop; text up to it released,
//                                                            the token does not continue the text
//   6. the cache has no room to run the token             -> kContext; the token is output,
//                                                            it does not continue the text
//   7. the token continues the text: the sampler accepts it (repetition
//      history); the grammar is complete (nothing can follow) -> kEos
//      (the token is kept); else the budget is now spent  -> kLength
// A token that continues the text and did not finish the step is run by the
// caller before the next step. At kLength the last token continues the text
// too: a caller that keeps the text (chat) runs it, one that ends (the
// scheduler) need not. kContext comes before kLength so that a kLength token
// always has room to run.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/stop_matcher.h"
#include "engine/token_trie_cache.h"
#include "grammar/matcher.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace rotor {

struct StopRules {
  int n_predict = -1;                    // tokens to generate; -1 = no limit
  bool ignore_eos = false;               // run past end-of-generation tokens and end_tokens
  std::vector<std::string> stop = {};    // stop strings
  std::vector<int32_t> end_tokens = {};  // ends like an end-of-generation token
  // A chat reply: the released text starts at its first non-whitespace
  // character (an SPM vocabulary's word-leading space, a model's opening
  // newline), in rotor chat and the server's chat completions alike.
  bool trim_leading_space = false;
  // Report the log-probabilities of each generated token and of this many
  // most likely alternatives (Sampled::logprobs); -1 = off, no cost.
  int logprobs = -1;
};

// A generated token's log-probability and the most likely tokens', from the
// log-softmax of the model's raw logits: before logit bias, penalties,
// temperature, truncation and grammar (llama-server's
// post_sampling_probs: false), so they describe the model, not the draw.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first (ties -> lower id)
};
// Fills `out` for `token` over `logits` with the `n_top` best alternatives.
void ComputeLogprobs(std::span<const float> logits, int32_t token, int n_top, TokenLogprobs* out);

// What one step did.
struct Sampled {
  int32_t token = -1;      // -1: nothing was sampled (1)
  bool generated = false;  // counted and decoded (4-7)
  bool continues = false;  // continues the text (7): accepted, to be run
  std::string piece;       // the token's decoded text
  std::string text;        // text released by this step (stop-string prefixes held back)
  std::optional<FinishReason> finish;
  std::string error;  // finish kError: why (a grammar too ambiguous to follow)
  std::optional<TokenLogprobs> logprobs;  // generated, with StopRules::logprobs >= 0
};

class SampleStep {
 public:
  // The sampler is the caller's: its history (the prompt, earlier replies)
  // outlives one generation.
  // `trie`: the tokenizer's (Engine::token_trie()), for grammar masks; null
  // = one of its own, built when first needed.
  SampleStep(const Tokenizer& tokenizer, Sampler& sampler, StopRules rules,
             const TokenTrieCache* trie = nullptr);

  Sampled Next(std::span<const float> logits, const KvCache& cache);
  // At the end: the text still held back (an unfinished character, a
  // possible stop-string prefix). `piece` is the decoder's part of it.
  struct Tail {
    std::string piece, text;
  };
  Tail Flush();
  int64_t n_generated() const { return n_generated_; }

 private:
  bool Ends(int32_t token) const;
  // Step 2 with a grammar: -1 when no token is allowed, or when a token's
  // text was too ambiguous to decide (the grammar's overflowed() tells).
  int32_t SampleConstrained(std::span<const float> logits);
  bool Allowed(int32_t token) const;
  // Allowed() of every token into allowed_; false when a text was too
  // ambiguous to decide. Walks the vocabulary's trie (a lazy grammar before
  // its trigger goes token by token).
  bool MaskAllowed(int32_t n);  // n: the logits' count
  // A lazy grammar before its trigger: whether `token` completes a trigger
  // (then `*from_trigger` is the text from the trigger's first character on).
  bool CompletesTrigger(int32_t token, std::string* from_trigger) const;
  // Records a generated token of the free text before the trigger.
  void AdvanceLazy(int32_t token);
  // A token's text: its piece, or a preserved control token's own text.
  std::string_view Text(int32_t token) const;
  bool Preserved(int32_t token) const;
  // The part of a token's text the grammar sees: chat replies skip leading
  // whitespace until the grammar has seen something (as the released text).
  std::string_view GrammarText(int32_t token) const;
  // The grammar accepts only whitespace as its first byte (and some).
  static bool MustBeginWithSpace(const grammar::Matcher& g);
  std::string Release(std::string text);

  const Tokenizer& tokenizer_;
  Sampler& sampler_;
  StopRules rules_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  int64_t n_generated_ = 0;
  bool released_ = false;  // text has been released (trim_leading_space is done)
  std::optional<grammar::Matcher> grammar_;  // only with a grammar: no cost otherwise
  bool grammar_started_ = false;             // the grammar has seen a character
  bool lazy_ = false;    // a lazy grammar whose trigger has not appeared yet
  std::string before_;   // lazy: the free text's tail (shorter than the longest trigger),
                         // or with triggers at the start all of it
  std::vector<float> masked_;                // [n_vocab] once a draw was refused
  std::vector<uint8_t> allowed_;             // [n_vocab] 1 = allowed, with masked_
  std::vector<int32_t> end_ids_;             // the tokens Ends(), then -1; found at the first mask
  const TokenTrieCache* trie_;
  std::unique_ptr<TokenTrieCache> own_trie_;  // when none was given
};

}  // namespace rotor
