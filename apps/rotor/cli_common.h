// Pieces shared by the rotor subcommands: option groups, error reporting.
#pragma once

#include <CLI/CLI.hpp>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "kv_args/kv_args.h"

namespace rotor::cli {

// The bundled model, relative to the checkout and to share/rotor/ of an install.
inline constexpr const char* kDefaultModel = "models/stories260K.gguf";

// A file that ships with rotor (the bundled model, the vocabulary of `synth`),
// found from any working directory: `relative` as given when it exists there;
// else beside the binary in a checkout (build/rotor -> models/...); else under
// the install prefix (bin/rotor -> share/rotor/models/...); else in the source
// tree the binary was built from. Returns `relative` when none has it (the
// error then names the path the user would expect).
std::string FindBundledFile(const std::string& relative);
// FindBundledFile(kDefaultModel): the -m default of every command.
std::string DefaultModelPath();

// Prints "rotor: <message>" to stderr and returns the exit code 1.
int Fail(const Status& status);

// -m, -t, -c on a subcommand.
void AddEngineOptions(CLI::App* app, EngineOptions* o);
// llama.cpp's -ngl and -fa, accepted with a note where they do not apply
// (AddEngineOptions adds them).
void AddLlamaCppNotes(CLI::App* app);
// --prefill-step (llama.cpp's -ub / --ubatch-size) and -b / --batch-size,
// which caps it; `help` describes --prefill-step (its 0 differs per command).
void AddPrefillStepOptions(
    CLI::App* app, int* prefill_step,
    std::string_view help = "prompt tokens per forward pass (0 = the whole prompt)");
// llama.cpp's -e / --escape and --no-escape (the last one given wins):
// *escape (default true) says whether ProcessEscapes applies to the prompt,
// the -f text, the system prompt and the stop strings.
void AddEscapeOptions(CLI::App* app, bool* escape);
// llama.cpp's string_process_escapes: \n \r \t \' \" \\ and \xHH (two hex
// digits) become the character; any other backslash stays as written.
std::string ProcessEscapes(std::string_view text);
// A prompt file's text as llama.cpp's -f reads it: one trailing "\n" removed.
std::string WithoutTrailingNewline(std::string text);
// Every option of `app` and its subcommands that takes one value takes the
// last one when repeated (llama.cpp's habit; CLI11 would refuse "-n 8 -n 3").
// Options that take lists (vectors, repeatable --stop) keep every value.
void TakeLastValueEverywhere(CLI::App* app);
// --temp, --top-k, ... on a subcommand (and AddGrammarOptions).
void AddSamplingOptions(CLI::App* app, SamplingParams* p);
// "15043+1" / "2-100" (llama.cpp's --logit-bias): (token id, bias in [-100, 100]).
Result<std::pair<int32_t, float>> ParseLogitBiasFlag(std::string_view v);
// --grammar, --grammar-file, -j/--json-schema, --json-schema-file: parsed at
// once into p->grammar (a parse error is the option's error).
void AddGrammarOptions(CLI::App* app, SamplingParams* p);
// Every option of the KV option table (kv_config.h): --kv, --kv-size, ...
void AddKvOptions(CLI::App* app, KvConfig* kv);

// Every KV option as a comma-separated list (bench, perplexity): KvLists.
void AddKvListOptions(CLI::App* app, KvLists* lists);

// Reads a whole input file: a regular file of at most kMaxInputFileBytes
// (base/file_read.h); the error names the path.
Result<std::string> ReadFile(const std::string& path);

}  // namespace rotor::cli
