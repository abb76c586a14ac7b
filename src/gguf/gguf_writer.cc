#include "gguf/gguf_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace rotor {
namespace {

constexpr int kGgufWriteVersion = 3;
constexpr size_t kMaxTensorName = 63;  // llama.cpp: GGML_MAX_NAME (64) including the NUL

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

// The value's payload without its type id (arrays carry their element type).
void PutValue(std::string* out, const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kString:
      PutString(out, *v.AsString());
      return;
    case GgufType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type()));
      Put<uint64_t>(out, v.size());
      if (v.array_type() == GgufType::kString) {
        for (size_t i = 0; i < v.size(); ++i) PutString(out, v.StringAt(i));
      } else if (v.array_type() == GgufType::kArray) {
        for (const GgufValue& item : v.arrays()) PutValue(out, item);
      } else {
        out->append(v.packed_bytes());
      }
      return;
    default: {
      const uint64_t bits = v.raw_bits();
      out->append(reinterpret_cast<const char*>(&bits), GgufScalarSize(v.type()));
    }
  }
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void GgufWriter::Set(std::string_view key, GgufValue value) {
  for (GgufKv& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(GgufKv{std::string(key), std::move(value)});
}

Status GgufWriter::CopyKey(const GgufFile& src, std::string_view key) {
  const GgufValue* v = src.Find(key);
  if (v == nullptr) return Errorf("gguf writer: key '{}' not found in {}", key, src.path());
  Set(key, *v);
  return Status::Ok();
}

void GgufWriter::CopyMetadata(const GgufFile& src) {
  for (const GgufKv& kv : src.metadata()) Set(kv.key, kv.value);
}

bool GgufWriter::Remove(std::string_view key) {
  for (auto it = kvs_.begin(); it != kvs_.end(); ++it) {
    if (it->key == key) {
      kvs_.erase(it);
      return true;
    }
  }
  return false;
}

const GgufValue* GgufWriter::Find(std::string_view key) const {
  for (const GgufKv& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

Status GgufWriter::Check(std::string_view name, DType type, const std::vector<int64_t>& ne,
                         const void* data, size_t n_bytes) const {
  if (name.empty()) return Errorf("gguf writer: empty tensor name");
  if (name.size() > kMaxTensorName) {
    return Errorf("gguf writer: tensor '{}': name longer than {} bytes", name, kMaxTensorName);
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) return Errorf("gguf writer: tensor '{}': duplicate tensor name", name);
  }
  if (ne.empty() || ne.size() > static_cast<size_t>(kGgufMaxDims)) {
    return Errorf("gguf writer: tensor '{}': n_dims {} out of range (1..{})", name, ne.size(),
                  kGgufMaxDims);
  }
  const DTypeTraits& tr = Traits(type);
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) return Errorf("gguf writer: tensor '{}': ne[{}] = {} < 1", name, d, ne[d]);
    if (__builtin_mul_overflow(n, ne[d], &n)) {
      return Errorf("gguf writer: tensor '{}': element count overflows int64", name);
    }
  }
  if (ne[0] % tr.block_size != 0) {
    return Errorf(
        "gguf writer: tensor '{}': row length {} is not a multiple of the {} block size {}", name,
        ne[0], tr.name, tr.block_size);
  }
  int64_t expect = 0;
  if (__builtin_mul_overflow(n / tr.block_size, tr.type_size, &expect) ||
      static_cast<uint64_t>(expect) != n_bytes) {
    return Errorf("gguf writer: tensor '{}': {} bytes given, shape needs {}", name, n_bytes,
                  expect);
  }
  if (data == nullptr) return Errorf("gguf writer: tensor '{}': no data", name);
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string_view name, DType type, std::vector<int64_t> ne,
                             const void* data, size_t n_bytes) {
  RETURN_IF_ERROR(Check(name, type, ne, data, n_bytes));
  Tensor t{std::string(name), type, std::move(ne), {}, nullptr, n_bytes, {}};
  const auto* p = static_cast<const uint8_t*>(data);
  t.owned.assign(p, p + n_bytes);
  t.data = t.owned.data();
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Status GgufWriter::AddTensorView(std::string_view name, DType type, std::vector<int64_t> ne,
                                 const void* data, size_t n_bytes) {
  RETURN_IF_ERROR(Check(name, type, ne, data, n_bytes));
  tensors_.push_back(Tensor{
      std::string(name), type, std::move(ne), {}, static_cast<const uint8_t*>(data), n_bytes, {}});
  return Status::Ok();
}

Status GgufWriter::AddTensorFilled(std::string_view name, DType type, std::vector<int64_t> ne,
                                   size_t n_bytes, Filler fill) {
  static const uint8_t kNoData = 0;  // Check wants a pointer; the bytes come from fill
  RETURN_IF_ERROR(Check(name, type, ne, &kNoData, n_bytes));
  if (!fill) return Errorf("gguf writer: tensor '{}': no fill function", name);
  Tensor t{std::string(name), type, std::move(ne), {}, nullptr, n_bytes, {}};
  t.fill = std::move(fill);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Result<uint64_t> GgufWriter::Alignment() const {
  const GgufValue* a = Find("general.alignment");
  if (a == nullptr) return kGgufDefaultAlignment;
  if (a->type() != GgufType::kU32) {
    return Errorf("gguf writer: general.alignment has type {}, must be u32",
                  GgufTypeName(a->type()));
  }
  const uint64_t v = *a->AsUint();
  if (v == 0 || (v & (v - 1)) != 0) {
    return Errorf("gguf writer: general.alignment {} is not a nonzero power of two", v);
  }
  return v;
}

Status GgufWriter::Emit(const Sink& sink) const {
  ASSIGN_OR_RETURN(const uint64_t align, Alignment());
  std::string head;
  head.append("GGUF");
  Put<uint32_t>(&head, kGgufWriteVersion);
  Put<uint64_t>(&head, tensors_.size());
  Put<uint64_t>(&head, kvs_.size());
  for (const GgufKv& kv : kvs_) {
    if (kv.key.empty()) return Errorf("gguf writer: empty key");
    PutString(&head, kv.key);
    Put<uint32_t>(&head, static_cast<uint32_t>(kv.value.type()));
    PutValue(&head, kv.value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(&head, t.name);
    Put<uint32_t>(&head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(&head, static_cast<uint64_t>(d));
    Put<uint32_t>(&head, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&head, offset);
    offset = AlignUp(offset + t.n_bytes, align);
  }
  head.resize(AlignUp(head.size(), align), '\0');
  RETURN_IF_ERROR(sink(head.data(), head.size()));
  const std::string zeros(align, '\0');
  std::vector<uint8_t> filled;  // [n_bytes] of the current AddTensorFilled tensor
  for (const Tensor& t : tensors_) {
    const uint8_t* data = t.data;
    if (t.fill) {
      if (filled.size() < t.n_bytes) filled = std::vector<uint8_t>(t.n_bytes);
      RETURN_IF_ERROR(t.fill(filled.data()));
      data = filled.data();
    }
    RETURN_IF_ERROR(sink(data, t.n_bytes));
    const size_t pad = AlignUp(t.n_bytes, align) - t.n_bytes;
    if (pad > 0) RETURN_IF_ERROR(sink(zeros.data(), pad));
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> GgufWriter::WriteToBytes() const {
  std::vector<uint8_t> out;
  RETURN_IF_ERROR(Emit([&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return Status::Ok();
  }));
  return out;
}

Status GgufWriter::Write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Errorf("gguf writer: {}: cannot create: {}", tmp, std::strerror(errno));
  Status s = Emit([&](const void* p, size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, f) != n) {
      return Errorf("gguf writer: {}: write failed: {}", tmp, std::strerror(errno));
    }
    return Status::Ok();
  });
  if (std::fclose(f) != 0 && s.ok()) {
    s = Errorf("gguf writer: {}: close failed: {}", tmp, std::strerror(errno));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errorf("gguf writer: {}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace rotor
