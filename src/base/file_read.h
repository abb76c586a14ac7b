// Reading a whole input file (a prompt, a prompts list, a chat template, a
// grammar) without trusting it: it must be a regular file (not /dev/zero, a
// pipe or a directory) and at most `max_bytes` long, checked before anything
// proportional to it is allocated and again while reading (a file that grows
// under us stops at the bound).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace rotor {

// The bound of the command line's input files: far above any prompt or
// template, far below the memory of a machine that runs a model.
inline constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;

// The file's bytes; the error names the path and says why (missing, not a
// regular file, larger than max_bytes, a read error).
Result<std::string> ReadInputFile(const std::string& path, int64_t max_bytes = kMaxInputFileBytes);

}  // namespace rotor
