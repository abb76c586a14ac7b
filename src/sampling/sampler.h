// Token sampling: the llama.cpp-style sampler chain over one sequence's logits.
//
// The chain, in order (each stage is skipped when its parameter is "off"):
//   0. logit bias          logit_bias: added to the token's logit (OpenAI's logit_bias);
//                          a bias of -100 bans the token (-inf), one of +100 forces
//                          it (every token without +100 becomes -inf). Only with a
//                          bias does Sample() copy the logits (n_vocab floats).
//   1. penalties           tokens among the last repeat_last_n Accept()ed ones, each
//                          once, with c = its count in that window (llama.cpp's order):
//                          logit > 0 ? logit / repeat_penalty : logit * repeat_penalty,
//                          then - c * frequency_penalty - presence_penalty
//   2. top-k               keep the k highest logits (ties -> lower id first)
//   3. temperature         softmax(logit / temperature) over the survivors
//   4. top-p               keep the smallest prefix (by descending probability)
//                          whose probability mass reaches top_p
//   5. min-p               keep tokens with probability >= min_p * max probability
//   6. draw                one uniform number from the sampler's own RNG, walked
//                          over the kept tokens' renormalised probabilities
// temperature == 0 is greedy: the argmax of the penalised logits (ties -> lowest id);
// stages 2-6 are skipped and no random number is consumed. (So is a temperature
// below ~3e-39, whose reciprocal overflows.)
//
// Note that temperature comes before top-p/min-p, so they see the tempered
// distribution; llama.cpp's default chain applies temperature after them. With
// temperature 1 (or top-p and min-p off) the two orders agree.
//
// Determinism: a Sampler's output depends only on its seed, the logits passed to
// Sample() and the tokens passed to Accept(): every non-greedy Sample() consumes
// exactly one 64-bit number from a std::mt19937_64 seeded with seed(). Sequences
// sampled side by side in a batch therefore get the tokens each would get alone.
// The arithmetic uses no libm exp (a polynomial, relative error < 3e-7), fixed
// summation orders and no library-defined orderings, so builds agree as well.
//
// Cost: Sample() allocates nothing. With top-k on: one pass over the logits
// (a size-k heap behind a vectorised threshold test) plus O(k log k). With top-k
// off: a few vectorised O(n_vocab) passes; top-p then selects (expected O(n))
// among only the tokens within 2^-8 (or 2^-16) of the max when their mass
// suffices, never sorting the vocabulary. Memory: 12 bytes per vocabulary entry
// with top-k off (8 * k with it on), plus 4 per entry when the repetition
// penalty is on.
//
// Logits that are NaN count as -inf; +inf counts as the largest finite float.
// A Sampler is not thread-safe; use one per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace rotor {

// SamplingParams::seed value meaning "draw a random seed" (as llama.cpp's LLAMA_DEFAULT_SEED).
inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF;
// What a seed may be, wherever one is read (-s, a request's or a --prompts
// line's "seed"): error messages say "must be <kSeedRule>".
inline constexpr const char* kSeedRule = "an integer in [0, 2^64 - 1], or -1 for a random seed";

struct SamplingParams {
  float temperature = 0.8f;     // 0 = greedy (argmax; ties -> lowest id)
  int top_k = 40;               // 0 = off (as is any k >= n_vocab)
  float top_p = 0.95f;          // 1 = off
  float min_p = 0.05f;          // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off
  int repeat_last_n = 64;       // 0 = off, -1 = every token Accept()ed since construction/Reset()
  float presence_penalty = 0.0f;   // 0 = off; subtracted once from a token in the window
  float frequency_penalty = 0.0f;  // 0 = off; subtracted per occurrence in the window
  uint64_t seed = kRandomSeed;  // kRandomSeed = random; anything else reproducible
  // Output constrained to this grammar (null = unconstrained). Enforced by
  // the generation step, which knows the tokens' texts (engine/sample_step.h);
  // the Sampler itself only ever sees the logits it is given.
  std::shared_ptr<const grammar::Grammar> grammar = nullptr;
  // A lazy grammar (llama.cpp's grammar_lazy; the server's tool_choice
  // "auto"): sampling is free until the generated text holds one of these
  // triggers, and the grammar applies from the trigger's first character on.
  // Empty = the grammar applies from the first token.
  std::vector<std::string> grammar_triggers = {};
  // The triggers count only at the start of the text (after whitespace).
  bool grammar_triggers_at_start = false;
  // Control tokens kept as their text (llama.cpp's preserved_tokens: Mistral
  // v0.3's [TOOL_CALLS]): the grammar, the triggers and the generated text
  // see "[TOOL_CALLS]" where other control tokens have no text.
  std::vector<int32_t> preserved_tokens = {};
  // (token id, bias in [-100, 100]) pairs, stage 0 above; ids must be in the
  // vocabulary (the Sampler CHECKs; Engine::Validate says which is not).
  std::vector<std::pair<int32_t, float>> logit_bias = {};
};

