// rotor perplexity, chunked mode: llama-perplexity's output, the KL base, the
// KL divergence report and a summary of several runs.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "eval/perplexity_study.h"

namespace rotor::eval {
namespace {

std::string DescribeModel(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config();
  return fmt::format("{} ({}{} params, {})", FileName(path), c.name.empty() ? "" : c.name + ", ",
                     model.n_params(), model.type_name());
}

Result<std::unique_ptr<KlBaseReader>> OpenBase(const PerplexityArgs& a, uint64_t fingerprint,
                                               const std::string& model) {
  Result<std::unique_ptr<KlBaseReader>> r = KlBaseReader::Open(a.kl_base);
  if (!r.ok())
    return r.status().WithContext(a.kl_read ? "perplexity: --kl-base"
                                            : "perplexity: --kl-base (write one with --kv full)");
  const KlBaseInfo& info = (*r)->info();
  if (info.model_fingerprint != fingerprint)
    return Errorf("perplexity: --kl-base '{}' was made with a different model: {}, this run: {}",
                  a.kl_base, info.model, model);
  return r;
}

void PrintKlReport(const KlStats& kl, const KlBaseInfo& base, const std::string& path) {
  fmt::print("====== KL divergence against '{}' ({}; {}; -c {}; {} positions) ======\n", path,
             base.kv, base.model, base.n_ctx, kl.count());
  fmt::print("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", kl.nll.Ppl(),
             kl.nll.PplError());
  fmt::print("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", kl.nll_base.Ppl(),
             kl.nll_base.PplError());
  const MeanError ratio = kl.LogPplRatio();
  fmt::print("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", ratio.mean, ratio.error);
  const MeanError kld = kl.Kld();
  std::vector<float> sorted = kl.kld;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", kld.mean, kld.error);
  fmt::print("Maximum KLD: {:10.6f}\n", sorted.empty() ? 0.0 : sorted.back());
  fmt::print("99.9%   KLD: {:10.6f}\n", Percentile(sorted, 0.999));
  fmt::print("99.0%   KLD: {:10.6f}\n", Percentile(sorted, 0.99));
  fmt::print("Median  KLD: {:10.6f}\n", Percentile(sorted, 0.5));
  const MeanError top = kl.SameTop();
  fmt::print("Same top p: {:7.3f} ± {:6.3f} %\n", 100 * top.mean, 100 * top.error);
}

struct SummaryRow {
  std::string label;
  int cells = 0;
  double ppl = 0, ppl_error = 0;
  bool has_kl = false;
  MeanError kld, top;
  double kld_p99 = 0;
};

void PrintSummary(const std::vector<SummaryRow>& rows) {
  fmt::print(
      "\n| kv | cells | PPL | mean KLD | 99% KLD | same top |\n|---|---:|---|---|---:|---|\n");
  for (const SummaryRow& r : rows) {
    fmt::print("| {} | {} | {:.4f} ± {:.4f} |", r.label, r.cells, r.ppl, r.ppl_error);
    if (r.has_kl)
      fmt::print(" {:.6f} ± {:.6f} | {:.6f} | {:.2f} ± {:.2f} % |\n", r.kld.mean, r.kld.error,
                 r.kld_p99, 100 * r.top.mean, 100 * r.top.error);
    else
      fmt::print(" | | |\n");
  }
}

}  // namespace

Status RunChunkedPerplexity(const PerplexityInput& in) {
  const PerplexityArgs& a = *in.args;
  Engine& engine = *in.engine;
  const Model& model = engine.model();
  Result<std::vector<PerplexityRun>> expanded = ExpandPerplexityRuns(a, model, a.n_ctx);
  if (!expanded.ok()) return expanded.status();
  std::vector<PerplexityRun>& runs = *expanded;

  // With --kl-base, the first full run writes the base (so it runs first) and
  // every other run reads it; --kl-read makes every run read it.
  const bool kl = !a.kl_base.empty();
  int writer = -1;
  if (kl && !a.kl_read) {
    auto it = std::find_if(runs.begin(), runs.end(),
                           [](const PerplexityRun& r) { return !KvPolicyEvicts(r.kv.policy); });
    if (it != runs.end()) {
      std::rotate(runs.begin(), it, it + 1);
      writer = 0;
    }
  }
  uint64_t fingerprint = 0;
  const std::string model_desc = DescribeModel(a.model_path, model);
  int n_chunks = a.n_chunks;
  if (kl) {
    Result<uint64_t> fp = ModelFingerprint(a.model_path);
    if (!fp.ok()) return fp.status();
    fingerprint = *fp;
    if (writer < 0) {  // chunks default to the base's
      Result<std::unique_ptr<KlBaseReader>> base = OpenBase(a, fingerprint, model_desc);
      if (!base.ok()) return base.status();
      if (n_chunks < 0) n_chunks = (*base)->info().n_chunks;
    }
  }
  Result<int> counted = CountChunks(static_cast<int64_t>(in.tokens.size()), a.n_ctx, n_chunks);
  if (!counted.ok()) return counted.status();
  n_chunks = *counted;
  const int step = a.prefill_step > 0 ? std::min(a.prefill_step, a.n_ctx) : a.n_ctx;
  const int first = a.n_ctx / 2;
  fmt::print(stderr,
             "rotor: perplexity: {} chunks of {} tokens, each scored on positions {}..{} ({} "
             "tokens), {} tokens per forward pass\n",
             n_chunks, a.n_ctx, first, a.n_ctx - 2, a.n_ctx - 1 - first, step);

  Runner runner(model, engine.pool(), RunnerOptions{.prefill_step = step, .n_ctx = a.n_ctx});
  const Tokenizer& tok = engine.tokenizer();
  const int32_t bos = tok.add_bos() ? tok.bos() : -1;
  ProgressBar bar(!a.no_progress);
  std::vector<SummaryRow> summary;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const PerplexityRun& run = runs[ri];
    if (runs.size() > 1)
      fmt::print("{}kv {}: {}\n", ri > 0 ? "\n" : "", run.label, DescribeKvConfig(run.resolved));
    std::fflush(stdout);
    std::unique_ptr<KlBaseWriter> base_writer;
    std::unique_ptr<KlBaseReader> base_reader;
    PerplexityHooks hooks;
    if (static_cast<int>(ri) == writer) {
      KlBaseInfo info;
      info.model = model_desc;
      info.model_fingerprint = fingerprint;
      info.text = FileName(a.text_file);
      info.kv = DescribeKvConfig(run.resolved);
      info.n_vocab = model.config().n_vocab;
      info.n_ctx = a.n_ctx;
      info.n_chunks = n_chunks;
      info.tokens.assign(in.tokens.begin(),
                         in.tokens.begin() + static_cast<size_t>(n_chunks) * a.n_ctx);
      Result<std::unique_ptr<KlBaseWriter>> w = KlBaseWriter::Create(a.kl_base, info);
      if (!w.ok()) return w.status().WithContext("perplexity: --kl-base");
      base_writer = std::move(*w);
      hooks.write_base = base_writer.get();
    } else if (kl) {
      Result<std::unique_ptr<KlBaseReader>> r = OpenBase(a, fingerprint, model_desc);
      if (!r.ok()) return r.status();
      base_reader = std::move(*r);
      hooks.compare_base = base_reader.get();
    }
    hooks.on_chunk = [&](int chunk, const PerplexityResult& so_far) {
      bar.Clear();
      fmt::print("[{}]{:.4f},", chunk + 1, so_far.running_ppl.back());
      std::fflush(stdout);
    };
    hooks.on_tokens = [&](int64_t done) { bar.Update(done); };
    bar.Start(run.label, static_cast<int64_t>(n_chunks) * a.n_ctx);
    PerplexityOptions po;
    po.n_ctx = a.n_ctx;
    po.n_chunks = n_chunks;
    po.kv = run.kv;
    Result<PerplexityResult> r = ChunkedPerplexity(runner, bos, in.tokens, po, hooks);
    bar.Finish();
    if (!r.ok()) {
      fmt::print("\n");
      return r.status().WithContext(run.label);
    }
    fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r->nll.Ppl(), r->nll.PplError());
    SummaryRow row;
    row.label = run.label;
    row.cells = run.resolved.size;
    row.ppl = r->nll.Ppl();
    row.ppl_error = r->nll.PplError();
    std::fflush(stdout);
    if (base_writer) {
      if (Status s = base_writer->Close(); !s.ok()) return s;
      fmt::print(stderr, "rotor: perplexity: wrote the KL base '{}' ({} chunks x {} positions)\n",
                 a.kl_base, n_chunks, a.n_ctx - 1 - first);
    }
    if (r->kl) {
      PrintKlReport(*r->kl, base_reader->info(), a.kl_base);
      row.has_kl = true;
      row.kld = r->kl->Kld();
      row.top = r->kl->SameTop();
      row.kld_p99 = r->kl->KldPercentile(0.99);
    }
    std::fflush(stdout);
    summary.push_back(row);
  }
  if (runs.size() > 1) PrintSummary(summary);
  return Status::Ok();
}

}  // namespace rotor::eval
