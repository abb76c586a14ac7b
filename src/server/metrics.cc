#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace rotor::serve {
namespace {

constexpr std::array<std::string_view, 5> kEndpoints = {"/v1/completions", "/v1/chat/completions",
                                                        "/v1/models", "/health", "/metrics"};

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Sample(std::string* out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  Header(out, name, type, help);
  *out += fmt::format("{} {}\n", name, value);
}

}  // namespace

void Metrics::CountRequest(std::string_view path, int status) {
  std::string endpoint = "other";
  for (std::string_view e : kEndpoints)
    if (path == e) endpoint = e;
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

namespace {

// A Prometheus label value: backslash, double quote and newline escaped.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string Metrics::Render(const Batcher::Stats* stats, const Info& info) const {
  std::string out;
  Header(&out, "rotor_requests_total", "counter",
         "HTTP requests answered, by endpoint and status.");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, n] : requests_)
      out += fmt::format("rotor_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                         key.second, n);
  }
  Header(&out, "rotor_server_state", "gauge",
         "1 for the state the replica is in: loading, ok (takes work) or draining.");
  for (const char* state : {"loading", "ok", "draining"})
    out += fmt::format("rotor_server_state{{state=\"{}\"}} {}\n", state,
                       std::string_view(state) == info.state ? 1 : 0);
  Sample(&out, "rotor_requests_in_flight", "gauge",
         "Generation requests accepted and not yet answered (streams until their last byte).",
         static_cast<double>(info.in_flight));
  if (stats == nullptr) return out;
  const Batcher::Stats& s = *stats;
  Sample(&out, "rotor_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(s.prompt_tokens));
  Sample(&out, "rotor_generated_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(s.generated_tokens));
  Sample(&out, "rotor_requests_cancelled_total", "counter",
         "Sequences cancelled because their client went away.", static_cast<double>(s.cancelled));
  Sample(&out, "rotor_queue_length", "gauge", "Requests accepted and waiting for a sequence slot.",
         static_cast<double>(s.queued));
  Sample(&out, "rotor_running_sequences", "gauge", "Sequences decoding now.",
         static_cast<double>(s.running));
  Sample(&out, "rotor_max_sequences", "gauge", "Sequences that may decode at once (--parallel).",
         info.max_sequences);
  Sample(&out, "rotor_kv_cells_used", "gauge", "KV cache cells held by the running sequences.",
         static_cast<double>(s.kv_cells));
  const KvBlockPool::Stats& kv = s.kv;
  Sample(&out, "rotor_kv_memory_budget_bytes", "gauge", "K/V memory budget (--kv-memory).",
         static_cast<double>(kv.budget_bytes));
  Sample(&out, "rotor_kv_memory_bytes", "gauge", "K/V memory held by blocks (used, cached, free).",
         static_cast<double>(kv.bytes));
  Sample(&out, "rotor_kv_block_tokens", "gauge", "Tokens per K/V block.",
         static_cast<double>(s.kv_block_cells));
  Sample(&out, "rotor_kv_blocks", "gauge", "K/V blocks that exist (used, cached, free).",
         static_cast<double>(kv.blocks));
  Sample(&out, "rotor_kv_blocks_used", "gauge", "K/V blocks held by sequences.",
         static_cast<double>(kv.blocks_used));
  Sample(&out, "rotor_kv_blocks_cached", "gauge",
         "K/V blocks of finished prompts kept for reuse (evicted least recently used first).",
         static_cast<double>(kv.blocks_cached));
  Sample(&out, "rotor_kv_blocks_free", "gauge",
         "K/V blocks neither used nor cached, their memory kept for the next ones.",
         static_cast<double>(kv.blocks_free));
  Sample(&out, "rotor_kv_blocks_evicted_total", "counter", "Cached K/V blocks freed to make room.",
         static_cast<double>(kv.evictions));
  Sample(&out, "rotor_kv_blocks_copied_total", "counter",
         "Shared K/V blocks copied before a sequence wrote into them.",
         static_cast<double>(kv.cow_copies));
  Sample(&out, "rotor_prefix_cache_query_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.", static_cast<double>(kv.query_tokens));
  Sample(&out, "rotor_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens found in the prefix cache (not computed).",
         static_cast<double>(kv.hit_tokens));
  Sample(&out, "rotor_sequences_preempted_total", "counter",
         "Sequences sent back to the queue to free K/V memory.", static_cast<double>(s.preempted));
  Sample(&out, "rotor_prompt_tokens_per_second", "gauge",
         "Prompt tokens processed per second over the last 10 s.", s.prompt_tps);
  Sample(&out, "rotor_generation_tokens_per_second", "gauge",
         "Tokens generated per second over the last 10 s.", s.gen_tps);

  // What the Gateway API Inference Extension's endpoint picker and the vLLM
  // routers read from vLLM, under vLLM's names, types and model_name label
  // (docs/ARCHITECTURE.md, "Several replicas"). KV usage counts blocks held
  // by sequences (cached blocks nobody holds are free to take, as in vLLM).
  const std::string label = fmt::format("{{model_name=\"{}\"}}", LabelValue(info.model_name));
  auto vllm = [&](std::string_view name, std::string_view type, std::string_view help,
                  double value) {
    Header(&out, name, type, help);
    out += fmt::format("{}{} {}\n", name, label, value);
  };
  const double kv_usage =
      info.kv_capacity_blocks > 0
          ? std::min(1.0, static_cast<double>(kv.blocks_used) / info.kv_capacity_blocks)
          : 0.0;
  vllm("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
       static_cast<double>(s.running));
  vllm("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
       static_cast<double>(s.queued));
  vllm("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv_usage);
  vllm("vllm:gpu_cache_usage_perc", "gauge",
       "KV-cache usage. 1 means 100 percent usage (vLLM's earlier name).", kv_usage);
  vllm("vllm:prefix_cache_queries_total", "counter",
       "Prefix cache queries, in terms of number of queried tokens.",
       static_cast<double>(kv.query_tokens));
  vllm("vllm:prefix_cache_hits_total", "counter",
       "Prefix cache hits, in terms of number of cached tokens.",
       static_cast<double>(kv.hit_tokens));
  vllm("vllm:gpu_prefix_cache_queries_total", "counter",
       "Prefix cache queries in tokens (vLLM's earlier name).",
       static_cast<double>(kv.query_tokens));
  vllm("vllm:gpu_prefix_cache_hits_total", "counter",
       "Prefix cache hits in tokens (vLLM's earlier name).", static_cast<double>(kv.hit_tokens));
  Header(&out, "vllm:cache_config_info", "gauge", "Information of the KV cache configuration.");
  out += fmt::format(
      "vllm:cache_config_info{{block_size=\"{}\",model_name=\"{}\",num_gpu_blocks=\"{}\"}} 1\n",
      s.kv_block_cells, LabelValue(info.model_name), info.kv_capacity_blocks);

  // llama-server's names (tools/server: its /metrics), for the dashboards
  // and alerts written for it; the same figures as rotor's own above. Its
  // throughput gauges are rotor's rates over the last 10 s. (Not given:
  // the prompt and generation seconds and decode-call counters, which
  // rotor's batched steps do not split per phase.)
  Sample(&out, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         static_cast<double>(s.prompt_tokens));
  Sample(&out, "llamacpp:tokens_predicted_total", "counter",
         "Number of generation tokens processed.", static_cast<double>(s.generated_tokens));
  Sample(&out, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         s.prompt_tps);
  Sample(&out, "llamacpp:predicted_tokens_seconds", "gauge",
         "Average generation throughput in tokens/s.", s.gen_tps);
  Sample(&out, "llamacpp:kv_cache_usage_ratio", "gauge",
         "KV-cache usage. 1 means 100 percent usage.", kv_usage);
  Sample(&out, "llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.",
         static_cast<double>(s.kv_cells));
  Sample(&out, "llamacpp:requests_processing", "gauge", "Number of requests processing.",
         static_cast<double>(s.running));
  Sample(&out, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
         static_cast<double>(s.queued));
  return out;
}

}  // namespace rotor::serve
