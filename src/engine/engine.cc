#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/log.h"
#include "base/memory.h"
#include "base/timer.h"
#include "engine/scheduler.h"
#include "kv/kv_policy.h"

namespace rotor {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

namespace {
// The largest context used when -c is not given (Llama 3.1's 131,072): a
// GGUF's context_length beyond it (1,048,576 or 16,777,216) is not taken as
// the size of per-context tables.
constexpr int kMaxDefaultContext = 1 << 17;
}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.n_threads < 0) return Errorf("engine: -t {} must be positive", options.n_threads);
  if (options.n_ctx < 0 || options.n_ctx > kMaxContext)
    return Errorf("engine: -c {} out of range [0, {}] (0 = the model's)", options.n_ctx,
                  kMaxContext);
  std::unique_ptr<Engine> e(new Engine());
  ASSIGN_OR_RETURN(e->model_, Model::Load(options.model_path, /*pack_matrices=*/true, options.open));
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(e->model_->file());
  if (!tok.ok()) return Errorf("engine: {}: {}", options.model_path, tok.message());
  e->tokenizer_ = std::move(*tok);
  e->token_trie_ = std::make_unique<TokenTrieCache>(*e->tokenizer_);
  if (e->tokenizer_->n_vocab() != e->model_->config().n_vocab)
    return Errorf("engine: {}: vocabulary has {} tokens but token_embd.weight has {} rows",
                  options.model_path, e->tokenizer_->n_vocab(), e->model_->config().n_vocab);
  // A default context is the model's, up to kMaxDefaultContext: per-context
  // tables (cells, RoPE distances) are sized by it, and a file's number is no
  // limit the user chose. -c sets any size up to kMaxContext.
  const int trained = e->model_->config().n_ctx_train;
  e->n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(trained, kMaxDefaultContext);
  if (options.n_ctx == 0 && trained > kMaxDefaultContext)
    Log(LogLevel::kWarn,
        "engine: {}: the model declares a context of {} tokens; using {} (set -c to change)",
        options.model_path, trained, kMaxDefaultContext);
  e->pool_ =
      std::make_unique<ThreadPool>(options.n_threads > 0 ? options.n_threads : HardwareThreads());
  if (options.kv_memory_bytes < 0)
    return Errorf("engine: --kv-memory {} must not be negative", options.kv_memory_bytes);
  if (options.max_seqs <= 0) return Errorf("engine: {} sequences at once", options.max_seqs);
  const KvShape shape = e->model_->kv_shape(e->n_ctx_);
  e->kv_memory_default_ = options.kv_memory_bytes == 0;
  e->prefix_cache_ = options.prefix_cache;
  const int64_t budget =
      e->kv_memory_default_ ? DefaultKvMemory(shape, options.max_seqs) : options.kv_memory_bytes;
  e->kv_pool_ = std::make_unique<KvBlockPool>(
      shape, KvPoolOptions{.budget_bytes = budget, .model_id = e->model_->identity()});
  const int64_t one = static_cast<int64_t>(e->kv_pool_->BlockBytes(KvTypes{}));
  if (budget < one)
    return Errorf("engine: --kv-memory {} bytes holds not one block of {} tokens ({} bytes)",
                  budget, e->kv_pool_->block_cells(), one);
  const ModelConfig& c = e->model_->config();
  Log(LogLevel::kInfo,
      "engine: {}: {}, {} layers, {} heads ({} KV) of {}, vocabulary {}, trained context {}; "
      "context {}, {} threads; {}",
      options.model_path, c.arch, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab,
      c.n_ctx_train, e->n_ctx_, e->pool_->size(), e->DescribeKvMemory());
  return e;
}

