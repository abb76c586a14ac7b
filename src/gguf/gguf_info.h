// Human-readable summary of a GGUF file, for `rotor info`.
#pragma once

#include <cstddef>
#include <string>

#include "gguf/gguf.h"

namespace rotor {

struct InfoOptions {
  size_t max_array_items = 3;    // array items shown before "..."
  size_t max_string_bytes = 64;  // longer strings (chat templates) are cut, full length noted
  bool metadata = true;          // list every key
  bool tensors = true;           // list every tensor (totals are always shown)
};

// Version, alignment, sizes, then every key in file order with its type and
// value (`[32000 x string] "<unk>", "<s>", "</s>", ...`), then the tensor table
// (name, type, shape, bytes) and totals (count, bytes, parameters).
std::string FormatGgufInfo(const GgufFile& file, const InfoOptions& options = {});

// One value as FormatGgufInfo shows it: `"llama"`, `512`, `[3 x i32] 1, 2, 3`.
std::string FormatGgufValue(const GgufValue& value, const InfoOptions& options = {});

}  // namespace rotor
