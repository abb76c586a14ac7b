#include "eval/perplexity_study.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "base/timer.h"

namespace rotor::eval {

Result<std::vector<PerplexityRun>> ExpandPerplexityRuns(const PerplexityArgs& a, const Model& model,
                                                        int n_ctx) {
  Result<std::vector<KvConfig>> kvs = ExpandKvLists(a.kv);
  if (!kvs.ok()) return kvs.status().WithContext("perplexity");
  std::vector<PerplexityRun> runs;
  for (const KvConfig& kv : *kvs) {
    Result<KvConfig> resolved = ResolveKvConfig(kv, model.kv_shape(n_ctx));
    if (!resolved.ok()) return resolved.status().WithContext(fmt::format("perplexity (-c {})", n_ctx));
    PerplexityRun run;
    run.kv = kv;
    run.resolved = *resolved;
    // "sink-128-compact": the policy, then what tells its runs apart.
    run.label = kv.policy;
    if (KvPolicyUses(kv.policy, KvOpt::kSize)) run.label += fmt::format("-{}", resolved->size);
    for (KvOpt o : {KvOpt::kKeep, KvOpt::kRecent, KvOpt::kWindow})
      if (kv.Given(o)) run.label += fmt::format("-{}{}", KvOption(o).field.substr(3, 1), kv.Get(o));
    if (KvPolicyUses(kv.policy, KvOpt::kPositions))
      run.label += fmt::format("-{}", KvPositionsName(resolved->positions));
    if (kv.rope_k == RopeK::kDeferred) run.label += "-deferred";
    if (a.kv[KvOpt::kType].size() > 1 || a.kv[KvOpt::kTypeK].size() > 1 ||
        a.kv[KvOpt::kTypeV].size() > 1)
      run.label += fmt::format("-{}", KvTypesName(kv.types));
    if (a.kv[KvOpt::kRotate].size() > 1) run.label += kv.rotate ? "-rot" : "-norot";
    if (a.kv[KvOpt::kKeyOffset].size() > 1) run.label += resolved->k_offset ? "-koff" : "-nokoff";
    const bool seen = std::any_of(runs.begin(), runs.end(),
                                  [&](const PerplexityRun& r) { return r.label == run.label; });
    if (!seen) runs.push_back(run);
  }
  return runs;
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

}  // namespace rotor::eval
