// KV options as comma-separated lists (bench, perplexity): every option of the
// table (kv_config.h) takes a list; the runs are every combination, each policy
// taking only the options it uses (so `--kv full,sink --kv-size 64,128` runs
// full once).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_config.h"

namespace rotor {

struct KvLists {
  std::array<std::vector<std::string>, kKvOptCount> values;  // by KvOpt; empty = the default
  std::vector<std::string>& operator[](KvOpt o) { return values[static_cast<int>(o)]; }
  const std::vector<std::string>& operator[](KvOpt o) const { return values[static_cast<int>(o)]; }
};
// Every combination, in the table's order (policy outermost); errors name the
// flag (a bad value, or an option no listed policy uses).
Result<std::vector<KvConfig>> ExpandKvLists(const KvLists& lists);

}  // namespace rotor
