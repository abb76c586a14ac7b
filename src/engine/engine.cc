#include "engine/engine.h"

#include <algorithm>

#include "base/timer.h"
#include "engine/stop_matcher.h"

namespace rotor {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kContext: return "context";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.n_threads < 0) return Errorf("engine: -t {} must be positive", options.n_threads);
  if (options.n_ctx < 0) return Errorf("engine: -c {} must not be negative", options.n_ctx);
  if (options.max_ubatch <= 0)
    return Errorf("engine: ubatch size {} must be positive", options.max_ubatch);
  std::unique_ptr<Engine> e(new Engine());
  ASSIGN_OR_RETURN(e->model_, Model::Load(options.model_path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  if (e->tokenizer_->n_vocab() != e->model_->config().n_vocab)
    return Errorf("engine: {}: vocabulary has {} tokens but token_embd.weight has {} rows",
                  options.model_path, e->tokenizer_->n_vocab(), e->model_->config().n_vocab);
  e->n_ctx_ = options.n_ctx > 0 ? options.n_ctx : e->model_->config().n_ctx_train;
  e->pool_ = std::make_unique<ThreadPool>(options.n_threads > 0 ? options.n_threads
                                                                : HardwareThreads());
  e->forward_ = std::make_unique<Forward>(*e->model_, *e->pool_, options.max_ubatch, e->n_ctx_);
  return e;
}

Status Engine::Validate(const GenerateOptions& o) const {
  if (o.n_predict < -1) return Errorf("generate: -n {} must be >= 0, or -1 for no limit", o.n_predict);
  if (o.prefill_step < 0)
    return Errorf("generate: --prefill-step {} must be >= 0", o.prefill_step);
  RETURN_IF_ERROR(ValidateSamplingParams(o.sampling));
  return ResolveKvConfig(o.kv, model_->config().kv_shape(n_ctx_)).status();
}

Result<GenerateResult> Engine::Generate(const GenerateOptions& o, const TextCallback& on_text) {
  RETURN_IF_ERROR(Validate(o));
  const int n_vocab = model_->config().n_vocab;
  GenerateResult r;
  r.prompt_tokens = tokenizer_->Encode(o.prompt, o.add_bos);
  if (r.prompt_tokens.empty()) return Status::Error("generate: the prompt is empty");
  const int64_t n_prompt = static_cast<int64_t>(r.prompt_tokens.size());
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                   KvCache::Create(model_->config().kv_shape(n_ctx_), o.kv));
  if (cache->Remaining() >= 0 && n_prompt > cache->Remaining())
    return Errorf("generate: the prompt has {} tokens, more than the context size {} (raise -c)",
                  n_prompt, n_ctx_);

  // The activation buffers must hold one prefill step (0 = the whole prompt).
  const int64_t step = o.prefill_step == 0 ? n_prompt : o.prefill_step;
  if (step > forward_->max_tokens())
    forward_ = std::make_unique<Forward>(*model_, *pool_, static_cast<int>(step), n_ctx_);
  std::vector<float> logits(n_vocab);  // [n_vocab]
  Timer timer;
  RETURN_IF_ERROR(forward_->Prefill(SeqInput{cache.get(), r.prompt_tokens, LogitsWanted::kLast},
                                    static_cast<int>(step), logits.data()));
  r.prompt_ns = timer.ElapsedNs();

  Sampler sampler(o.sampling, n_vocab);
  for (int32_t t : r.prompt_tokens) sampler.Accept(t);
  StreamDecoder decoder(*tokenizer_);
  StopMatcher stops(o.stop);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return true;
    r.text += text;
    return on_text ? on_text(text) : true;
  };

  timer.Reset();
  for (;;) {
    if (o.n_predict >= 0 && static_cast<int64_t>(r.tokens.size()) >= o.n_predict) {
      r.finish = FinishReason::kLength;
      break;
    }
    const int32_t token = sampler.Sample(logits);
    sampler.Accept(token);
    if (!o.ignore_eos && tokenizer_->IsEndOfGeneration(token)) {
      r.finish = FinishReason::kEos;
      break;
    }
    r.tokens.push_back(token);
    if (!emit(stops.Push(decoder.Push(token)))) {
      r.finish = FinishReason::kCancelled;
      break;
    }
    if (stops.stopped()) {
      r.finish = FinishReason::kStop;
      break;
    }
    if (o.n_predict >= 0 && static_cast<int64_t>(r.tokens.size()) >= o.n_predict) {
      r.finish = FinishReason::kLength;
      break;
    }
    if (cache->Remaining() == 0) {
      r.finish = FinishReason::kContext;
      break;
    }
    const int32_t next[1] = {token};
    const SeqInput decode{cache.get(), next, LogitsWanted::kLast};
    RETURN_IF_ERROR(forward_->Run(std::span<const SeqInput>(&decode, 1), logits.data()));
  }
  r.gen_ns = timer.ElapsedNs();
  if (r.finish != FinishReason::kStop && r.finish != FinishReason::kCancelled)
    emit(stops.Push(decoder.Flush()) + stops.Flush());
  return r;
}

}  // namespace rotor
