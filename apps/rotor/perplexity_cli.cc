#include "perplexity_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "base/timer.h"

namespace rotor::cli {

Result<std::vector<PerplexityRun>> ExpandPerplexityRuns(const PerplexityArgs& a, const Model& model,
                                                        int n_ctx) {
  std::vector<KvPolicy> policies;
  for (const std::string& s : a.kv) {
    std::optional<KvPolicy> p = ParseKvPolicy(s);
    if (!p) return Errorf("perplexity: --kv '{}' is not one of full, sink, window, h2o", s);
    policies.push_back(*p);
  }
  std::vector<KvPositions> positions;
  for (const std::string& s : a.kv_positions) {
    std::optional<KvPositions> p = ParseKvPositions(s);
    if (!p) return Errorf("perplexity: --kv-positions '{}' is not one of original, compact", s);
    positions.push_back(*p);
  }
  std::vector<RopeK> ropes;
  for (const std::string& s : a.rope_k) {
    std::optional<RopeK> r = ParseRopeK(s);
    if (!r) return Errorf("perplexity: --rope-k '{}' is not one of cached, deferred", s);
    ropes.push_back(*r);
  }
  const std::optional<KvType> kv_type = ParseKvType(a.kv_type);
  if (!kv_type) return Errorf("perplexity: --kv-type '{}' is not one of f32, f16", a.kv_type);
  // Beside evicting policies, full holds the whole context with original
  // positions whatever --kv-size and --kv-positions list; alone, it takes them
  // as given (and ResolveKvConfig explains what does not fit).
  const bool only_full = std::all_of(policies.begin(), policies.end(),
                                     [](KvPolicy p) { return p == KvPolicy::kFull; });
  std::vector<PerplexityRun> runs;
  for (KvPolicy policy : policies)
    for (int size : a.kv_size)
      for (KvPositions pos : positions)
        for (RopeK rope : ropes) {
          KvConfig kv;
          kv.policy = policy;
          kv.size = size;
          kv.positions = pos;
          kv.rope_k = rope;
          kv.type = *kv_type;
          kv.keep = a.kv_keep;
          kv.recent = a.kv_recent;
          if (policy == KvPolicy::kFull && !only_full) {
            kv.size = 0;
            kv.positions = KvPositions::kOriginal;
          }
          Result<KvConfig> resolved = ResolveKvConfig(kv, model.config().kv_shape(n_ctx));
          if (!resolved.ok())
            return resolved.status().WithContext(fmt::format("perplexity (-c {})", n_ctx));
          PerplexityRun run;
          run.kv = kv;
          run.resolved = *resolved;
          run.label = policy == KvPolicy::kFull ? "full"
                                                : fmt::format("{}-{}-{}", KvPolicyName(policy),
                                                              resolved->size, KvPositionsName(pos));
          if (rope == RopeK::kDeferred) run.label += "-deferred";
          const bool seen = std::any_of(runs.begin(), runs.end(), [&](const PerplexityRun& r) {
            return r.label == run.label;
          });
          if (!seen) runs.push_back(run);
        }
  return runs;
}

std::string DescribeKv(const KvConfig& c) {
  std::string s = fmt::format("{}, {} cells", KvPolicyName(c.policy), c.size);
  if (c.policy == KvPolicy::kSink)
    s += fmt::format(" ({} sinks + {} recent)", c.keep, c.size - c.keep);
  if (c.policy == KvPolicy::kH2o)
    s += fmt::format(" ({} heavy hitters + {} recent)", c.size - c.recent, c.recent);
  if (c.policy != KvPolicy::kFull) s += fmt::format(", {} positions", KvPositionsName(c.positions));
  return s + fmt::format(", {} keys, {} K/V", RopeKName(c.rope_k), KvTypeName(c.type));
}

std::string FileName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

ProgressBar::~ProgressBar() { Clear(); }

void ProgressBar::Start(std::string label, int64_t total) {
  label_ = std::move(label);
  total_ = std::max<int64_t>(total, 1);
  done_ = 0;
  start_ns_ = NowNs();
  last_draw_ns_ = 0;
  Draw();
}

void ProgressBar::Update(int64_t done) {
  done_ = std::min(done, total_);
  if (NowNs() - last_draw_ns_ > 100'000'000) Draw();
}

void ProgressBar::Draw() {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done_ / total_);
  const double secs = (NowNs() - start_ns_) * 1e-9;
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  fmt::print(stderr, "\r\033[K{} [{}] {:3d}% {}/{} tokens, {:.0f} tok/s", label_, bar,
             static_cast<int>(100 * done_ / total_), done_, total_, secs > 0 ? done_ / secs : 0.0);
  std::fflush(stderr);
  drawn_ = true;
  last_draw_ns_ = NowNs();
}

void ProgressBar::Clear() {
  if (!drawn_) return;
  fmt::print(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::Finish() {
  done_ = total_;
  Clear();
}

}  // namespace rotor::cli
