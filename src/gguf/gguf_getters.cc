// Typed metadata getters of GgufFile.
#include <limits>

#include "gguf/gguf.h"

namespace rotor {
namespace {

std::string TypeDesc(const GgufValue& v) {
  if (!v.is_array()) return std::string(GgufTypeName(v.type()));
  return fmt::format("array of {}", GgufTypeName(v.array_type()));
}

}  // namespace

Result<const GgufValue*> GgufFile::Require(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Errorf("gguf: {}: key '{}' not found", path_, key);
  return v;
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (!GgufIsInteger(v->type())) {
    return Errorf("gguf: {}: key '{}' has type {}, expected an integer", path_, key, TypeDesc(*v));
  }
  std::optional<int64_t> i = v->AsInt();
  if (!i)
    return Errorf("gguf: {}: key '{}': value {} out of int64 range", path_, key, *v->AsUint());
  return *i;
}

Result<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t def) const {
  if (!Has(key)) return def;
  return GetInt(key);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<double> d = v->AsFloat();
  if (!d) {
    return Errorf("gguf: {}: key '{}' has type {}, expected a number", path_, key, TypeDesc(*v));
  }
  return *d;
}

Result<double> GgufFile::GetFloatOr(std::string_view key, double def) const {
  if (!Has(key)) return def;
  return GetFloat(key);
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<bool> b = v->AsBool();
  if (!b) return Errorf("gguf: {}: key '{}' has type {}, expected bool", path_, key, TypeDesc(*v));
  return *b;
}

Result<bool> GgufFile::GetBoolOr(std::string_view key, bool def) const {
  if (!Has(key)) return def;
  return GetBool(key);
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<std::string_view> s = v->AsString();
  if (!s) {
    return Errorf("gguf: {}: key '{}' has type {}, expected string", path_, key, TypeDesc(*v));
  }
  return std::string(*s);
}

Result<std::string> GgufFile::GetStringOr(std::string_view key, std::string def) const {
  if (!Has(key)) return def;
  return GetString(key);
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (!v->is_array() || v->array_type() != GgufType::kString) {
    return Errorf("gguf: {}: key '{}' has type {}, expected array of string", path_, key,
                  TypeDesc(*v));
  }
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) out.emplace_back(v->StringAt(i));
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (!v->is_array() || !GgufIsFloat(v->array_type())) {
    return Errorf("gguf: {}: key '{}' has type {}, expected array of f32 or f64", path_, key,
                  TypeDesc(*v));
  }
  std::vector<float> out(v->size());
  if (v->array_type() == GgufType::kF32) {
    std::string_view raw = v->packed_bytes();
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v->FloatAt(i));
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (!v->is_array() || !GgufIsInteger(v->array_type())) {
    return Errorf("gguf: {}: key '{}' has type {}, expected array of integers", path_, key,
                  TypeDesc(*v));
  }
  std::vector<int64_t> out(v->size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (v->array_type() == GgufType::kU64 &&
        v->UintAt(i) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Errorf("gguf: {}: key '{}': item {} = {} out of int64 range", path_, key, i,
                    v->UintAt(i));
    }
    out[i] = v->IntAt(i);
  }
  return out;
}

}  // namespace rotor
