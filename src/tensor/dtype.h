// Element types with their GGML ids and block layouts (GGUF tensor types).
// Quantized types store rows as blocks of `block_size` elements; a row of n
// elements takes n / block_size * type_size bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rotor {

// Values are the GGML type ids stored in GGUF files.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct DTypeTraits {
  DType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q8_0", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
  bool supported;         // rotor's kernels can read it
};

// Traits of a GGML type id, or nullopt for an id rotor does not know.
std::optional<DTypeTraits> LookupDType(uint32_t ggml_id);
const DTypeTraits& Traits(DType t);
inline std::string_view DTypeName(DType t) { return Traits(t).name; }
// Parses "f32", "F16", "q4_0", ...; nullopt if unknown.
std::optional<DType> ParseDType(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline int64_t RowBytes(DType t, int64_t n) {
  const DTypeTraits& tr = Traits(t);
  return n / tr.block_size * tr.type_size;
}

// GGML block layouts (little-endian, packed). d is an IEEE half.
inline constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;          // scale
  int8_t qs[kQK8_0];   // x[i] = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);

inline constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;               // scale
  uint8_t qs[kQK4_0 / 2];   // x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8)
};
static_assert(sizeof(BlockQ4_0) == 18);

}  // namespace rotor
