// rotor generate: stream a completion of a prompt to stdout; a one-line summary to stderr.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "base/memory.h"
#include "cli_common.h"
#include "commands.h"

namespace rotor::cli {
namespace {

struct GenerateArgs {
  EngineOptions engine;
  GenerateOptions gen;
  std::string prompt_file;
  bool no_display_prompt = false;
};

int RunGenerate(GenerateArgs& a) {
  if (!a.prompt_file.empty()) {
    Result<std::string> text = ReadFile(a.prompt_file);
    if (!text.ok()) return Fail(text.status().WithContext("generate: -f"));
    a.gen.prompt = *text;
  }
  Result<std::unique_ptr<Engine>> engine = Engine::Create(a.engine);
  if (!engine.ok()) return Fail(engine.status());
  if (Status s = (*engine)->Validate(a.gen); !s.ok()) return Fail(s);
  if (!a.no_display_prompt) {
    std::fwrite(a.gen.prompt.data(), 1, a.gen.prompt.size(), stdout);
    std::fflush(stdout);
  }
  Result<GenerateResult> r = (*engine)->Generate(a.gen, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (!r.ok()) return Fail(r.status());
  std::fputc('\n', stdout);
  std::fflush(stdout);
  fmt::print(stderr,
             "rotor: prompt {} tokens, {:.1f} tok/s | generated {} tokens, {:.1f} tok/s | "
             "finish: {}{} | peak RSS {}\n",
             r->prompt_tokens.size(), r->prompt_tps(), r->tokens.size(), r->gen_tps(),
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
  auto* f = sub->add_option("-f,--file", a->prompt_file, "read the prompt from a file");
  p->excludes(f);
  sub->add_option("-n,--n-predict", a->gen.n_predict,
                  "tokens to generate (-1 = until end of text or a full context)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--stop", a->gen.stop, "stop at this string (repeatable)");
  sub->add_flag("--ignore-eos", a->gen.ignore_eos, "keep generating past end-of-sequence");
  sub->add_option("--prefill-step", a->gen.prefill_step,
                  "prompt tokens per forward pass (0 = the whole prompt)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub->add_flag("!--no-bos", a->gen.add_bos, "do not add the BOS token");
  sub->add_flag("--no-display-prompt", a->no_display_prompt, "do not echo the prompt");
  return [a] { return RunGenerate(*a); };
}

}  // namespace rotor::cli
