// The C API (include/rotor/rotor.h): version, status, models, tokens, KV
// configurations and samplers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "capi_internal.h"
#include "model/model_config.h"

using rotor::capi::Count;
using rotor::capi::Guard;
using rotor::capi::Make;

namespace rotor::capi {

rotor_status* Make(rotor_code code, std::string message) {
  return new (std::nothrow) rotor_status{code, "rotor: " + std::move(message)};
}

rotor_status* FromStatus(const Status& s, rotor_code code) {
  return s.ok() ? nullptr : Make(code, s.message());
}

}  // namespace rotor::capi

extern "C" {

const char* rotor_version(void) {
#define ROTOR_STR2(x) #x
#define ROTOR_STR(x) ROTOR_STR2(x)
  return ROTOR_STR(ROTOR_VERSION_MAJOR) "." ROTOR_STR(ROTOR_VERSION_MINOR) "." ROTOR_STR(
      ROTOR_VERSION_PATCH);
}

int rotor_api_version(void) { return ROTOR_API_VERSION; }

rotor_code rotor_status_code(const rotor_status* s) { return s ? s->code : ROTOR_OK; }
const char* rotor_status_message(const rotor_status* s) { return s ? s->message.c_str() : ""; }
void rotor_status_free(rotor_status* s) { delete s; }

// ---- Model -----------------------------------------------------------------

rotor_model_params rotor_model_default_params(void) {
  return rotor_model_params{
      .n_threads = 0, .n_ctx = 0, .kv_memory_mib = 0, .max_seqs = 1, .prefix_cache = true,
      .vocab_only = false};
}

rotor_status* rotor_model_load(const char* path, const rotor_model_params* params,
                               rotor_model** out) {
  return Guard("rotor_model_load", [&]() -> rotor_status* {
    ROTOR_CAPI_REQUIRE(out != nullptr, "rotor_model_load: out is NULL");
    *out = nullptr;
    ROTOR_CAPI_REQUIRE(path != nullptr, "rotor_model_load: path is NULL");
    const rotor_model_params p = params ? *params : rotor_model_default_params();
    // By the fields' names (the engine's messages name the CLI's flags).
    ROTOR_CAPI_REQUIRE(p.kv_memory_mib >= 0 && p.kv_memory_mib < (int64_t{1} << 43),
                       "rotor_model_load: kv_memory_mib {} out of range [0, 2^43)",
                       p.kv_memory_mib);
    ROTOR_CAPI_REQUIRE(p.n_threads >= 0 && p.n_threads <= 4096,
                       "rotor_model_load: n_threads {} out of range [0, 4096] (0 = all)",
                       p.n_threads);
    ROTOR_CAPI_REQUIRE(p.n_ctx >= 0 && p.n_ctx <= rotor::kMaxContext,
                       "rotor_model_load: n_ctx {} out of range [0, {}] (0 = the model's)",
                       p.n_ctx, rotor::kMaxContext);
    ROTOR_CAPI_REQUIRE(p.max_seqs >= 1 && p.max_seqs <= 4096,
                       "rotor_model_load: max_seqs {} out of range [1, 4096]", p.max_seqs);
    if (p.vocab_only) {
      rotor::Result<std::unique_ptr<rotor::GgufFile>> file = rotor::GgufFile::Open(path);
      if (!file.ok()) return Make(ROTOR_ERR_IO, file.message());
      rotor::Result<std::unique_ptr<rotor::Tokenizer>> tok = rotor::Tokenizer::FromGguf(**file);
      if (!tok.ok()) return Make(ROTOR_ERR_IO, fmt::format("{}: {}", path, tok.message()));
      auto m = std::make_unique<rotor_model>();
      m->vocab_file = std::move(*file);
      m->vocab = std::move(*tok);
      // The trained context where the file says it (a vocabulary-only file
      // may not: 0 then).
      rotor::Result<rotor::ModelConfig> config = rotor::ReadModelConfig(*m->vocab_file);
      m->vocab_n_ctx_train = config.ok() ? config->n_ctx_train : 0;
      m->description =
          fmt::format("vocabulary of {}: {} tokens (no weights)", path, m->vocab->n_vocab());
      *out = m.release();
      return nullptr;
    }
    rotor::EngineOptions eo;
    eo.model_path = path;
    eo.n_threads = p.n_threads;
    eo.n_ctx = p.n_ctx;
    eo.kv_memory_bytes = p.kv_memory_mib << 20;
    eo.max_seqs = p.max_seqs;
    eo.prefix_cache = p.prefix_cache;
    rotor::Result<std::unique_ptr<rotor::Engine>> engine = rotor::Engine::Create(eo);
    if (!engine.ok()) return Make(ROTOR_ERR_IO, engine.message());  // the parameters passed
    auto m = std::make_unique<rotor_model>();
    m->engine = std::move(*engine);
    const rotor::Model& model = m->engine->model();
    const rotor::ModelConfig& c = model.config();
    m->description = fmt::format(
        "{} {} params {}, {} layers, {} heads ({} K/V) of {}, vocabulary {}, trained context {}",
        c.arch, model.n_params(), model.type_name(), c.n_layer, c.n_head, c.n_head_kv, c.head_dim,
        c.n_vocab, c.n_ctx_train);
    *out = m.release();
    return nullptr;
  });
}

void rotor_model_free(rotor_model* model) { delete model; }

// The getters answer a NULL model with 0, -1, false or "" (no status to return).
int32_t rotor_model_n_vocab(const rotor_model* m) { return m ? m->tokenizer().n_vocab() : 0; }
int32_t rotor_model_n_ctx(const rotor_model* m) {
  return m && m->engine ? m->engine->n_ctx() : 0;
}
int32_t rotor_model_n_ctx_train(const rotor_model* m) {
  if (!m) return 0;
  return m->engine ? m->engine->model().config().n_ctx_train : m->vocab_n_ctx_train;
}
int32_t rotor_model_token_bos(const rotor_model* m) { return m ? m->tokenizer().bos() : -1; }
int32_t rotor_model_token_eos(const rotor_model* m) { return m ? m->tokenizer().eos() : -1; }
bool rotor_model_token_is_eog(const rotor_model* m, int32_t token) {
  return m && token >= 0 && token < rotor_model_n_vocab(m) &&
         m->tokenizer().IsEndOfGeneration(token);
}
const char* rotor_model_description(const rotor_model* m) {
  return m ? m->description.c_str() : "";
}

// ---- Tokens ----------------------------------------------------------------

rotor_status* rotor_tokenize(const rotor_model* model, const char* text, size_t len, bool add_bos,
                             bool parse_special, int32_t* tokens, size_t capacity,
                             size_t* n_tokens) {
  return Guard("rotor_tokenize", [&]() -> rotor_status* {
    rotor::capi::ResetOut<size_t>(n_tokens, 0);
    ROTOR_CAPI_NOT_NULL("rotor_tokenize", model);
    ROTOR_CAPI_NOT_NULL("rotor_tokenize", n_tokens);
    ROTOR_CAPI_REQUIRE(text || len == 0, "rotor_tokenize: text is NULL");
    ROTOR_CAPI_REQUIRE(tokens || capacity == 0, "rotor_tokenize: tokens is NULL, capacity {}",
                       capacity);
    const std::vector<int32_t> ids = model->tokenizer().Encode(
        std::string_view(text ? text : "", len), add_bos, parse_special);
    *n_tokens = ids.size();
    if (ids.size() > capacity)
      return Make(ROTOR_ERR_BUFFER_TOO_SMALL,
                  fmt::format("rotor_tokenize: {}, room for {}", Count(ids.size(), "token"),
                              capacity));
    std::copy(ids.begin(), ids.end(), tokens);
    return nullptr;
  });
}

rotor_status* rotor_detokenize(const rotor_model* model, const int32_t* tokens, size_t n,
                               bool special, char* text, size_t capacity, size_t* n_bytes) {
  return Guard("rotor_detokenize", [&]() -> rotor_status* {
    rotor::capi::ResetOut<size_t>(n_bytes, 0);
    ROTOR_CAPI_NOT_NULL("rotor_detokenize", model);
    ROTOR_CAPI_NOT_NULL("rotor_detokenize", n_bytes);
    ROTOR_CAPI_REQUIRE(tokens || n == 0, "rotor_detokenize: tokens is NULL");
    ROTOR_CAPI_REQUIRE(text || capacity == 0, "rotor_detokenize: text is NULL, capacity {}",
                       capacity);
    const rotor::Tokenizer& tok = model->tokenizer();
    for (size_t i = 0; i < n; ++i)
      ROTOR_CAPI_REQUIRE(tokens[i] >= 0 && tokens[i] < tok.n_vocab(),
                         "rotor_detokenize: token {} (at {}) out of range [0, {})", tokens[i], i,
                         tok.n_vocab());
    const std::string s = tok.Decode(std::span<const int32_t>(tokens, n), special);
    *n_bytes = s.size();
    if (s.size() > capacity)
      return Make(ROTOR_ERR_BUFFER_TOO_SMALL,
                  fmt::format("rotor_detokenize: {}, room for {}", Count(s.size(), "byte"),
                              capacity));
    std::memcpy(text, s.data(), s.size());
    if (s.size() < capacity) text[s.size()] = '\0';
    return nullptr;
  });
}

rotor_status* rotor_token_piece(const rotor_model* model, int32_t token, bool special, char* text,
                                size_t capacity, size_t* n_bytes) {
  return Guard("rotor_token_piece", [&]() -> rotor_status* {
    rotor::capi::ResetOut<size_t>(n_bytes, 0);
    ROTOR_CAPI_NOT_NULL("rotor_token_piece", model);
    ROTOR_CAPI_NOT_NULL("rotor_token_piece", n_bytes);
    ROTOR_CAPI_REQUIRE(text || capacity == 0, "rotor_token_piece: text is NULL, capacity {}",
                       capacity);
    const rotor::Tokenizer& tok = model->tokenizer();
    ROTOR_CAPI_REQUIRE(token >= 0 && token < tok.n_vocab(),
                       "rotor_token_piece: token {} out of range [0, {})", token, tok.n_vocab());
    const std::string_view piece = tok.PieceView(token, special);
    *n_bytes = piece.size();
    if (piece.size() > capacity)
      return Make(ROTOR_ERR_BUFFER_TOO_SMALL,
                  fmt::format("rotor_token_piece: {}, room for {}",
                              Count(piece.size(), "byte"), capacity));
    if (!piece.empty()) std::memcpy(text, piece.data(), piece.size());  // text may be NULL
    if (piece.size() < capacity) text[piece.size()] = '\0';
    return nullptr;
  });
}

// ---- KV configuration ------------------------------------------------------

rotor_status* rotor_kv_config_new(rotor_kv_config** out) {
  return Guard("rotor_kv_config_new", [&]() -> rotor_status* {
    ROTOR_CAPI_REQUIRE(out != nullptr, "rotor_kv_config_new: out is NULL");
    *out = new rotor_kv_config();
    return nullptr;
  });
}

void rotor_kv_config_free(rotor_kv_config* config) { delete config; }

}  // extern "C"

