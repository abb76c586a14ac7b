#include "kv/kv_lists.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace rotor {

Result<std::vector<KvConfig>> ExpandKvLists(const KvLists& lists) {
  std::vector<std::string> policies = lists[KvOpt::kPolicy];
  if (policies.empty()) policies = {KvConfig{}.policy};
  for (const KvOptionSpec& spec : KvOptions()) {
    if (spec.id == KvOpt::kPolicy || lists[spec.id].empty()) continue;
    const bool used = std::any_of(policies.begin(), policies.end(),
                                  [&](const std::string& p) { return KvPolicyUses(p, spec.id); });
    if (!used)
      return Errorf("kv: {} is not used by {} {}", spec.flag, KvOption(KvOpt::kPolicy).flag,
                    fmt::join(policies, ","));
  }
  std::vector<KvConfig> out;
  for (const std::string& policy : policies) {
    KvConfig base;
    RETURN_IF_ERROR(base.Set(KvOpt::kPolicy, policy));
    std::vector<KvConfig> partial = {base};
    for (const KvOptionSpec& spec : KvOptions()) {
      if (spec.id == KvOpt::kPolicy || lists[spec.id].empty()) continue;
      if (!KvPolicyUses(policy, spec.id)) continue;
      std::vector<KvConfig> next;
      for (const KvConfig& c : partial)
        for (const std::string& v : lists[spec.id]) {
          KvConfig d = c;
          RETURN_IF_ERROR(d.Set(spec.id, v));
          next.push_back(d);
        }
      partial = std::move(next);
    }
    out.insert(out.end(), partial.begin(), partial.end());
  }
  return out;
}

}  // namespace rotor
