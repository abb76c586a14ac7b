// GgufValue: scalars, strings and compact arrays.
#include <bit>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "gguf/gguf.h"

namespace rotor {

static_assert(std::endian::native == std::endian::little,
              "rotor's GGUF code assumes a little-endian host");

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "type(?)";
}

size_t GgufScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool GgufIsInteger(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufIsFloat(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

namespace {

bool IsSigned(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

// Sign-extends the raw zero-extended bits of a signed type of `size` bytes.
int64_t SignExtend(uint64_t bits, size_t size) {
  if (size >= 8) return static_cast<int64_t>(bits);
  const int shift = static_cast<int>(64 - 8 * size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

double BitsToDouble(GgufType t, uint64_t bits) {
  if (t == GgufType::kF32) {
    float f;
    uint32_t u = static_cast<uint32_t>(bits);
    std::memcpy(&f, &u, 4);
    return f;
  }
  if (t == GgufType::kF64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (IsSigned(t)) return static_cast<double>(SignExtend(bits, GgufScalarSize(t)));
  return static_cast<double>(bits);
}

}  // namespace

GgufValue GgufValue::Scalar(GgufType t, uint64_t bits) {
  GgufValue v;
  v.type_ = t;
  v.bits_ = bits;
  return v;
}

GgufValue GgufValue::Of(std::string_view s) {
  GgufValue v;
  v.type_ = GgufType::kString;
  v.bytes_.assign(s);
  return v;
}

GgufValue GgufValue::PackedArray(GgufType elem, std::string bytes) {
  const size_t size = GgufScalarSize(elem);
  CHECK_MSG(size > 0 && bytes.size() % size == 0, "PackedArray needs a numeric element type");
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = elem;
  v.count_ = bytes.size() / size;
  v.bytes_ = std::move(bytes);
  return v;
}

GgufValue GgufValue::StringArray(std::span<const std::string> items) {
  std::vector<std::string_view> views(items.begin(), items.end());
  return StringArray(std::span<const std::string_view>(views));
}

GgufValue GgufValue::StringArray(std::span<const std::string_view> items) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = GgufType::kString;
  v.count_ = items.size();
  size_t total = 0;
  for (std::string_view s : items) total += s.size();
  v.bytes_.reserve(total);
  v.offsets_.reserve(items.size() + 1);
  v.offsets_.push_back(0);
  for (std::string_view s : items) {
    v.bytes_.append(s);
    v.offsets_.push_back(v.bytes_.size());
  }
  return v;
}

GgufValue GgufValue::ArrayOfArrays(std::vector<GgufValue> items) {
  for (const GgufValue& item : items)
    CHECK_MSG(item.is_array(), "ArrayOfArrays items must be arrays");
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = GgufType::kArray;
  v.count_ = items.size();
  v.items_ = std::move(items);
  return v;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (!GgufIsInteger(type_)) return std::nullopt;
  if (IsSigned(type_)) return SignExtend(bits_, GgufScalarSize(type_));
  if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(bits_);
}

std::optional<uint64_t> GgufValue::AsUint() const {
  if (!GgufIsInteger(type_)) return std::nullopt;
  if (IsSigned(type_)) {
    int64_t v = SignExtend(bits_, GgufScalarSize(type_));
    if (v < 0) return std::nullopt;
    return static_cast<uint64_t>(v);
  }
  return bits_;
}

std::optional<double> GgufValue::AsFloat() const {
  if (!GgufIsInteger(type_) && !GgufIsFloat(type_)) return std::nullopt;
  return BitsToDouble(type_, bits_);
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return bits_ != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return std::string_view(bytes_);
}

std::string_view GgufValue::StringAt(size_t i) const {
  CHECK(is_array() && elem_type_ == GgufType::kString && i < count_);
  return std::string_view(bytes_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

uint64_t GgufValue::UintAt(size_t i) const {
  const size_t size = GgufScalarSize(elem_type_);
  CHECK(is_array() && (GgufIsInteger(elem_type_) || elem_type_ == GgufType::kBool) && i < count_);
  uint64_t bits = 0;
  std::memcpy(&bits, bytes_.data() + i * size, size);
  return bits;
}

int64_t GgufValue::IntAt(size_t i) const {
  uint64_t bits = UintAt(i);
  return IsSigned(elem_type_) ? SignExtend(bits, GgufScalarSize(elem_type_))
                              : static_cast<int64_t>(bits);
}

double GgufValue::FloatAt(size_t i) const {
  const size_t size = GgufScalarSize(elem_type_);
  CHECK(is_array() && size > 0 && i < count_);
  uint64_t bits = 0;
  std::memcpy(&bits, bytes_.data() + i * size, size);
  return BitsToDouble(elem_type_, bits);
}

bool GgufValue::BoolAt(size_t i) const {
  CHECK(is_array() && elem_type_ == GgufType::kBool && i < count_);
  return bytes_[i] != 0;
}

const GgufValue& GgufValue::ArrayAt(size_t i) const {
  CHECK(is_array() && elem_type_ == GgufType::kArray && i < count_);
  return items_[i];
}

std::string_view GgufValue::packed_bytes() const {
  CHECK(is_array() && GgufScalarSize(elem_type_) > 0);
  return bytes_;
}

bool operator==(const GgufValue& a, const GgufValue& b) {
  if (a.type_ != b.type_) return false;
  if (a.type_ == GgufType::kString) return a.bytes_ == b.bytes_;
  if (a.type_ != GgufType::kArray) return a.bits_ == b.bits_;
  if (a.elem_type_ != b.elem_type_ || a.count_ != b.count_) return false;
  if (a.elem_type_ == GgufType::kArray) return a.items_ == b.items_;
  if (a.elem_type_ == GgufType::kString) return a.bytes_ == b.bytes_ && a.offsets_ == b.offsets_;
  return a.bytes_ == b.bytes_;
}

}  // namespace rotor
