#pragma once

#include <string>

#include "engine/engine.h"

namespace rotor::cli {

int RunGenerateBatch(const EngineOptions& engine_options, const GenerateOptions& defaults,
                     const std::string& prompts_file, int parallel, int prefill_step);

}  // namespace rotor::cli
