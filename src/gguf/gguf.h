// GGUF (v2, v3, little-endian) reader: the file is mmap'd read-only and fully
// validated on open; tensors point into the mapping.
//
// Layout: "GGUF" u32 version, u64 tensor_count, u64 kv_count, kvs (string key,
// u32 value type, value), tensor infos (string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml type, u64 offset), padding to general.alignment, tensor data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace rotor {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u32", "string", "array", ...; "type(N)" for ids outside the enum.
std::string_view GgufTypeName(GgufType t);
// Bytes of a fixed-size scalar type; 0 for string and array.
size_t GgufScalarSize(GgufType t);
bool GgufIsInteger(GgufType t);
bool GgufIsFloat(GgufType t);

inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
inline constexpr int kGgufMaxArrayDepth = 8;

// One metadata value: a scalar, a string, or an array (element type + items).
// Arrays store their items compactly: numbers as packed little-endian bytes,
// strings as one blob plus offsets, nested arrays as a vector of GgufValue.
class GgufValue {
 public:
  GgufValue() = default;  // u8 0

  // Scalars. The C++ type picks the GGUF type (uint32_t -> u32, float -> f32, ...).
  template <typename T>
  requires std::is_arithmetic_v<T>
  static GgufValue Of(T v);
  static GgufValue Of(std::string_view s);
  static GgufValue Of(const char* s) { return Of(std::string_view(s)); }
  static GgufValue Of(const std::string& s) { return Of(std::string_view(s)); }

  // Arrays of numbers / bools, of strings, of arrays (each item must be an array).
  template <typename T>
  requires std::is_arithmetic_v<T>
  static GgufValue ArrayOf(std::span<const T> items);
  template <typename T>
  requires std::is_arithmetic_v<T>
  static GgufValue ArrayOf(const std::vector<T>& items) {
    return ArrayOf(std::span<const T>(items.data(), items.size()));
  }
  static GgufValue StringArray(std::span<const std::string> items);
  static GgufValue StringArray(std::span<const std::string_view> items);
  static GgufValue ArrayOfArrays(std::vector<GgufValue> items);
  // An array of `count` numbers of type `elem` packed little-endian in `bytes`
  // (count * GgufScalarSize(elem) bytes). Used by the reader.
  static GgufValue PackedArray(GgufType elem, std::string bytes);

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  GgufType array_type() const { return elem_type_; }  // arrays only
  size_t size() const { return count_; }              // arrays: item count

  // Scalar accessors; nullopt if the value is not of a fitting type.
  std::optional<int64_t> AsInt() const;              // any integer type that fits int64
  std::optional<uint64_t> AsUint() const;            // any non-negative integer
  std::optional<double> AsFloat() const;             // f32, f64 or any integer
  std::optional<bool> AsBool() const;                // bool only
  std::optional<std::string_view> AsString() const;  // string only
  // Scalars other than string: the little-endian bits, zero-extended.
  uint64_t raw_bits() const { return bits_; }

  // Array item accessors; i < size(), and the element type must fit (CHECKed).
  std::string_view StringAt(size_t i) const;  // string arrays
  int64_t IntAt(size_t i) const;              // integer and bool arrays (u64 wraps)
  uint64_t UintAt(size_t i) const;            // integer and bool arrays (raw bits zero-extended)
  double FloatAt(size_t i) const;             // numeric arrays
  bool BoolAt(size_t i) const;                // bool arrays
  const GgufValue& ArrayAt(size_t i) const;   // arrays of arrays
  const std::vector<GgufValue>& arrays() const { return items_; }
  // Packed little-endian items of a numeric/bool array (count * scalar size bytes).
  std::string_view packed_bytes() const;

  friend bool operator==(const GgufValue& a, const GgufValue& b);

 private:
  static GgufValue Scalar(GgufType t, uint64_t bits);
  template <typename T>
  static constexpr GgufType TypeOf();

  GgufType type_ = GgufType::kU8;
  GgufType elem_type_ = GgufType::kU8;
  uint64_t bits_ = 0;  // scalar value, zero-extended raw little-endian bits
  size_t count_ = 0;
  std::string bytes_;              // string value; packed numbers; string-array blob
  std::vector<uint64_t> offsets_;  // string arrays: count_ + 1 offsets into bytes_
  std::vector<GgufValue> items_;   // arrays of arrays
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the contiguous row length
  int64_t n_elements = 0;
  uint64_t offset = 0;  // offset within the data section
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mmap
  int64_t rows() const { return ne.empty() || ne[0] == 0 ? 0 : n_elements / ne[0]; }
};

