#include "model/quantize_rules.h"

#include <fmt/format.h>

#include <array>
#include <cctype>

namespace rotor {
namespace {

struct TargetRow {
  std::string_view name;
  DType type;
  FileType file_type;
};

// Listing order: plain types, then the mixes; aliases after them.
constexpr std::array<TargetRow, 21> kTargets = {{
    {"f32", DType::kF32, FileType::kAllF32},
    {"f16", DType::kF16, FileType::kF16},
    {"bf16", DType::kBF16, FileType::kBF16},
    {"q8_0", DType::kQ8_0, FileType::kQ8_0},
    {"q4_0", DType::kQ4_0, FileType::kQ4_0},
    {"q4_1", DType::kQ4_1, FileType::kQ4_1},
    {"q5_0", DType::kQ5_0, FileType::kQ5_0},
    {"q5_1", DType::kQ5_1, FileType::kQ5_1},
    {"iq4_nl", DType::kIQ4_NL, FileType::kIQ4_NL},
    {"Q2_K", DType::kQ2_K, FileType::kQ2_K},
    {"Q3_K_S", DType::kQ3_K, FileType::kQ3_K_S},
    {"Q3_K_M", DType::kQ3_K, FileType::kQ3_K_M},
    {"Q3_K_L", DType::kQ3_K, FileType::kQ3_K_L},
    {"Q4_K_S", DType::kQ4_K, FileType::kQ4_K_S},
    {"Q4_K_M", DType::kQ4_K, FileType::kQ4_K_M},
    {"Q5_K_S", DType::kQ5_K, FileType::kQ5_K_S},
    {"Q5_K_M", DType::kQ5_K, FileType::kQ5_K_M},
    {"Q6_K", DType::kQ6_K, FileType::kQ6_K},
    // llama.cpp's aliases.
    {"Q3_K", DType::kQ3_K, FileType::kQ3_K_M},
    {"Q4_K", DType::kQ4_K, FileType::kQ4_K_M},
    {"Q5_K", DType::kQ5_K, FileType::kQ5_K_M},
}};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The rules' choice for a quantized target, before the block-size check.
DType MixType(FileType ft, DType base, const QuantModelInfo& m, std::string_view name,
              bool is_output) {
  using F = FileType;
  if (is_output) {
    // llama.cpp: q6_K unless the target is q8_0; q8_0 when rows do not fit 256
    // (the caller checks the row length).
    return base == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  }
  const int i = LayerOf(name);
  const int n = m.n_layer;
  DType t = base;
  if (Contains(name, "attn_v.weight")) {
    if (ft == F::kQ2_K) {
      t = m.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
    } else if (ft == F::kQ3_K_M) {
      t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
    } else if (ft == F::kQ3_K_L) {
      t = DType::kQ5_K;
    } else if (ft == F::kIQ4_NL && m.n_gqa >= 4) {
      t = DType::kQ5_K;
    } else if ((ft == F::kQ4_K_M || ft == F::kQ5_K_M) && UseMoreBits(i, n)) {
      t = DType::kQ6_K;
    } else if (ft == F::kQ4_K_S && i < 4) {
      t = DType::kQ5_K;
    }
    // 70B Llama: 8 query heads share each attn_v row, so it is 8x smaller than
    // attn_q and more bits there cost almost nothing. llama.cpp's 70B: 80
    // layers, and for llama GQA (LLaMA-1 65B has none: its model type 65B).
    const bool is_70b = n == 80 && (m.arch != "llama" || m.n_gqa > 1);
    if (is_70b && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
  } else if (Contains(name, "ffn_down")) {
    if (ft == F::kQ2_K) {
      t = DType::kQ3_K;
    } else if (ft == F::kQ3_K_M) {
      t = i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
    } else if (ft == F::kQ3_K_L) {
      t = DType::kQ5_K;
    } else if (ft == F::kQ4_K_M) {
      if (UseMoreBits(i, n)) t = DType::kQ6_K;
    } else if (ft == F::kIQ4_NL && i < n / 8) {
      t = DType::kQ5_K;
    } else if (ft == F::kQ5_K_M && UseMoreBits(i, n)) {
      t = DType::kQ6_K;
    } else if (ft == F::kQ4_K_S && i < n / 8) {
      t = DType::kQ5_K;
    }
  } else if (Contains(name, "attn_output.weight")) {
    if (ft == F::kQ2_K) {
      t = DType::kQ3_K;
    } else if (ft == F::kQ3_K_M) {
      t = DType::kQ4_K;
    } else if (ft == F::kQ3_K_L) {
      t = DType::kQ5_K;
    }
  }
  return t;
}

// llama.cpp's replacement for a type whose blocks do not fit the row; f16 for
// the types it has none for (it stops there; rotor carries on).
DType FallbackType(DType t) {
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
      return DType::kIQ4_NL;
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    case DType::kQ6_K:
      return DType::kQ8_0;
    default:
      return DType::kF16;
  }
}

}  // namespace

bool UseMoreBits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

int LayerOf(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int v = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    v = v * 10 + (name[i] - '0');
    if (v > 1000000) return -1;
  }
  return i < name.size() && name[i] == '.' ? v : -1;
}

