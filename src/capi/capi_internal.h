// What the C API's handles hold, shared by its translation units.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "kv/kv_config.h"
#include "rotor/rotor.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

struct rotor_status {
  rotor_code code;
  std::string message;
};

struct rotor_model {
  std::unique_ptr<rotor::Engine> engine;  // null when loaded vocab_only
  // vocab_only: the file and its vocabulary, without weights.
  std::unique_ptr<rotor::GgufFile> vocab_file;
  std::unique_ptr<rotor::Tokenizer> vocab;
  int32_t vocab_n_ctx_train = 0;  // vocab_only: the file's trained context, 0 = not given
  const rotor::Tokenizer& tokenizer() const { return engine ? engine->tokenizer() : *vocab; }
  std::string description;
  // Serializes every call that computes or touches sequences: the engine's
  // thread pool and K/V block pool serve one caller at a time.
  std::mutex mu;
};

// The options as set. The policy applies first when the configuration is
// built (choosing one starts from its defaults), then the other options as
// given, a later value of one replacing an earlier: the order of the calls
// does not matter.
struct rotor_kv_config {
  std::string policy;  // empty: full
  std::vector<std::pair<rotor::KvOpt, std::string>> options;
  rotor::KvConfig Build() const;
};

struct rotor_sampler {
  rotor::Sampler sampler;
};

namespace rotor::capi {

// One sequence of a context: its cache, the ids of its text, and the logits
// after its last token.
struct Seq {
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> tokens;  // [n_seen] the text's ids (from 0)
  std::vector<float> logits;    // [n_vocab], or empty: none since the last change
};

}  // namespace rotor::capi

struct rotor_context {
  rotor_model* model = nullptr;
  int max_seqs = 1;
  int prefill_step = rotor::kDefaultPrefillStep;
  std::unique_ptr<rotor::Runner> runner;
  std::vector<std::unique_ptr<rotor::capi::Seq>> seqs;  // [id], null = freed
};

namespace rotor::capi {

// nullptr for an ok Status, else a new rotor_status with `code`.
rotor_status* Make(rotor_code code, std::string message);
rotor_status* FromStatus(const Status& s, rotor_code code = ROTOR_ERR_INVALID_ARGUMENT);

// The C sampling parameters as the engine's, field by field.
inline SamplingParams ToSampling(const rotor_sampling_params& c) {
  SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  p.repeat_penalty = c.repeat_penalty;
  p.repeat_last_n = c.repeat_last_n;
  p.presence_penalty = c.presence_penalty;
  p.frequency_penalty = c.frequency_penalty;
  p.seed = c.seed;
  return p;
}

// "1 token", "5 tokens": a count and its noun for messages.
inline std::string Count(size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// "rotor_eval: ctx is NULL"-style argument checks.
#define ROTOR_CAPI_REQUIRE(cond, ...)                                                         \
  do {                                                                                         \
    if (!(cond)) return ::rotor::capi::Make(ROTOR_ERR_INVALID_ARGUMENT, fmt::format(__VA_ARGS__)); \
  } while (0)

// Out-parameters get a value on every failure too: handles NULL, ids -1,
// counts 0 (or the size needed, for a buffer too small). Set first thing.
template <typename T>
void ResetOut(T* out, T value) {
  if (out != nullptr) *out = value;
}

// "rotor_tokenize: n_tokens is NULL": one check per pointer, so the message
// says which.
#define ROTOR_CAPI_NOT_NULL(call, ptr) ROTOR_CAPI_REQUIRE((ptr) != nullptr, "{}: {} is NULL", call, #ptr)

// For the calls that need weights: a vocab_only model has none.
#define ROTOR_CAPI_REQUIRE_WEIGHTS(model, call)                                        \
  ROTOR_CAPI_REQUIRE((model)->engine != nullptr,                                       \
                     "{}: the model was loaded vocab_only (no weights)", call)

// Runs fn, turning an exception (bad_alloc above all) into a status: no
// exception crosses the C boundary.
template <typename F>
rotor_status* Guard(const char* call, F&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Make(ROTOR_ERR_OUT_OF_MEMORY, std::string(call) + ": out of memory");
  } catch (const std::exception& e) {
    return Make(ROTOR_ERR_INTERNAL, std::string(call) + ": " + e.what());
  } catch (...) {
    return Make(ROTOR_ERR_INTERNAL, std::string(call) + ": unknown exception");
  }
}

}  // namespace rotor::capi
