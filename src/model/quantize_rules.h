// Which type each tensor of a model gets when it is quantized (rotor quantize):
// the target names, llama.cpp's file-type numbers and its per-tensor rules
// (llama-quant.cpp, llama_tensor_get_type), rewritten for rotor.
//
// Rules, in order:
//  - Only 2-D+ tensors (trailing sizes of 1 not counted: a [256, 1] weight is
//    1-D, as llama.cpp's ggml_n_dims says) whose name ends in "weight" are
//    converted; "*_norm.weight",
//    biases and 1-D tensors are copied as they are (f32 norms stay f32).
//    --leave-output copies output.weight too.
//  - f32/f16/bf16 targets: every converted tensor gets that type; no other rule.
//  - Quantized targets (unless --pure): output.weight (or token_embd.weight
//    when the output is tied to it) gets q6_K, or stays q8_0 for a q8_0 target,
//    or q8_0 when its rows are not a multiple of 256. The mixes raise some
//    tensors (use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2):
//      Q2_K    attn_v q4_K (n_head/n_head_kv >= 4) else q3_K; ffn_down, attn_output q3_K
//      Q3_K_M  attn_v q5_K (layers 0-1) else q4_K; ffn_down q5_K (i < n/16) else q4_K;
//              attn_output q4_K
//      Q3_K_L  attn_v, ffn_down, attn_output q5_K
//      Q4_K_S  attn_v q5_K (i < 4); ffn_down q5_K (i < n/8)
//      Q4_K_M, Q5_K_M  attn_v and ffn_down q6_K where use_more_bits
//      IQ4_NL  attn_v q5_K (n_head/n_head_kv >= 4); ffn_down q5_K (i < n/8)
//      70B-class (80 layers; llama only with GQA, as llama.cpp tells 70B from
//      LLaMA-1 65B): attn_v q3_K/q4_K -> q5_K
//  - Row length not a multiple of the chosen block (as llama.cpp 8784689f, 2025;
//    its 2026 tensor_type_fallback gives q2_K/q3_K q4_0 instead): q2_K/q3_K -> iq4_nl,
//    q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, and f16 when that does not fit
//    either. Unlike llama.cpp (which stops), any other type falls back to f16
//    too, and --pure falls back the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace rotor {

// llama.cpp's LLAMA_FTYPE values (general.file_type).
enum class FileType : uint32_t {
  kAllF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ4_NL = 25,
  kBF16 = 32,
};

struct QuantTarget {
  std::string name;  // as listed by QuantTargetNames: "Q4_K_M", "q8_0", ...
  DType type;        // the type of tensors no rule raises
  FileType file_type;
};

// Case-insensitive. Plain types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K
// q3_K q4_K q5_K q6_K iq4_nl; mixes: Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M
// Q5_K_S Q5_K_M Q6_K. As in llama.cpp, q2_K and q6_K are the Q2_K and Q6_K
// mixes, and q3_K, q4_K, q5_K are aliases of Q3_K_M, Q4_K_M, Q5_K_M (add
// --pure for every tensor in one type). Error lists the valid names.
Result<QuantTarget> ParseQuantTarget(std::string_view name);
std::vector<std::string> QuantTargetNames();
// general.file_type of a file whose matrices are all of type t (the first
// target of that type: q4_K -> Q4_K_S, as llama.cpp labels such a file);
// kAllF32 for a type no target has.
FileType FileTypeOf(DType t);
// llama.cpp's name of a general.file_type value, as llama-bench and
// llama-cli print it ("Q4_K - Medium", "all F32", "IQ4_NL - 4.5 bpw");
// "" for a value it does not define.
std::string_view FileTypeName(uint32_t file_type);

// What the rules need to know about the model.
struct QuantModelInfo {
  int n_layer = 0;         // blocks (attn_v / ffn_down tensors)
  int n_gqa = 1;           // n_head / n_head_kv
  bool has_output = true;  // false: output tied to token_embd.weight
  std::string arch = "llama";  // general.architecture
};

struct QuantRuleOptions {
  bool pure = false;          // no per-tensor rules: every converted tensor in the target type
  bool leave_output = false;  // copy output.weight unchanged
};

struct TensorChoice {
  bool convert = false;                // false: copied unchanged (type stays the input's)
  DType type = DType::kF32;            // the output type
  std::optional<DType> fallback_from;  // the rules' choice when its blocks did not fit
};

// The output type of one tensor. `ne` is its shape (GGML order), `in_type` its type.
TensorChoice ChooseTensorType(const QuantTarget& target, const QuantModelInfo& model,
                              const QuantRuleOptions& options, std::string_view name,
                              const std::vector<int64_t>& ne, DType in_type);

// llama.cpp's use_more_bits: the layers the _M mixes give more bits.
bool UseMoreBits(int i_layer, int n_layer);
// The block index of "blk.N.xxx", or -1.
int LayerOf(std::string_view name);
// A block-quantized type (not f32/f16/bf16 or an integer type).
bool IsQuantizedType(DType t);

}  // namespace rotor
