// The C API (include/rotor/rotor.h): generation with a streaming callback,
// through the engine's scheduler (as `rotor generate`).
#include <fmt/format.h>

#include "capi_internal.h"
#include "grammar/grammar.h"

using rotor::capi::Guard;
using rotor::capi::Make;

extern "C" {

rotor_generate_params rotor_generate_default_params(void) {
  rotor_generate_params p{};
  p.prompt = "";
  p.n_predict = 256;
  p.add_bos = true;
  p.sampling = rotor_sampling_default_params();
  p.prefill_step = 0;
  return p;
}

rotor_status* rotor_generate(rotor_model* model, const rotor_generate_params* params,
                             rotor_text_callback on_text, void* user,
                             rotor_generate_result* result) {
  return Guard("rotor_generate", [&]() -> rotor_status* {
    if (result) *result = rotor_generate_result{};  // zero on a failure too
    ROTOR_CAPI_NOT_NULL("rotor_generate", model);
    ROTOR_CAPI_NOT_NULL("rotor_generate", params);
    ROTOR_CAPI_REQUIRE_WEIGHTS(model, "rotor_generate");
    ROTOR_CAPI_REQUIRE(params->prompt != nullptr, "rotor_generate: prompt is NULL");
    ROTOR_CAPI_REQUIRE(params->stop || params->n_stop == 0, "rotor_generate: stop is NULL");
    ROTOR_CAPI_REQUIRE(params->prefill_step >= 0 && params->prefill_step <= rotor::kMaxPrefillStep,
                       "rotor_generate: prefill_step {} out of range [0, {}]",
                       params->prefill_step, rotor::kMaxPrefillStep);
    rotor::GenerateOptions o;
    o.prompt = params->prompt;
    o.add_bos = params->add_bos;
    o.parse_special = params->parse_special;
    o.n_predict = params->n_predict;
    o.ignore_eos = params->ignore_eos;
    o.sampling = rotor::capi::ToSampling(params->sampling);
    for (size_t i = 0; i < params->n_stop; ++i) {
      ROTOR_CAPI_REQUIRE(params->stop[i] != nullptr, "rotor_generate: stop[{}] is NULL", i);
      o.stop.emplace_back(params->stop[i]);
    }
    if (params->kv) o.kv = params->kv->Build();
    ROTOR_CAPI_REQUIRE(!(params->grammar && params->json_schema),
                       "rotor_generate: give grammar or json_schema, not both");
    if (params->grammar || params->json_schema) {
      rotor::Result<std::string> gbnf =
          params->grammar ? rotor::Result<std::string>(std::string(params->grammar))
                          : rotor::grammar::JsonSchemaToGrammar(params->json_schema);
      if (!gbnf.ok()) return rotor::capi::FromStatus(gbnf.status());
      auto g = rotor::grammar::ParseGrammar(*gbnf);
      if (!g.ok()) return rotor::capi::FromStatus(g.status());
      o.sampling.grammar = std::move(*g);
    }
    o.collect_output = false;  // streamed: memory stays flat however long it runs
    // A prompt longer than the cache is the context's error; the rest the caller's.
    rotor::Engine& engine = *model->engine;
    rotor::Result<rotor::KvConfig> kv = engine.Validate(o, rotor::KvSpelling::kField);
    if (!kv.ok()) return rotor::capi::FromStatus(kv.status());
    const size_t n_prompt =
        engine.tokenizer().Encode(o.prompt, o.add_bos, o.parse_special).size();
    if (rotor::Status fit = rotor::FitsNewCache(
            *kv, engine.model().kv_shape(engine.n_ctx()), static_cast<int64_t>(n_prompt));
        !fit.ok())
      return rotor::capi::FromStatus(fit, ROTOR_ERR_CONTEXT_FULL);
    std::lock_guard<std::mutex> lock(model->mu);
    bool cancelled = false;
    rotor::Result<rotor::GenerateResult> r = model->engine->Generate(
        o,
        [&](std::string_view text) {
          if (!on_text) return true;
          const bool go_on = on_text(text.data(), text.size(), user);
          cancelled |= !go_on;
          return go_on;
        },
        params->prefill_step > 0 ? params->prefill_step : rotor::kDefaultPrefillStep);
    if (!r.ok()) return rotor::capi::FromStatus(r.status());
    if (result) {
      result->n_prompt = static_cast<int64_t>(r->prompt_tokens.size());
      result->n_cached = r->cached_tokens;
      result->n_generated = r->n_generated;
      switch (r->finish) {
        case rotor::FinishReason::kEos: result->finish = ROTOR_FINISH_EOS; break;
        case rotor::FinishReason::kStop: result->finish = ROTOR_FINISH_STOP; break;
        case rotor::FinishReason::kContext: result->finish = ROTOR_FINISH_CONTEXT; break;
        case rotor::FinishReason::kCancelled: result->finish = ROTOR_FINISH_CANCELLED; break;
        default: result->finish = ROTOR_FINISH_LENGTH; break;
      }
      if (cancelled) result->finish = ROTOR_FINISH_CANCELLED;
      result->prompt_tokens_per_s = r->prompt_tps();
      result->gen_tokens_per_s = r->gen_tps();
    }
    return nullptr;
  });
}

}  // extern "C"
