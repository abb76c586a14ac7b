// The rotor subcommands. Each Register* adds its CLI11 subcommand; the run
// function returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace rotor::cli {

using Runner = std::function<int()>;

Runner RegisterGenerate(CLI::App& app);
Runner RegisterTokenize(CLI::App& app);
Runner RegisterDetokenize(CLI::App& app);
Runner RegisterInfo(CLI::App& app);
Runner RegisterSynth(CLI::App& app);
Runner RegisterBench(CLI::App& app);
Runner RegisterServe(CLI::App& app);
Runner RegisterPerplexity(CLI::App& app);
Runner RegisterChat(CLI::App& app);
Runner RegisterQuantize(CLI::App& app);

}  // namespace rotor::cli
