// Pieces shared by the rotor subcommands: option groups, error reporting.
#pragma once

#include <CLI/CLI.hpp>

#include <array>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "kv_args.h"

namespace rotor::cli {

// Where the bundled model lives relative to the working directory (make run).
inline constexpr const char* kDefaultModel = "models/stories260K.gguf";

// Prints "rotor: <message>" to stderr and returns the exit code 1.
int Fail(const Status& status);

// -m, -t, -c on a subcommand.
void AddEngineOptions(CLI::App* app, EngineOptions* o);
// llama.cpp's -ngl and -fa, accepted with a note where they do not apply
// (AddEngineOptions adds them).
void AddLlamaCppNotes(CLI::App* app);
// --prefill-step (llama.cpp's -ub) and -b / --batch-size, which caps it.
void AddPrefillStepOptions(CLI::App* app, int* prefill_step);
// --temp, --top-k, ... on a subcommand.
void AddSamplingOptions(CLI::App* app, SamplingParams* p);
// Every option of the KV option table (kv_config.h): --kv, --kv-size, ...
void AddKvOptions(CLI::App* app, KvConfig* kv);

// Every KV option as a comma-separated list (bench, perplexity): KvLists.
void AddKvListOptions(CLI::App* app, KvLists* lists);

// Reads a whole file; error names the path.
Result<std::string> ReadFile(const std::string& path);

std::string HumanBytes(int64_t bytes);

}  // namespace rotor::cli
