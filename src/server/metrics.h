// GET /metrics of `rotor serve`: Prometheus text exposition (format 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "server/batcher.h"

namespace rotor::serve {

class Metrics {
 public:
  // Counts one answered request. Paths other than the server's own endpoints
  // are counted as "other", so a scan of random URLs adds one series, not many.
  void CountRequest(std::string_view path, int status);

  struct Info {
    int max_sequences = 0;           // --parallel
    const char* state = "";          // ServerStateName
    int64_t in_flight = 0;           // Server::in_flight()
    std::string model_name;          // the model's id ("" while loading)
    int64_t kv_capacity_blocks = 0;  // blocks of the default K/V type the budget holds
  };
  // rotor's own: rotor_requests_total{endpoint,status}, rotor_server_state,
  // rotor_requests_in_flight, rotor_prompt_tokens_total,
  // rotor_generated_tokens_total, rotor_requests_cancelled_total,
  // rotor_queue_length, rotor_running_sequences, rotor_max_sequences,
  // rotor_kv_cells_used, the K/V block pool's rotor_kv_* gauges and counters,
  // rotor_prefix_cache_{query,hit}_tokens_total, rotor_sequences_preempted_total,
  // rotor_prompt_tokens_per_second and rotor_generation_tokens_per_second
  // (over the last Batcher::kRateWindow). Then the same figures under the
  // names routers scrape from vLLM (metrics.cc). `stats` is null while
  // the model loads: only the request counters and the state are known.
  std::string Render(const Batcher::Stats* stats, const Info& info) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
};

}  // namespace rotor::serve