std::string Engine::TrainedContextWarning(const KvConfig& kv, int64_t max_tokens) const {
  const int64_t trained = model_->config().n_ctx_train;
  const KvPolicyInfo* info = FindKvPolicy(kv.policy);
  if (trained <= 0 || info == nullptr) return "";
  const int64_t reach = max_tokens < 0 ? std::numeric_limits<int64_t>::max() : max_tokens;
  if (!info->evicts) {
    if (std::min<int64_t>(reach, kv.size) <= trained) return "";
    return fmt::format(
        "the context of {} tokens is larger than the {} the model was trained on: past {} "
        "tokens its positions are ones the model never saw and the text degrades (lower -c, or "
        "bound the cache with --kv sink --kv-size {})",
        kv.size, trained, trained, trained);
  }
  if (kv.size > trained && reach > trained)
    return fmt::format(
        "--kv-size {} is larger than the {} tokens the model was trained on: keys farther "
        "than {} from the newest token degrade the text (use --kv-size {} or less)",
        kv.size, trained, trained, trained);
  if (kv.positions == KvPositions::kOriginal && !info->recent_only && reach > trained)
    return fmt::format(
        "--kv {} with --kv-positions original: once the text passes the {} tokens the model "
        "was trained on, the tokens the cache keeps from long ago are farther from the newest "
        "one than it ever saw, and the text degrades (docs/EVALUATION.md); --kv-positions "
        "compact avoids it",
        kv.policy, trained);
  return "";
}

Result<int64_t> ParseKvMemory(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string_view rest(end, s.c_str() + s.size() - end);
  const bool percent = rest == "%";
  const bool fraction = percent || s.find('.') != std::string::npos;
  if (end == s.c_str() || !(rest.empty() || percent) || !(v > 0) || !std::isfinite(v))
    return Errorf(
        "--kv-memory {}: expected MiB (4096), a fraction of the machine's memory (0.25) or a "
        "percentage (25%)",
        text);
  if (fraction) {
    const double f = percent ? v / 100 : v;
    if (f > 1) return Errorf("--kv-memory {}: more than the machine's memory", text);
    const int64_t ram = PhysicalMemoryBytes();
    if (ram <= 0) return Errorf("--kv-memory {}: the machine's memory is unknown; give MiB", text);
    return static_cast<int64_t>(f * static_cast<double>(ram));
  }
  if (v > double{int64_t{1} << 43}) return Errorf("--kv-memory {} MiB is too large", text);
  return static_cast<int64_t>(v) << 20;
}

int64_t DefaultKvMemory(const KvShape& shape, int max_seqs) {
  const int64_t blocks = (int64_t{shape.n_ctx} + kKvBlockCells - 1) / kKvBlockCells + 1;
  const int64_t per_seq = 2LL * shape.n_layer * blocks * kKvBlockCells * shape.n_head_kv *
                          shape.head_dim * int64_t{4};
  const int64_t ram = PhysicalMemoryBytes();
  const int64_t want = per_seq * max_seqs;
  return ram > 0 ? std::min(want, ram / 2) : want;
}

std::string Engine::DescribeKvMemory() const {
  const KvBlockPool& p = *kv_pool_;
  // Tokens of the default type first (f16), then of f32.
  const int64_t per_token = static_cast<int64_t>(p.BlockBytes(KvTypes{})) / p.block_cells();
  const int64_t per_token_f32 =
      static_cast<int64_t>(p.BlockBytes(KvTypes{KvType::kF32, KvType::kF32})) / p.block_cells();
  return fmt::format("{}{} = {} tokens of {} K/V ({} of f32), in blocks of {} tokens",
                     HumanBytes(p.budget_bytes()),
                     kv_memory_default_ ? " (default, sized by -c; --kv-memory to change)" : "",
                     p.budget_bytes() / per_token, KvTypesName(KvTypes{}),
                     p.budget_bytes() / per_token_f32, p.block_cells());
}

Result<KvConfig> Engine::Validate(const GenerateOptions& o, KvSpelling spelling) const {
  if (o.n_predict < -1)
    return Errorf("generate: {} {} must be >= 0, or -1 for no limit",
                  spelling == KvSpelling::kField ? "n_predict" : "-n", o.n_predict);
  RETURN_IF_ERROR(ValidateSamplingParams(o.sampling));
  RETURN_IF_ERROR(ValidateLogitBias(o.sampling, model_->config().n_vocab));
  if (o.logprobs < -1 || o.logprobs > kMaxTopLogprobs)
    return Errorf("generate: logprobs {} out of range [-1, {}]", o.logprobs, kMaxTopLogprobs);
  return ResolveKvConfig(o.kv, model_->kv_shape(n_ctx_), spelling);
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
