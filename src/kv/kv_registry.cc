// The registered KV policies, in display order. Registering a policy is its
// name here, twice: declared, then listed (its KvPolicyInfo is defined in its
// own file).
#include "kv/kv_policy.h"

namespace rotor {

// Defined in each policy's own file.
extern const KvPolicyInfo kFullPolicy, kSinkPolicy, kWindowPolicy, kH2oPolicy, kSnapKvPolicy,
    kTovaPolicy;

std::span<const KvPolicyInfo* const> KvPolicyRegistry() {
  static const KvPolicyInfo* const kAll[] = {
      &kFullPolicy, &kSinkPolicy, &kWindowPolicy, &kH2oPolicy, &kSnapKvPolicy, &kTovaPolicy,
  };
  return kAll;
}

// By default a policy keeps whatever it is left with (the full cache).
Status KvPolicy::CanDrop(const KvCells&, TextIndex, TextIndex, TextIndex) const {
  return Status::Ok();
}
Status KvPolicy::CanShift(TextIndex, TextIndex, TextIndex) const { return Status::Ok(); }

const KvPolicyInfo* FindKvPolicy(std::string_view name) {
  for (const KvPolicyInfo* p : KvPolicyRegistry())
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace rotor
