#include "tensor/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "base/check.h"

namespace rotor {
namespace {
constexpr std::array<DTypeTraits, 21> kTable = {{
    {DType::kF32, "f32", 1, 4, true},
    {DType::kF16, "f16", 1, 2, true},
    {DType::kQ4_0, "q4_0", 32, 18, true},
    {DType::kQ4_1, "q4_1", 32, 20, true},
    {DType::kQ5_0, "q5_0", 32, 22, true},
    {DType::kQ5_1, "q5_1", 32, 24, true},
    {DType::kQ8_0, "q8_0", 32, 34, true},
    {DType::kQ8_1, "q8_1", 32, 36, false},
    {DType::kQ2_K, "q2_K", 256, 84, true},
    {DType::kQ3_K, "q3_K", 256, 110, true},
    {DType::kQ4_K, "q4_K", 256, 144, true},
    {DType::kQ5_K, "q5_K", 256, 176, true},
    {DType::kQ6_K, "q6_K", 256, 210, true},
    {DType::kQ8_K, "q8_K", 256, 292, false},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {DType::kI8, "i8", 1, 1, false},
    {DType::kI16, "i16", 1, 2, false},
    {DType::kI32, "i32", 1, 4, false},
    {DType::kI64, "i64", 1, 8, false},
    {DType::kF64, "f64", 1, 8, false},
    {DType::kBF16, "bf16", 1, 2, true},
}};
}  // namespace

std::optional<DTypeTraits> LookupDType(uint32_t ggml_id) {
  for (const auto& t : kTable)
    if (static_cast<uint32_t>(t.type) == ggml_id) return t;
  return std::nullopt;
}

const DTypeTraits& Traits(DType t) {
  for (const auto& tr : kTable)
    if (tr.type == t) return tr;
  CHECK_MSG(false, "unknown DType");
}

DType FallbackForRowSize(DType want, int64_t k) {
  DType t = want;
  if (k % Traits(t).block_size != 0) {
    switch (t) {
      case DType::kQ2_K:
      case DType::kQ3_K:
        t = DType::kIQ4_NL;
        break;
      case DType::kQ4_K:
        t = DType::kQ5_0;
        break;
      case DType::kQ5_K:
        t = DType::kQ5_1;
        break;
      case DType::kQ6_K:
        t = DType::kQ8_0;
        break;
      default:
        break;
    }
  }
  if (k % Traits(t).block_size != 0) t = DType::kF16;
  return t;
}

std::optional<DType> ParseDType(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTable) {
    std::string tn(t.name);
    for (char& c : tn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == lower) return t.type;
  }
  return std::nullopt;
}

}  // namespace rotor
