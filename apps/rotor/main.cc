// rotor: run Llama-family GGUF models on the CPU.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "argv_compat.h"
#include "base/log.h"
#include "cli_common.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"rotor: Llama-family GGUF models on the CPU, with a pluggable KV cache"};
  app.require_subcommand(1);
  // Taken anywhere on the line, before CLI11 parses (argv_compat.h); here for --help.
  app.add_flag("--version")->description("print the version and exit");
  app.add_flag("-v,--verbose")
      ->description("log more (model, context, K/V memory, file mapping) to stderr");
  std::map<CLI::App*, rotor::cli::Runner> runners;
  auto add = [&](rotor::cli::Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    rotor::cli::Runner run = reg(app);
    runners[app.get_subcommands({})[before]] = std::move(run);
  };
  add(rotor::cli::RegisterGenerate);
  add(rotor::cli::RegisterTokenize);
  add(rotor::cli::RegisterDetokenize);
  add(rotor::cli::RegisterInfo);
  add(rotor::cli::RegisterSynth);
  add(rotor::cli::RegisterBench);
  add(rotor::cli::RegisterServe);
  add(rotor::cli::RegisterPerplexity);
  add(rotor::cli::RegisterChat);
  add(rotor::cli::RegisterQuantize);
  // "-n 8 -n 3" is 3, as llama.cpp reads it (lists keep every value).
  rotor::cli::TakeLastValueEverywhere(&app);
  // llama.cpp's spellings, and an error naming an unknown option (argv_compat.h).
  rotor::cli::CompatArgs args =
      rotor::cli::RewriteArgs(app, std::vector<std::string>(argv + 1, argv + argc));
  if (args.version) {
    fmt::print("{}", rotor::cli::VersionText());
    return 0;
  }
  if (args.error) {
    fmt::print(stderr, "{}\n", *args.error);
    return 1;
  }
  if (args.verbose) rotor::SetLogLevel(rotor::LogLevel::kDebug);
  for (const std::string& note : args.notes) fmt::print(stderr, "{}\n", note);
  std::reverse(args.args.begin(), args.args.end());  // CLI11 takes them last first
  try {
    app.parse(args.args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // An allocation the machine cannot give (a context or K/V budget too large for
  // its memory or address-space limit) is an error that says so, not an abort.
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "rotor: error: out of memory: an allocation failed (lower -c / --ctx-size, "
               "--kv-memory, -b or the number of sequences, or raise the memory limit)\n");
    return 1;
  } catch (const std::length_error& e) {
    fmt::print(stderr, "rotor: error: out of memory: {}\n", e.what());
    return 1;
  }
  return 1;
}
