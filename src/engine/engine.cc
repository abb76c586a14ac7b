#include "engine/engine.h"

#include <algorithm>

#include "base/timer.h"
#include "engine/scheduler.h"

namespace rotor {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kContext: return "context";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.n_threads < 0) return Errorf("engine: -t {} must be positive", options.n_threads);
  if (options.n_ctx < 0) return Errorf("engine: -c {} must not be negative", options.n_ctx);
  std::unique_ptr<Engine> e(new Engine());
  ASSIGN_OR_RETURN(e->model_, Model::Load(options.model_path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  if (e->tokenizer_->n_vocab() != e->model_->config().n_vocab)
    return Errorf("engine: {}: vocabulary has {} tokens but token_embd.weight has {} rows",
                  options.model_path, e->tokenizer_->n_vocab(), e->model_->config().n_vocab);
  e->n_ctx_ = options.n_ctx > 0 ? options.n_ctx : e->model_->config().n_ctx_train;
  e->pool_ = std::make_unique<ThreadPool>(options.n_threads > 0 ? options.n_threads
                                                                : HardwareThreads());
  return e;
}

Result<KvConfig> Engine::Validate(const GenerateOptions& o, KvSpelling spelling) const {
  if (o.n_predict < -1) return Errorf("generate: -n {} must be >= 0, or -1 for no limit", o.n_predict);
  RETURN_IF_ERROR(ValidateSamplingParams(o.sampling));
  return ResolveKvConfig(o.kv, model_->config().kv_shape(n_ctx_), spelling);
}

// A single sequence runs through the same scheduler as a batch: one code path,
// so a sequence's output is the same alone or batched.
Result<GenerateResult> Engine::Generate(const GenerateOptions& o, const TextCallback& on_text,
                                        int prefill_step) {
  RETURN_IF_ERROR(Validate(o).status());
  if (prefill_step < 0) return Errorf("generate: --prefill-step {} must be >= 0", prefill_step);
  Scheduler::Options so;
  so.max_seqs = 1;
  so.prefill_step = prefill_step;
  Scheduler scheduler(*this, so);
  GenerateResult result;
  bool stop_requested = false;
  ASSIGN_OR_RETURN(SeqId id, scheduler.Add(SeqRequest{o.prompt, {}, o}, [&](const SeqEvent& e) {
    if (e.finished) {
      result = *e.result;
    } else if (!e.text.empty() && on_text && !on_text(e.text)) {
      stop_requested = true;
    }
  }));
  while (!scheduler.Idle()) {
    if (stop_requested) scheduler.Cancel(id);
    RETURN_IF_ERROR(scheduler.Step());
  }
  if (result.finish == FinishReason::kError) return Status::Error(result.error);
  return result;
}

}  // namespace rotor