bool IsQuantizedType(DType t) { return Traits(t).block_size > 1; }

std::vector<std::string> QuantTargetNames() {
  std::vector<std::string> out;
  for (const TargetRow& r : kTargets) out.emplace_back(r.name);
  return out;
}

std::string_view FileTypeName(uint32_t file_type) {
  // llama.h's LLAMA_FTYPE values (gaps are removed types) and their names.
  struct Name {
    uint32_t value;
    std::string_view name;
  };
  static constexpr Name kNames[] = {
      {0, "all F32"},          {1, "F16"},
      {2, "Q4_0"},             {3, "Q4_1"},
      {7, "Q8_0"},             {8, "Q5_0"},
      {9, "Q5_1"},             {10, "Q2_K - Medium"},
      {11, "Q3_K - Small"},    {12, "Q3_K - Medium"},
      {13, "Q3_K - Large"},    {14, "Q4_K - Small"},
      {15, "Q4_K - Medium"},   {16, "Q5_K - Small"},
      {17, "Q5_K - Medium"},   {18, "Q6_K"},
      {19, "IQ2_XXS - 2.0625 bpw"}, {20, "IQ2_XS - 2.3125 bpw"},
      {21, "Q2_K - Small"},    {22, "IQ3_XS - 3.3 bpw"},
      {23, "IQ3_XXS - 3.0625 bpw"}, {24, "IQ1_S - 1.5625 bpw"},
      {25, "IQ4_NL - 4.5 bpw"}, {26, "IQ3_S - 3.4375 bpw"},
      {27, "IQ3_S mix - 3.66 bpw"}, {28, "IQ2_S - 2.5 bpw"},
      {29, "IQ2_M - 2.7 bpw"}, {30, "IQ4_XS - 4.25 bpw"},
      {31, "IQ1_M - 1.75 bpw"}, {32, "BF16"},
      {36, "TQ1_0 - 1.69 bpw ternary"}, {37, "TQ2_0 - 2.06 bpw ternary"},
  };
  for (const Name& n : kNames)
    if (n.value == file_type) return n.name;
  return "";
}

FileType FileTypeOf(DType t) {
  for (const TargetRow& r : kTargets)
    if (r.type == t) return r.file_type;
  return FileType::kAllF32;
}

Result<QuantTarget> ParseQuantTarget(std::string_view name) {
  const std::string want = Lower(name);
  for (const TargetRow& r : kTargets)
    if (Lower(r.name) == want) return QuantTarget{std::string(r.name), r.type, r.file_type};
  return Errorf("quantize: unknown type '{}'; valid types: {}", name,
                fmt::join(QuantTargetNames(), " "));
}

TensorChoice ChooseTensorType(const QuantTarget& target, const QuantModelInfo& model,
                              const QuantRuleOptions& options, std::string_view name,
                              const std::vector<int64_t>& ne, DType in_type) {
  TensorChoice c;
  c.type = in_type;
  const bool is_output_name = name == "output.weight";
  // Dimensions as llama.cpp's ggml_n_dims counts them: trailing 1s do not
  // count, so a [256, 1] weight is 1-D and stays as it is.
  size_t n_dims = ne.size();
  while (n_dims > 1 && ne[n_dims - 1] == 1) --n_dims;
  c.convert = EndsWith(name, "weight") && n_dims >= 2 && !Contains(name, "_norm.weight") &&
              !(options.leave_output && is_output_name) && !Contains(name, "ffn_gate_inp.weight") &&
              name != "position_embd.weight" && name != "token_types.weight" &&
              !Contains(name, "ssm_conv1d.weight") && !Contains(name, "attn_rel_b.weight");
  if (!c.convert) return c;
  DType t = target.type;
  if (IsQuantizedType(t) && !options.pure) {
    const bool is_output = is_output_name || (!model.has_output && name == "token_embd.weight");
    t = MixType(target.file_type, target.type, model, name, is_output);
    if (is_output && ne[0] % 256 != 0) t = DType::kQ8_0;
  }
  if (ne[0] % Traits(t).block_size != 0) {
    c.fallback_from = t;
    t = FallbackType(t);
    if (ne[0] % Traits(t).block_size != 0) t = DType::kF16;
  }
  c.type = t;
  c.convert = t != in_type;
  return c;
}

}  // namespace rotor
