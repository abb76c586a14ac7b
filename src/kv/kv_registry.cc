// The registered KV policies, in display order. Registering a policy is one
// line here (its KvPolicyInfo is defined in its own file).
#include "kv/kv_policy.h"

namespace rotor {

std::span<const KvPolicyInfo* const> KvPolicyRegistry() {
  static const KvPolicyInfo* const kAll[] = {
      &kFullPolicy, &kSinkPolicy, &kWindowPolicy, &kH2oPolicy, &kSnapKvPolicy, &kTovaPolicy,
  };
  return kAll;
}

const KvPolicyInfo* FindKvPolicy(std::string_view name) {
  for (const KvPolicyInfo* p : KvPolicyRegistry())
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace rotor
