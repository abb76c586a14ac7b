// The command line as llama.cpp users type it. CLI11 reads a single-dash word
// as short options ("-ngl 99" is "-n gl 99"), so before it parses, each
// word after the subcommand is checked against the subcommand's options:
//   - a llama.cpp spelling (-ngl, -fa, -cnv, -sys, -ub, ...) becomes the long
//     option it stands for, when the subcommand has that option;
//   - "-word" becomes "--word" when the subcommand has "--word" (-temp);
//   - a short option with its value attached (-n128, -t2) stays;
//   - anything else is an error naming the word and the nearest options
//     ("unknown option '-ngx' (did you mean -ngl?)"), and so is an unknown
//     "--word". Values of options are left alone, as is everything after "--".
// Also: --version prints the version; -v / --verbose turns on debug logging;
// `generate -cnv` (or -sys) is llama-cli's conversation mode: `rotor chat`,
// with -p as the system prompt.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rotor::cli {

struct CompatArgs {
  std::vector<std::string> args;     // argv[1..], rewritten
  std::vector<std::string> notes;    // one line each, for stderr
  std::optional<std::string> error;  // the command line cannot be right
  bool version = false;              // --version: print it and exit
  bool verbose = false;              // -v / --verbose
};

// `args` is argv[1..]. `app` has every subcommand registered.
CompatArgs RewriteArgs(CLI::App& app, std::vector<std::string> args);

// "rotor 0.1.0 (git abc1234)\nbuilt with GCC 12.2.0 for x86_64 (Release)\n".
std::string VersionText();

// Edit distance (insertions, deletions, substitutions, swaps of neighbours).
int EditDistance(std::string_view a, std::string_view b);

}  // namespace rotor::cli
