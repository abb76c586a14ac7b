// rotor: run Llama-family GGUF models on the CPU.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

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
  // llama.cpp's -ctk / -ctv (CLI11 takes one letter after a single dash):
  // their long spellings, which every command with --kv-type-k/-v accepts.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    for (auto [s, l] : {std::pair<std::string_view, std::string_view>{"-ctk", "--cache-type-k"},
                        {"-ctv", "--cache-type-v"}}) {
      if (args[i] == s) args[i] = l;
      else if (args[i].starts_with(std::string(s) + "=")) args[i] = std::string(l) + args[i].substr(s.size());
    }
  }
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  try {
    app.parse(static_cast<int>(argp.size()), argp.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runners)
    if (sub->parsed()) return run();
  return 1;
}