rotor::KvConfig rotor_kv_config::Build() const {
  rotor::KvConfig c;
  // Each value passed its check when it was set.
  if (!policy.empty()) CHECK(c.Set(rotor::KvOpt::kPolicy, policy, rotor::KvSpelling::kField).ok());
  // In the table's order, whatever the order of the calls: kv_type before
  // kv_type_k and kv_type_v, so the more specific one wins (applied as set,
  // kv_type after kv_type_k undid it).
  std::vector<std::pair<rotor::KvOpt, std::string>> sorted = options;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [opt, value] : sorted) CHECK(c.Set(opt, value, rotor::KvSpelling::kField).ok());
  return c;
}

extern "C" {

rotor_status* rotor_kv_config_set(rotor_kv_config* config, const char* option, const char* value) {
  return Guard("rotor_kv_config_set", [&]() -> rotor_status* {
    ROTOR_CAPI_NOT_NULL("rotor_kv_config_set", config);
    ROTOR_CAPI_NOT_NULL("rotor_kv_config_set", option);
    ROTOR_CAPI_NOT_NULL("rotor_kv_config_set", value);
    const std::string_view name(option);
    for (const rotor::KvOptionSpec& spec : rotor::KvOptions()) {
      if (name != spec.field && name != spec.flag && (spec.alias.empty() || name != spec.alias))
        continue;
      // The value alone is checked here (the message spells the option as
      // given); how it fits the others and the model, when a sequence is made.
      const rotor::KvSpelling spelling =
          name == spec.field ? rotor::KvSpelling::kField : rotor::KvSpelling::kFlag;
      rotor::KvConfig scratch;
      if (rotor::Status st = scratch.Set(spec.id, value, spelling); !st.ok())
        return rotor::capi::FromStatus(st);
      if (spec.id == rotor::KvOpt::kPolicy) {
        config->policy = value;
      } else {
        std::erase_if(config->options, [&](const auto& o) { return o.first == spec.id; });
        config->options.emplace_back(spec.id, value);
      }
      return nullptr;
    }
    std::string known;
    for (const rotor::KvOptionSpec& spec : rotor::KvOptions())
      known += fmt::format("{}{}", known.empty() ? "" : ", ", spec.field);
    return Make(ROTOR_ERR_INVALID_ARGUMENT,
                fmt::format("rotor_kv_config_set: unknown KV option '{}' (known: {})", name, known));
  });
}

rotor_status* rotor_kv_config_describe(const rotor_kv_config* config, const rotor_model* model,
                                       char* text, size_t capacity, size_t* n_bytes) {
  return Guard("rotor_kv_config_describe", [&]() -> rotor_status* {
    rotor::capi::ResetOut<size_t>(n_bytes, 0);
    ROTOR_CAPI_NOT_NULL("rotor_kv_config_describe", config);
    ROTOR_CAPI_NOT_NULL("rotor_kv_config_describe", model);
    ROTOR_CAPI_REQUIRE(text || capacity == 0,
                       "rotor_kv_config_describe: text is NULL, capacity {}", capacity);
    ROTOR_CAPI_REQUIRE_WEIGHTS(model, "rotor_kv_config_describe");
    const rotor::KvShape shape = model->engine->model().kv_shape(model->engine->n_ctx());
    rotor::Result<rotor::KvConfig> r =
        rotor::ResolveKvConfig(config->Build(), shape, rotor::KvSpelling::kField);
    if (!r.ok()) return rotor::capi::FromStatus(r.status());
    const std::string s = rotor::DescribeKvConfig(*r);
    if (n_bytes) *n_bytes = s.size() + 1;
    if (s.size() + 1 > capacity)
      return Make(ROTOR_ERR_BUFFER_TOO_SMALL,
                  fmt::format("rotor_kv_config_describe: {} and a NUL, room for {}",
                              Count(s.size(), "byte"), capacity));
    std::memcpy(text, s.c_str(), s.size() + 1);
    return nullptr;
  });
}

// ---- Sampling --------------------------------------------------------------

rotor_sampling_params rotor_sampling_default_params(void) {
  const rotor::SamplingParams d;
  rotor_sampling_params p;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.seed = d.seed;
  p.presence_penalty = d.presence_penalty;
  p.frequency_penalty = d.frequency_penalty;
  return p;
}

rotor_sampling_params rotor_sampling_greedy_params(void) {
  rotor_sampling_params p = rotor_sampling_default_params();
  p.temperature = 0;
  return p;
}

rotor_status* rotor_sampler_new(const rotor_sampling_params* params, int32_t n_vocab,
                                rotor_sampler** out) {
  return Guard("rotor_sampler_new", [&]() -> rotor_status* {
    rotor::capi::ResetOut<rotor_sampler*>(out, nullptr);
    ROTOR_CAPI_NOT_NULL("rotor_sampler_new", out);
    ROTOR_CAPI_NOT_NULL("rotor_sampler_new", params);
    ROTOR_CAPI_REQUIRE(n_vocab > 0, "rotor_sampler_new: n_vocab {} must be positive", n_vocab);
    const rotor::SamplingParams p = rotor::capi::ToSampling(*params);
    if (rotor::Status s = rotor::ValidateSamplingParams(p); !s.ok())
      return rotor::capi::FromStatus(s);
    *out = new rotor_sampler{rotor::Sampler(p, n_vocab)};
    return nullptr;
  });
}

void rotor_sampler_free(rotor_sampler* sampler) { delete sampler; }

int32_t rotor_sampler_sample(rotor_sampler* s, const float* logits) {
  if (s == nullptr || logits == nullptr) return -1;
  const std::span<const float> l(logits, s->sampler.n_vocab());
  // NaN or +inf logits (weights holding them): any draw would be garbage, and
  // greedy took token 0 in silence. Every logit -inf: every token is banned.
  if (!rotor::LogitsAreNumbers(l)) return -1;
  if (std::none_of(l.begin(), l.end(), [](float x) { return x > -INFINITY; })) return -1;
  return s->sampler.Sample(l);
}

void rotor_sampler_accept(rotor_sampler* s, int32_t token) {
  // No status to return: an id outside the vocabulary is ignored (it aborted).
  if (s != nullptr && token >= 0 && token < s->sampler.n_vocab()) s->sampler.Accept(token);
}

uint64_t rotor_sampler_seed(const rotor_sampler* s) { return s ? s->sampler.seed() : 0; }

}  // extern "C"