// The bias at or beyond which a token is banned / forced.
inline constexpr float kLogitBiasLimit = 100.0f;

// Checks ranges; errors read like "sampling: top_p 1.5 out of range [0, 1]".
Status ValidateSamplingParams(const SamplingParams& p);

// No logit is NaN or +inf (-inf is a banned token): weights holding NaN gave
// greedy text of token 0, reported as success. One vectorised pass.
bool LogitsAreNumbers(std::span<const float> logits);
// Checks that every logit_bias id is in [0, n_vocab).
Status ValidateLogitBias(const SamplingParams& p, int32_t n_vocab);

class Sampler {
 public:
  // `p` must pass ValidateSamplingParams() (CHECKed) and n_vocab must be > 0.
  Sampler(const SamplingParams& p, int32_t n_vocab);

  // Runs the chain above over `logits` ([n_vocab]) and returns the drawn token.
  // Does not Accept() it: call Accept() with the token actually appended.
  int32_t Sample(std::span<const float> logits);

  // Records a token in the repetition history (prompt tokens too, if they should
  // be penalised). A no-op when the repetition penalty is off.
  void Accept(int32_t token);

  // Forgets the history and restarts the RNG from seed(): the Sampler behaves as
  // freshly constructed with seed = seed().
  void Reset();

  // The seed actually in use (the drawn one when params.seed was kRandomSeed).
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  // `value` is a logit until the softmax, then an unnormalised probability.
  struct Candidate {
    float value;
    int32_t id;
  };

  bool penalty_on() const { return !counts_.empty(); }
  // `count`: the token's occurrences in the window (>= 1).
  float Penalize(float logit, int32_t count) const;
  // Calls fn(token, count) once for each distinct token in the repetition window.
  template <typename F>
  void ForEachPenalized(F&& fn);

  // The chain with top-k on (cand_ holds the survivors) and off (probs_ holds
  // the whole vocabulary, cand_ what min-p and top-p may keep).
  int32_t SampleTopK(std::span<const float> logits, uint64_t random);
  int32_t SampleAll(std::span<const float> logits, uint64_t random);
  // Fills cand_[0, return) with the best `k` penalised candidates, best first.
  int32_t SelectTopK(std::span<const float> logits, int32_t k);
  // Fills probs_ with every token's unnormalised probability (the max maps to
  // 1) and sets *mass to their sum; false if no logit is finite.
  bool ProbabilitiesDense(std::span<const float> logits, double* mass);
  // Copies the tokens with probs_ >= keep_from to cand_; returns their count.
  int32_t Compact(float keep_from);
  // Top-p over cand_[0, n) (sorted best first, or not): returns how many leading
  // entries are kept and sets *kept_mass to their mass.
  int32_t TopPSorted(int32_t n, double mass, double* kept_mass);
  int32_t TopPUnsorted(int32_t n, double mass, double* kept_mass);
  double Mass(int32_t n) const;
  // Draws from cand_[0, n) (unnormalised probabilities summing to `total`).
  int32_t Draw(uint64_t random, int32_t n, double total) const;
  // Draws from probs_ (summing to `total`) in id order.
  int32_t DrawDense(uint64_t random, double total) const;
  int32_t Fallback(std::span<const float> logits) const;
  // Stage 0: the logits with logit_bias applied (in biased_).
  std::span<const float> Bias(std::span<const float> logits);

  SamplingParams params_;
  int32_t n_vocab_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  bool greedy_;  // temperature 0 (or below ~3e-39, where 1 / T overflows)
  float inv_temperature_;

  std::vector<Candidate> cand_;  // [n_vocab], or [top_k] when top-k is on
  std::vector<float> probs_;     // [n_vocab] when top-k is off, by token id
  // Repetition history (only when a penalty is on). counts_[t]: occurrences of
  // t in the window ([n_vocab]). With a window, ring_ holds its last
  // repeat_last_n tokens (growing to that size); with repeat_last_n == -1, distinct_ lists every
  // token seen.
  std::vector<int32_t> counts_;
  std::vector<int32_t> ring_;
  int32_t ring_pos_ = 0;  // oldest entry once ring_ is full
  std::vector<int32_t> distinct_;
  std::vector<float> biased_;  // [n_vocab] only with a logit_bias
  bool forced_ = false;        // some bias is +100
};

}  // namespace rotor
