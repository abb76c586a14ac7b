// KV options in JSON objects (`--prompts` lines, server requests): the field
// names and values of the KV option table (kv_config.h), so every JSON caller
// accepts the same fields and words errors the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"
#include "kv/kv_lists.h"  // KvLists: the list form, for bench and perplexity

namespace rotor::cli {

// True for "kv", "kv_size", ... (every field of the option table).
bool IsKvField(std::string_view key);
// Sets every KV option present in `j`, in the table's order (the policy
// first); integers must be JSON integers, choices JSON strings. The error
// names the field: "kv: kv_size -3 is out of range [0, 16777216]".
// `*field` (if given) receives the name of the field that failed.
Status SetKvFields(const nlohmann::json& j, KvConfig* kv, std::string* field = nullptr);

}  // namespace rotor::cli
