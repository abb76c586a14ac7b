// rotor perplexity --stream: one continuous stream through each policy,
// perplexity per window of positions as a table, CSV and an SVG or PNG plot.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/timer.h"
#include "eval/perplexity_study.h"
#include "eval/plot.h"

namespace rotor::eval {
namespace {

struct StreamRun {
  const PerplexityRun* run;
  int n_ctx;  // the cache's context
  std::vector<WindowPpl> windows;
  double ppl = 0;  // over the whole stream
};

std::string FormatPpl(double v) {
  if (!std::isfinite(v)) return "inf";
  if (v < 1000) return fmt::format("{:.3f}", v);
  if (v < 1e6) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3e}", v);
}

void PrintTable(const std::vector<StreamRun>& runs) {
  fmt::print("| positions |");
  for (const StreamRun& r : runs) fmt::print(" {} |", r.run->label);
  fmt::print("\n|---|");
  for (size_t i = 0; i < runs.size(); ++i) fmt::print("---:|");
  fmt::print("\n");
  for (size_t w = 0; w < runs.front().windows.size(); ++w) {
    const WindowPpl& win = runs.front().windows[w];
    fmt::print("| {}-{} |", win.begin, win.end - 1);
    for (const StreamRun& r : runs) fmt::print(" {} |", FormatPpl(r.windows[w].ppl));
    fmt::print("\n");
  }
  fmt::print("| all |");
  for (const StreamRun& r : runs) fmt::print(" {} |", FormatPpl(r.ppl));
  fmt::print("\n");
}

// A file the run writes at its end: a missing or read-only directory is an
// error before the minutes of computing, not after.
Status CheckOutputPath(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Errorf("perplexity: {}: '{}' is a directory", flag, path);
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  if (!fs::is_directory(dir, ec))
    return Errorf("perplexity: {}: cannot create '{}': the directory '{}' does not exist", flag,
                  path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    return Errorf("perplexity: {}: cannot create '{}': {}", flag, path, std::strerror(errno));
  return Status::Ok();
}

Status WriteCsv(const std::string& path, const std::vector<StreamRun>& runs) {
  std::ofstream out(path);
  if (!out) return Errorf("perplexity: --csv: cannot create '{}': {}", path, std::strerror(errno));
  out << "run,policy,kv_size,kv_keep,positions,rope_k,window_start,window_end,tokens,ppl\n";
  for (const StreamRun& r : runs) {
    const KvConfig& c = r.run->resolved;
    const int size = KvPolicyEvicts(c.policy) ? c.size : r.n_ctx;
    const int keep = KvPolicyUses(c.policy, KvOpt::kKeep) ? c.keep : 0;  // no sinks: 0
    for (const WindowPpl& w : r.windows)
      out << fmt::format("{},{},{},{},{},{},{},{},{},{:.6g}\n", r.run->label,
                         c.policy, size, keep, KvPositionsName(c.positions),
                         RopeKName(c.rope_k), w.begin, w.end, w.n, w.ppl);
  }
  out.close();
  if (!out) return Errorf("perplexity: --csv: cannot write '{}'", path);
  return Status::Ok();
}

Status WritePlot(const PerplexityArgs& a, const Model& model, const std::vector<StreamRun>& runs) {
  // One color per policy family (policy, positions, keys), one dash per cache size.
  std::map<std::string, int> families;
  std::vector<int> sizes;
  for (const StreamRun& r : runs)
    if (KvPolicyEvicts(r.run->resolved.policy)) sizes.push_back(r.run->resolved.size);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  static constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                            "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                            "#bcbd22", "#7f7f7f", "#393b79", "#ad494a"};
  std::vector<PlotSeries> series;
  double lo = INFINITY, hi = 0;
  for (const StreamRun& r : runs) {
    const KvConfig& c = r.run->resolved;
    PlotSeries s;
    s.label = r.run->label;
    if (!KvPolicyEvicts(c.policy)) {
      s.color = "#000000";
      s.label += fmt::format(" (-c {})", r.n_ctx);
    } else {
      const std::string family = fmt::format("{}-{}-{}", c.policy,
                                             KvPositionsName(c.positions), RopeKName(c.rope_k));
      const int index = families.emplace(family, static_cast<int>(families.size())).first->second;
      s.color = kColors[index % std::size(kColors)];
      s.dash = static_cast<int>(std::find(sizes.begin(), sizes.end(), c.size) - sizes.begin());
    }
    for (const WindowPpl& w : r.windows) {
      s.x.push_back(0.5 * (w.begin + w.end));
      s.y.push_back(w.ppl);
      if (std::isfinite(w.ppl)) lo = std::min(lo, w.ppl), hi = std::max(hi, w.ppl);
    }
    series.push_back(std::move(s));
  }
  PlotOptions o;
  const int64_t n = a.stream;
  o.title = fmt::format("Perplexity per {}-token window along a {}-token stream: {}, {}", a.window,
                        n, FileName(a.model_path), FileName(a.text_file));
  o.x_label = "position in the stream (tokens)";
  o.x_max = static_cast<double>(n);
  o.log_y = hi > 4 * lo;
  o.y_label = o.log_y ? "perplexity (log scale)" : "perplexity";
  const int n_ctx_train = model.config().n_ctx_train;
  o.markers.push_back(
      {static_cast<double>(n_ctx_train), fmt::format("trained context {}", n_ctx_train)});
  return WritePlot(a.plot, o, series).WithContext("perplexity: --plot");
}

}  // namespace

Status RunStreamPerplexity(const PerplexityInput& in) {
  const PerplexityArgs& a = *in.args;
  Engine& engine = *in.engine;
  const Model& model = engine.model();
  const int n_ctx_train = model.config().n_ctx_train;
  if (static_cast<int64_t>(in.tokens.size()) < a.stream)
    return Errorf("perplexity: --stream {}: '{}' has only {} tokens", a.stream, a.text_file,
                       in.tokens.size());
  if (!a.csv.empty()) RETURN_IF_ERROR(CheckOutputPath(a.csv, "--csv"));
  if (!a.plot.empty()) RETURN_IF_ERROR(CheckOutputPath(a.plot, "--plot"));
  const std::span<const int32_t> tokens(in.tokens.data(), a.stream);
  Result<std::vector<PerplexityRun>> expanded = ExpandPerplexityRuns(a, model, a.n_ctx);
  if (!expanded.ok()) return expanded.status();

  // A full cache must hold the stream: without -c it gets a context of the
  // stream's length; past the trained context its quality is part of the study.
  std::vector<StreamRun> runs;
  int max_ctx = a.n_ctx;
  for (const PerplexityRun& run : *expanded) {
    StreamRun sr{&run, a.n_ctx, {}, 0};
    if (!KvPolicyEvicts(run.kv.policy)) {
      if (a.n_ctx < a.stream && !a.ctx_given) sr.n_ctx = static_cast<int>(a.stream);
      if (sr.n_ctx >= a.stream && a.stream > n_ctx_train)
        fmt::print(stderr,
                   "rotor: perplexity: note: {} holds all {} tokens (-c {}), past the {} tokens "
                   "the model was trained on: positions beyond them are out of distribution\n",
                   run.label, a.stream, sr.n_ctx, n_ctx_train);
    } else if (run.resolved.positions == KvPositions::kOriginal && a.stream > n_ctx_train) {
      fmt::print(stderr,
                 "rotor: perplexity: note: {} keeps original positions, which grow past the "
                 "trained context ({}) after {} tokens\n",
                 run.label, n_ctx_train, n_ctx_train);
    }
    max_ctx = std::max(max_ctx, sr.n_ctx);
    runs.push_back(std::move(sr));
  }
  const int step = a.prefill_step > 0 ? a.prefill_step : a.n_ctx;
  fmt::print(stderr,
             "rotor: perplexity: a stream of {} tokens through {} run(s), windows of {} "
             "positions, {} tokens per forward pass\n",
             a.stream, runs.size(), a.window, step);
  Runner runner(model, engine.pool(), RunnerOptions{.prefill_step = step, .n_ctx = max_ctx});
  ProgressBar bar(!a.no_progress);
  for (StreamRun& sr : runs) {
    StreamOptions so;
    so.n_ctx = sr.n_ctx;
    so.kv = sr.run->kv;
    bar.Start(sr.run->label, a.stream);
    const int64_t start_ns = NowNs();
    Result<std::vector<float>> nll =
        StreamNll(runner, tokens, so, [&](int64_t done) { bar.Update(done); });
    bar.Finish();
    if (!nll.ok())
      return nll.status().WithContext(fmt::format("perplexity: {}", sr.run->label));
    sr.windows = WindowPerplexity(*nll, a.window);
    double sum = 0;
    for (float v : *nll) sum += v;
    sr.ppl = std::exp(sum / nll->size());
    const double secs = (NowNs() - start_ns) * 1e-9;
    fmt::print(stderr, "rotor: perplexity: {}: PPL {} over {} tokens ({:.1f} s, {:.0f} tok/s)\n",
               sr.run->label, FormatPpl(sr.ppl), nll->size(), secs, a.stream / secs);
  }
  PrintTable(runs);
  std::fflush(stdout);
  if (!a.csv.empty())
    if (Status s = WriteCsv(a.csv, runs); !s.ok()) return s;
  if (!a.plot.empty())
    if (Status s = WritePlot(a, model, runs); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace rotor::eval
