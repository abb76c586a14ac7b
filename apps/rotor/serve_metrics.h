// GET /metrics of `rotor serve`: Prometheus text exposition (format 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "serve_batcher.h"

namespace rotor::serve {

class Metrics {
 public:
  // Counts one answered request. Paths other than the server's own endpoints
  // are counted as "other", so a scan of random URLs adds one series, not many.
  void CountRequest(std::string_view path, int status);

  // rotor_requests_total{endpoint,status}, rotor_prompt_tokens_total,
  // rotor_generated_tokens_total, rotor_requests_cancelled_total,
  // rotor_queue_length, rotor_running_sequences, rotor_max_sequences,
  // rotor_kv_cells_used, the K/V block pool's rotor_kv_* gauges and counters,
  // rotor_prefix_cache_{query,hit}_tokens_total, rotor_sequences_preempted_total,
  // rotor_prompt_tokens_per_second and
  // rotor_generation_tokens_per_second (over the last Batcher::kRateWindow).
  std::string Render(const Batcher::Stats& stats, int max_sequences) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
};

}  // namespace rotor::serve
