// rotor quantize: converts a GGUF model to another weight type or to one of
// llama.cpp's mixes (rules in quantize_rules.h).
//
// Every tensor is read from the mmap'd input, dequantized to f32 row by row
// and quantized to its new type, rows split across the pool; the output is
// streamed tensor by tensor (memory: about one output tensor, not the model).
// Metadata is copied in order, with general.file_type (llama.cpp's ftype) and
// general.quantization_version = 2 set; tensor order and general.alignment are
// kept. Everything that can fail (types this build cannot convert, requantizing
// without permission) is checked before the output file is created.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "model/quantize_rules.h"
#include "tensor/dtype.h"

namespace rotor {

inline constexpr uint32_t kQuantizationVersion = 2;

struct QuantizeOptions {
  QuantTarget target;
  bool allow_requantize = false;  // quantized input -> another quantized type
  bool leave_output = false;      // copy output.weight unchanged
  bool pure = false;              // no per-tensor rules
};

// One tensor of the plan.
struct QuantizedTensor {
  std::string name;
  std::vector<int64_t> ne;
  DType in_type = DType::kF32;
  DType out_type = DType::kF32;
  bool convert = false;                // false: bytes copied
  std::optional<DType> fallback_from;  // rules' choice that did not fit the row
  uint64_t in_bytes = 0, out_bytes = 0;
};

// Layer count, GQA ratio and tied output of a file, for the rules.
QuantModelInfo QuantModelInfoOf(const GgufFile& in);

// The output type of every tensor of `in`, in file order. Errors: a type ops
// cannot convert in this build, a quantized input without allow_requantize.
Result<std::vector<QuantizedTensor>> PlanQuantization(const GgufFile& in,
                                                      const QuantizeOptions& options);

struct QuantizeStats {
  uint64_t in_file_bytes = 0, out_file_bytes = 0;
  uint64_t in_tensor_bytes = 0, out_tensor_bytes = 0;
  int64_t n_elements = 0;  // of every tensor
  int n_converted = 0, n_copied = 0, n_fallback = 0;
  double seconds = 0;
};

// Called before each tensor is written: index, count, the plan's entry.
using QuantizeProgress = std::function<void(size_t i, size_t n, const QuantizedTensor& t)>;

// Quantizes the file at in_path into out_path (written to OUT.tmp, renamed at the end).
Result<QuantizeStats> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                    const QuantizeOptions& options, ThreadPool& pool,
                                    const QuantizeProgress& progress = {});

}  // namespace rotor
