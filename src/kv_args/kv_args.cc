#include "kv_args/kv_args.h"

#include <fmt/format.h>

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

}  // namespace rotor::cli