// How Open holds the file's bytes.
struct GgufOpenOptions {
  // false: read into anonymous memory instead of mapping the file (llama.cpp's
  // --no-mmap: no page faults into the file later, the whole file resident).
  bool mmap = true;
  // mlock(2) the bytes so they are never paged out (llama.cpp's --mlock). A
  // failure (RLIMIT_MEMLOCK) is a warning on the log, as in llama.cpp.
  bool mlock = false;
};

class GgufFile {
 public:
  // mmap'd read-only (MAP_PRIVATE); the mapping lives as long as the GgufFile.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                const GgufOpenOptions& options = {});
  // For tests and fuzzing: parses (and owns) the bytes.
  static Result<std::unique_ptr<GgufFile>> FromBytes(std::vector<uint8_t> bytes,
                                                     std::string name = "<memory>");
  // Parses bytes the caller owns, without a copy: they must stay unchanged
  // and alive as long as the GgufFile (and anything made from it, a Model
  // included), and start at a multiple of kViewAlignment (an error
  // otherwise). A model already in memory, a fuzzer's input.
  static constexpr size_t kViewAlignment = 16;
  static Result<std::unique_ptr<GgufFile>> FromView(std::span<const uint8_t> bytes,
                                                    std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  bool mapped() const { return map_ != nullptr && !anonymous_; }
  bool locked() const { return locked_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  const uint8_t* bytes() const { return base_; }         // the whole file

  size_t metadata_count() const { return kvs_.size(); }
  const std::vector<GgufKv>& metadata() const { return kvs_; }  // file order
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  const GgufValue* Find(std::string_view key) const;

  Result<int64_t> GetInt(std::string_view key) const;  // any integer type
  Result<int64_t> GetIntOr(std::string_view key, int64_t def) const;
  Result<double> GetFloat(std::string_view key) const;  // f32, f64 or integer
  Result<double> GetFloatOr(std::string_view key, double def) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<bool> GetBoolOr(std::string_view key, bool def) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::string> GetStringOr(std::string_view key, std::string def) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;  // f32/f64 arrays
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;  // integer arrays

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // Drops the mapping's pages under [p, p + n) from memory (a mapped Open only;
  // a no-op for FromBytes and --no-mmap); a later read faults them back in from the file. Lets a
  // pass over every tensor (rotor quantize) stay near one tensor of memory.
  void ReleasePages(const uint8_t* p, size_t n) const;
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  class Parser;
  GgufFile() = default;
  Status Parse();
  Status Where(const Status& s) const;  // prefixes "gguf: PATH: "
  Result<const GgufValue*> Require(std::string_view key) const;

  std::string path_;
  std::vector<uint8_t> owned_;  // FromBytes (FromView: empty, base_ the caller's)
  void* map_ = nullptr;         // Open
  size_t map_size_ = 0;
  bool anonymous_ = false;      // Open without mmap: the bytes were read in
  bool locked_ = false;         // mlock'd
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// ---- template definitions ----

template <typename T>
constexpr GgufType GgufValue::TypeOf() {
  if constexpr (std::is_same_v<T, bool>)
    return GgufType::kBool;
  else if constexpr (std::is_same_v<T, float>)
    return GgufType::kF32;
  else if constexpr (std::is_same_v<T, double>)
    return GgufType::kF64;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
    return std::is_signed_v<T> ? GgufType::kI8 : GgufType::kU8;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 2)
    return std::is_signed_v<T> ? GgufType::kI16 : GgufType::kU16;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
    return std::is_signed_v<T> ? GgufType::kI32 : GgufType::kU32;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
    return std::is_signed_v<T> ? GgufType::kI64 : GgufType::kU64;
  else
    static_assert(sizeof(T) == 0, "no GGUF type for this C++ type");
}

template <typename T>
requires std::is_arithmetic_v<T> GgufValue GgufValue::Of(T v) {
  constexpr GgufType t = TypeOf<T>();
  uint64_t bits = 0;
  if constexpr (std::is_same_v<T, bool>) {
    bits = v ? 1 : 0;
  } else {
    static_assert(sizeof(T) <= 8);
    std::memcpy(&bits, &v, sizeof(T));  // little-endian host
  }
  return Scalar(t, bits);
}

template <typename T>
requires std::is_arithmetic_v<T> GgufValue GgufValue::ArrayOf(std::span<const T> items) {
  constexpr GgufType t = TypeOf<T>();
  std::string bytes(items.size() * sizeof(T), '\0');
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < items.size(); ++i) bytes[i] = items[i] ? 1 : 0;
  } else if (!items.empty()) {
    std::memcpy(bytes.data(), items.data(), bytes.size());
  }
  return PackedArray(t, std::move(bytes));
}

}  // namespace rotor
