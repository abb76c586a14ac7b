// rotor generate: stream a completion of a prompt to stdout; a one-line summary to stderr.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/log.h"
#include "base/memory.h"
#include "base/timer.h"
#include "cli_common.h"
#include "cmd_generate_batch.h"
#include "commands.h"
#include "engine/prompt_cache.h"

namespace rotor::cli {
namespace {

struct GenerateArgs {
  EngineOptions engine;
  GenerateOptions gen;
  std::string prompt_file;
  bool no_display_prompt = false;
  std::string prompts_file;
  int64_t progress = 0;
  int parallel = 4;
  int prefill_step = kDefaultPrefillStep;
  std::string prompt_cache;  // --prompt-cache FILE
  bool prompt_cache_ro = false;
  bool escape = true;  // -e / --no-escape
};

// --prompt-cache: before generating, the file's tokens that start the prompt
// go into the engine's prefix cache, where the scheduler takes them. A file
// that cannot be used is a warning: the prompt is computed as without it.
// Returns the tokens loaded.
int64_t LoadPromptCacheFile(Engine& engine, const GenerateArgs& a, const KvConfig& kv,
                            const std::vector<int32_t>& prompt) {
  if (!std::filesystem::exists(a.prompt_cache)) {
    if (!a.prompt_cache_ro)
      fmt::print(stderr, "rotor: prompt cache {}: no such file yet; it will be written\n",
                 a.prompt_cache);
    return 0;
  }
  Result<PromptCacheFile> r =
      LoadPromptCache(engine, a.prompt_cache, kv, std::span<const int32_t>(prompt));
  if (!r.ok()) {
    fmt::print(stderr, "rotor: warning: {}; computing the whole prompt\n", r.message());
    return 0;
  }
  return r->n_tokens;
}

// After generating: the prompt's whole blocks, unless the file held them already.
void SavePromptCacheFile(Engine& engine, const GenerateArgs& a, const KvConfig& kv,
                         const std::vector<int32_t>& prompt, int64_t loaded) {
  const int64_t b = engine.kv_pool().block_cells();
  // What a cache of kv.size cells can hold of it (a ring keeps its first blocks).
  const int64_t whole = std::min<int64_t>(std::ssize(prompt), kv.size) / b * b;
  if (whole == 0) {
    fmt::print(stderr,
               "rotor: prompt cache {}: not written: the prompt has no whole block of {} tokens\n",
               a.prompt_cache, b);
    return;
  }
  if (whole <= loaded) return;  // nothing the file lacks
  Result<PromptCacheFile> r = SavePromptCache(engine, a.prompt_cache, kv, prompt);
  if (!r.ok()) {
    fmt::print(stderr, "rotor: warning: {}\n", r.message());
    return;
  }
  if (r->n_tokens == 0) {
    fmt::print(stderr,
               "rotor: prompt cache {}: saved no prompt tokens: no whole block of the prompt's "
               "start stayed in the cache as it ran\n",
               a.prompt_cache);
    return;
  }
  fmt::print(stderr, "rotor: prompt cache {}: saved {} prompt tokens ({})\n", a.prompt_cache,
             r->n_tokens, HumanBytes(r->bytes));
}

int RunGenerate(GenerateArgs& a) {
  // As llama.cpp: the command line's stop strings are escaped, a --prompts
  // file's text and fields are not.
  if (a.escape)
    for (std::string& stop : a.gen.stop) stop = ProcessEscapes(stop);
  if (!a.prompts_file.empty())
    return RunGenerateBatch(a.engine, a.gen, a.prompts_file, a.parallel, a.prefill_step);
  if (!a.prompt_file.empty()) {
    Result<std::string> text = ReadFile(a.prompt_file);
    if (!text.ok()) return Fail(text.status().WithContext("generate: -f"));
    a.gen.prompt = WithoutTrailingNewline(std::move(*text));
  }
  if (a.escape) a.gen.prompt = ProcessEscapes(a.gen.prompt);
  Result<std::unique_ptr<Engine>> engine = Engine::Create(a.engine);
  if (!engine.ok()) return Fail(engine.status());
  Result<KvConfig> kv = (*engine)->Validate(a.gen);
  if (!kv.ok()) return Fail(kv.status());
  Log(LogLevel::kInfo, "generate: kv {}; prefill step {}", DescribeKvConfig(*kv), a.prefill_step);
  // as the scheduler will tokenize it
  const std::vector<int32_t> prompt =
      (*engine)->tokenizer().Encode(a.gen.prompt, a.gen.add_bos, a.gen.parse_special);
  const int64_t reach =
      a.gen.n_predict < 0 ? -1 : std::ssize(prompt) + static_cast<int64_t>(a.gen.n_predict);
  if (std::string w = (*engine)->TrainedContextWarning(*kv, reach); !w.empty())
    fmt::print(stderr, "rotor: warning: {}\n", w);
  int64_t loaded = 0;
  int prefill_step = a.prefill_step;
  if (!a.prompt_cache.empty()) {
    if (Status s = CheckPromptCache(**engine, *kv); !s.ok()) return Fail(s);
    loaded = LoadPromptCacheFile(**engine, a, *kv, prompt);
    // A prompt longer than a ring's cells (sink, window) runs its first whole
    // blocks as a chunk of their own, so they are committed, and can be saved,
    // before the ring evicts them (in one chunk nothing was saved); a run that
    // loads them cuts the rest at the same place.
    const int64_t block = (*engine)->kv_pool().block_cells();
    const int whole = static_cast<int>(kv->size / block * block);
    if (std::ssize(prompt) > kv->size && whole > 0)
      prefill_step = prefill_step == 0 ? whole : std::min(prefill_step, whole);
  }
  int64_t window_start = NowNs();
  if (a.progress > 0) {
    a.gen.on_token = [&](int64_t n) {
      if (n % a.progress != 0) return;
      const int64_t now = NowNs();
      fmt::print(stderr,
                 "rotor: {} tokens | {:.1f} tok/s over the last {} | RSS {} | peak RSS {}\n", n,
                 a.progress * 1e9 / std::max<int64_t>(1, now - window_start), a.progress,
                 HumanBytes(CurrentRssBytes()), HumanBytes(PeakRssBytes()));
      window_start = now;
    };
  }
  bool wrote = false;  // to stdout: an error then starts on a line of its own
  if (!a.no_display_prompt && !a.gen.prompt.empty()) {
    std::fwrite(a.gen.prompt.data(), 1, a.gen.prompt.size(), stdout);
    std::fflush(stdout);
    wrote = true;
  }
  a.gen.collect_output = false;  // streamed to stdout: nothing to keep
  Result<GenerateResult> r = (*engine)->Generate(
      a.gen,
      [&wrote](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        wrote = wrote || !text.empty();
        return true;
      },
      prefill_step);
  if (!r.ok()) {
    if (wrote) std::fputc('\n', stdout);
    std::fflush(stdout);
    return Fail(r.status());
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!a.prompt_cache.empty()) {
    if (loaded > 0)
      fmt::print(stderr, "rotor: prompt cache {}: {} prompt tokens restored, {} computed\n",
                 a.prompt_cache, r->cached_tokens,
                 static_cast<int64_t>(r->prompt_tokens.size()) - r->cached_tokens);
    if (!a.prompt_cache_ro) SavePromptCacheFile(**engine, a, *kv, r->prompt_tokens, loaded);
  }
  fmt::print(stderr,
             "rotor: prompt {} tokens, {:.1f} tok/s | generated {} tokens, {:.1f} tok/s | "
             "finish: {}{} | peak RSS {}\n",
             r->prompt_tokens.size(), r->prompt_tps(), r->n_generated, r->gen_tps(),
             FinishReasonName(r->finish),
             r->finish == FinishReason::kContext
                 ? fmt::format(" (context of {} tokens is full)", (*engine)->n_ctx())
                 : "",
             HumanBytes(PeakRssBytes()));
  return 0;
}

}  // namespace

Runner RegisterGenerate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt");
  AddEngineOptions(sub, &a->engine);
  AddSamplingOptions(sub, &a->gen.sampling);
  AddKvOptions(sub, &a->gen.kv);
  auto* p = sub->add_option("-p,--prompt", a->gen.prompt, "prompt text");
  auto* f = sub->add_option("-f,--file", a->prompt_file,
                            "read the prompt from a file (one trailing newline dropped, as "
                            "llama.cpp's -f)");
  auto* pf = sub->add_option("--prompts", a->prompts_file,
                             "many prompts: one per line, or JSONL with per-prompt options; "
                             "writes one JSON line per prompt");
  p->excludes(f);
  pf->excludes(p);
  pf->excludes(f);
  sub->add_option("--parallel", a->parallel, "sequences decoded together (with --prompts)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  sub->add_option("-n,--n-predict", a->gen.n_predict,
                  "tokens to generate (-1 = until end of text or a full context)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--stop,-r,--reverse-prompt", a->gen.stop,
                  "stop at this string (repeatable; the string is not printed)");
  sub->add_flag("--ignore-eos", a->gen.ignore_eos, "keep generating past end-of-sequence");
  AddEscapeOptions(sub, &a->escape);
  AddPrefillStepOptions(sub, &a->prefill_step);
  sub->add_flag("--no-conversation")
      ->description("llama-cli's -no-cnv: generate is never a conversation");
  sub->add_flag_callback("--no-bos", [a] { a->gen.add_bos = false; }, "do not add the BOS token");
  sub->add_flag("--special", a->gen.parse_special,
                "parse special-token texts in the prompt (<|im_start|>, <s>) as those tokens");
  sub->add_option("--progress", a->progress,
                  "every N generated tokens, print tok/s and resident memory to stderr")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_flag("--no-display-prompt", a->no_display_prompt, "do not echo the prompt");
  auto* pc = sub->add_option(
      "--prompt-cache", a->prompt_cache,
      "KV file of the prompt: restored where a later prompt starts with its tokens, written "
      "after the run (the prompt's whole blocks of 16 tokens)");
  sub->add_flag("--prompt-cache-ro", a->prompt_cache_ro,
                "use the --prompt-cache file but do not write it")
      ->needs(pc);
  pc->excludes(pf);
  return [a] { return RunGenerate(*a); };
}

}  // namespace rotor::cli
