// KV options as lists and in JSON objects (`--prompts` lines, server requests): the field
// names and values of the KV option table (kv_config.h), so every JSON caller
// accepts the same fields and words errors the same way.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"

namespace rotor::cli {

// True for "kv", "kv_size", ... (every field of the option table).
bool IsKvField(std::string_view key);
// Sets every KV option present in `j`, in the table's order (the policy
// first); integers must be JSON integers, choices JSON strings. The error
// names the field: "kv: kv_size -3 is out of range [0, 16777216]".
// `*field` (if given) receives the name of the field that failed.
Status SetKvFields(const nlohmann::json& j, KvConfig* kv, std::string* field = nullptr);

// KV options as comma-separated lists (bench, perplexity): every option of the
// table takes a list; the runs are every combination, each policy taking only
// the options it uses (so `--kv full,sink --kv-size 64,128` runs full once).
struct KvLists {
  std::array<std::vector<std::string>, kKvOptCount> values;  // by KvOpt; empty = the default
  std::vector<std::string>& operator[](KvOpt o) { return values[static_cast<int>(o)]; }
  const std::vector<std::string>& operator[](KvOpt o) const { return values[static_cast<int>(o)]; }
};
// Every combination, in the table's order (policy outermost); errors name the
// flag (a bad value, or an option no listed policy uses).
Result<std::vector<KvConfig>> ExpandKvLists(const KvLists& lists);

}  // namespace rotor::cli
