// rotor: run Llama-family GGUF models on the CPU.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <map>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"rotor: Llama-family GGUF models on the CPU, with a pluggable KV cache"};
  app.require_subcommand(1);
  std::map<CLI::App*, rotor::cli::Runner> runners;
  auto add = [&](rotor::cli::Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    rotor::cli::Runner run = reg(app);
    runners[app.get_subcommands({})[before]] = std::move(run);
  };
  add(rotor::cli::RegisterGenerate);
  add(rotor::cli::RegisterTokenize);
  add(rotor::cli::RegisterInfo);
  add(rotor::cli::RegisterSynth);
  add(rotor::cli::RegisterBench);
  add(rotor::cli::RegisterServe);
  add(rotor::cli::RegisterPerplexity);
  add(rotor::cli::RegisterChat);
  add(rotor::cli::RegisterQuantize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runners)
    if (sub->parsed()) return run();
  return 1;
}
