// GGUF v3 writer (little-endian), for `rotor synth`, tools and tests.
//
//   GgufWriter w;
//   w.SetString("general.architecture", "llama");
//   w.SetU32("llama.block_count", 5);
//   w.Set("tokenizer.ggml.tokens", *src.Find("tokenizer.ggml.tokens"));  // copy from a reader
//   RETURN_IF_ERROR(w.AddTensor("token_embd.weight", DType::kF32, {64, 512}, data, bytes));
//   RETURN_IF_ERROR(w.Write("out.gguf"));
//
// Keys are written in the order they were first set; tensors in the order added,
// each at an offset aligned to general.alignment (default 32; set it with SetU32),
// with zero padding between and after them, as llama.cpp and gguf-py expect.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace rotor {

class GgufWriter {
 public:
  // Sets a key; a key set before keeps its position and gets the new value.
  void Set(std::string_view key, GgufValue value);
  void SetU8(std::string_view key, uint8_t v) { Set(key, GgufValue::Of(v)); }
  void SetI8(std::string_view key, int8_t v) { Set(key, GgufValue::Of(v)); }
  void SetU16(std::string_view key, uint16_t v) { Set(key, GgufValue::Of(v)); }
  void SetI16(std::string_view key, int16_t v) { Set(key, GgufValue::Of(v)); }
  void SetU32(std::string_view key, uint32_t v) { Set(key, GgufValue::Of(v)); }
  void SetI32(std::string_view key, int32_t v) { Set(key, GgufValue::Of(v)); }
  void SetU64(std::string_view key, uint64_t v) { Set(key, GgufValue::Of(v)); }
  void SetI64(std::string_view key, int64_t v) { Set(key, GgufValue::Of(v)); }
  void SetF32(std::string_view key, float v) { Set(key, GgufValue::Of(v)); }
  void SetF64(std::string_view key, double v) { Set(key, GgufValue::Of(v)); }
  void SetBool(std::string_view key, bool v) { Set(key, GgufValue::Of(v)); }
  void SetString(std::string_view key, std::string_view v) { Set(key, GgufValue::Of(v)); }

  void SetStringArray(std::string_view key, std::span<const std::string> v) {
    Set(key, GgufValue::StringArray(v));
  }
  void SetU8Array(std::string_view key, std::span<const uint8_t> v) { SetArray(key, v); }
  void SetI8Array(std::string_view key, std::span<const int8_t> v) { SetArray(key, v); }
  void SetU16Array(std::string_view key, std::span<const uint16_t> v) { SetArray(key, v); }
  void SetI16Array(std::string_view key, std::span<const int16_t> v) { SetArray(key, v); }
  void SetU32Array(std::string_view key, std::span<const uint32_t> v) { SetArray(key, v); }
  void SetI32Array(std::string_view key, std::span<const int32_t> v) { SetArray(key, v); }
  void SetU64Array(std::string_view key, std::span<const uint64_t> v) { SetArray(key, v); }
  void SetI64Array(std::string_view key, std::span<const int64_t> v) { SetArray(key, v); }
  void SetF32Array(std::string_view key, std::span<const float> v) { SetArray(key, v); }
  void SetF64Array(std::string_view key, std::span<const double> v) { SetArray(key, v); }
  void SetBoolArray(std::string_view key, std::span<const bool> v) { SetArray(key, v); }

  // Copies one key (error if missing) or every key of a reader, in file order.
  Status CopyKey(const GgufFile& src, std::string_view key);
  void CopyMetadata(const GgufFile& src);

  bool Remove(std::string_view key);
  const GgufValue* Find(std::string_view key) const;
  const std::vector<GgufKv>& metadata() const { return kvs_; }

  // Adds a tensor; `data` holds n_bytes = RowBytes(type, ne[0]) * rows bytes.
  // AddTensor copies the bytes; AddTensorView borrows them (they must stay
  // valid until Write returns), for models too large to hold twice.
  // Errors: empty or duplicate name, name of 64+ bytes (llama.cpp's limit),
  // 0 or more than 4 dims, a dimension < 1, a row length that is not a multiple
  // of the block size, n_bytes that does not match the shape.
  Status AddTensor(std::string_view name, DType type, std::vector<int64_t> ne, const void* data,
                   size_t n_bytes);
  Status AddTensorView(std::string_view name, DType type, std::vector<int64_t> ne, const void* data,
                       size_t n_bytes);
  // Adds a tensor whose bytes are produced while Write runs, in tensor order:
  // fill(dst) writes all n_bytes to dst. One buffer of the largest such tensor
  // is reused, so a file far larger than memory streams out (rotor quantize).
  using Filler = std::function<Status(uint8_t* dst)>;
  Status AddTensorFilled(std::string_view name, DType type, std::vector<int64_t> ne, size_t n_bytes,
                         Filler fill);
  size_t tensor_count() const { return tensors_.size(); }

  // Writes a GGUF v3 file (to PATH.tmp, then renamed over PATH).
  Status Write(const std::string& path) const;
  // The same bytes, in memory (for tests).
  Result<std::vector<uint8_t>> WriteToBytes() const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;
    Filler fill;  // AddTensorFilled: produces the bytes at write time
  };
  using Sink = std::function<Status(const void* p, size_t n)>;

  template <typename T>
  void SetArray(std::string_view key, std::span<const T> v) {
    Set(key, GgufValue::ArrayOf(v));
  }
  Status Check(std::string_view name, DType type, const std::vector<int64_t>& ne, const void* data,
               size_t n_bytes) const;
  Result<uint64_t> Alignment() const;
  Status Emit(const Sink& sink) const;

  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace rotor
