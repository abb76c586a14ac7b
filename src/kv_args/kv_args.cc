#include "kv_args/kv_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace rotor::cli {

bool IsKvField(std::string_view key) {
  for (const KvOptionSpec& spec : KvOptions())
    if (spec.field == key) return true;
  return false;
}

Status SetKvFields(const nlohmann::json& j, KvConfig* kv, std::string* field) {
  for (const KvOptionSpec& spec : KvOptions()) {
    auto it = j.find(std::string(spec.field));
    if (it == j.end() || it->is_null()) continue;
    if (field != nullptr) *field = std::string(spec.field);
    if (spec.is_int) {
      if (!it->is_number_integer())
        return Errorf("kv: {} must be an integer, not {}", spec.field, it->dump());
      RETURN_IF_ERROR(kv->SetInt(spec.id, it->get<int64_t>(), KvSpelling::kField));
    } else {
      if (!it->is_string())
        return Errorf("kv: {} must be a string ({}), not {}", spec.field, KvChoicesText(spec.id),
                      it->dump());
      RETURN_IF_ERROR(kv->Set(spec.id, it->get<std::string>(), KvSpelling::kField));
    }
  }
  if (field != nullptr) field->clear();
  return Status::Ok();
}

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

}  // namespace rotor::cli
