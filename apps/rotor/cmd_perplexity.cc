// rotor perplexity: how well a model predicts a text through a KV-cache policy.
//   chunked (default)  llama-perplexity's method: "[1]x,[2]y,..." and "Final estimate: PPL = X +/-
//   Y";
//                      --kl-base FILE saves (full cache) or compares against full-cache
//                      distributions
//   --stream T         one continuous stream of T tokens, perplexity per window of positions,
//                      --csv and --plot (SVG or PNG)
// Lists (--kv full,sink --kv-size 128,256 ...) run every combination in one command.
#include <fmt/format.h>

#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "eval/perplexity_study.h"

namespace rotor::cli {

using eval::PerplexityArgs;
using eval::PerplexityInput;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `ctx_zero`: -c 0 was given (the trained context), not left out (512).
int RunPerplexity(PerplexityArgs& a, bool ctx_zero) {
  if (!a.plot.empty() && !EndsWith(a.plot, ".svg") && !EndsWith(a.plot, ".png") &&
      !EndsWith(a.plot, ".SVG") && !EndsWith(a.plot, ".PNG"))
    return Fail(Errorf("perplexity: --plot '{}': unknown format (name the file .svg or .png)",
                       a.plot));
  Result<std::string> text = ReadFile(a.text_file);
  if (!text.ok()) return Fail(text.status().WithContext("perplexity: -f"));
  EngineOptions eo;
  eo.model_path = a.model_path;
  eo.n_threads = a.n_threads;
  Result<std::unique_ptr<Engine>> engine = Engine::Create(eo);
  if (!engine.ok()) return Fail(engine.status());
  const int n_ctx_train = (*engine)->model().config().n_ctx_train;
  a.ctx_given = a.n_ctx > 0;
  if (a.stream == 0) {
    if (ctx_zero)
      fmt::print(stderr,
                 "rotor: perplexity: -c 0: chunks of the model's trained context, {} "
                 "tokens\n",
                 n_ctx_train);
    if (a.n_ctx == 0) a.n_ctx = ctx_zero ? n_ctx_train : std::min(512, n_ctx_train);
    if (a.n_ctx > n_ctx_train)
      return Fail(
          Errorf("perplexity: -c {} is larger than the context the model was trained on "
                 "({} tokens); a chunk must fit in it",
                 a.n_ctx, n_ctx_train));
  } else if (a.n_ctx == 0) {
    a.n_ctx = n_ctx_train;
  }
  PerplexityInput in;
  in.args = &a;
  in.engine = engine->get();
  in.tokens = TokenizeForScoring((*engine)->tokenizer(), *text);
  fmt::print(stderr, "rotor: perplexity: {} tokenizes to {} tokens\n", a.text_file,
             in.tokens.size());
  const Status s = a.stream > 0 ? eval::RunStreamPerplexity(in) : eval::RunChunkedPerplexity(in);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

Runner RegisterPerplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity",
      "perplexity of a text (llama-perplexity's method), KL divergence against the "
      "full cache, or perplexity along one long stream, per KV-cache policy");
  a->model_path = DefaultModelPath();
  sub->add_option("-m,--model", a->model_path, "GGUF model file (default: the bundled model)");
  sub->add_option("-f,--file", a->text_file, "the text to score")->required();
  sub->add_option("-t,--threads", a->n_threads, "threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  CLI::Option* ctx =
      sub->add_option("-c,--ctx-size", a->n_ctx,
                      "tokens per chunk (default 512; 0 = the trained context, also the most); "
                      "with --stream, the cache's context (default: the trained context; full: "
                      "the stream)")
          ->check(CLI::Range(0, 1 << 24));
  CLI::Option* chunks =
      sub->add_option("--chunks", a->n_chunks, "score only the first N chunks (-1 = all)")
          ->check(CLI::Range(-1, 1 << 30));
  AddPrefillStepOptions(sub, &a->prefill_step,
                        "tokens per forward pass (0 = a whole chunk; with --stream, -c tokens)");
  AddKvListOptions(sub, &a->kv);
  // llama-perplexity's --kl-divergence-base FILE writes the base (rotor's full
  // run does), with --kl-divergence it reads it (rotor's --kl-read).
  CLI::Option* kl = sub->add_option(
      "--kl-base,--kl-divergence-base", a->kl_base,
      "full-cache distributions: the full run writes FILE, every other run is compared with it "
      "(mean KL divergence, top-1 agreement)");
  sub->add_flag("--kl-read,--kl-divergence", a->kl_read,
                "never write the --kl-base FILE: compare every run with it, full included")
      ->needs(kl);
  CLI::Option* stream =
      sub->add_option("--stream", a->stream,
                      "one continuous stream of T tokens (BOS once, no resets) through each policy")
          ->check(CLI::Range(int64_t{2}, int64_t{1} << 40));
  stream->excludes(chunks)->excludes(kl);
  sub->add_option("--window", a->window, "positions per perplexity window of the stream")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->needs(stream)
      ->capture_default_str();
  sub->add_option("--csv", a->csv, "write the stream's windows as CSV")->needs(stream);
  sub->add_option("--plot", a->plot, "draw perplexity against position (FILE.svg or FILE.png)")
      ->needs(stream);
  sub->add_flag("--no-progress", a->no_progress, "no progress bar on stderr");
  AddLlamaCppNotes(sub);
  return [a, ctx] { return RunPerplexity(*a, ctx->count() > 0 && a->n_ctx == 0); };
}

}  // namespace rotor::cli
