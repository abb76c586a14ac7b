#include "model/model_config.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "base/log.h"
#include "ops/quant.h"

namespace rotor {
namespace {

struct ArchInfo {
  const char* name;
  ops::RopeLayout layout;
};
// Both run the Llama graph (pre-norm, GQA attention, SwiGLU); qwen2 adds
// optional Q/K/V biases (loaded for any architecture when present).
constexpr ArchInfo kArchs[] = {{"llama", ops::RopeLayout::kNormal},
                               {"qwen2", ops::RopeLayout::kNeox}};

// rope.scaling.* keys and rope_freqs.weight into the frequency factors.
Status ReadRopeScaling(const GgufFile& f, const std::string& p, ModelConfig& c) {
  const int n_pairs = c.n_rot / 2;
  ASSIGN_OR_RETURN(c.rope_scaling, f.GetStringOr(p + "rope.scaling.type", "none"));
  ASSIGN_OR_RETURN(double factor, f.GetFloatOr(p + "rope.scaling.factor", 0.0));
  // The older key: a linear factor when no scaling type is given.
  ASSIGN_OR_RETURN(double scale_linear, f.GetFloatOr(p + "rope.scale_linear", 0.0));
  if (!f.Has(p + "rope.scaling.type") && scale_linear != 0.0 && scale_linear != 1.0)
    c.rope_scaling = "linear", factor = scale_linear;
  const std::string type_key = p + "rope.scaling.type";

  std::vector<float> tensor_factors;
  if (const GgufTensor* t = f.FindTensor("rope_freqs.weight"); t != nullptr) {
    if (t->n_elements != n_pairs || t->ne[0] != n_pairs)
      return Errorf(
          "tensor 'rope_freqs.weight' has shape [{}], expected [{}] (rope dimensions / 2)",
          fmt::join(t->ne, ", "), n_pairs);
    if (!Traits(t->type).supported)
      return Errorf("tensor 'rope_freqs.weight' has type {}, which rotor cannot run",
                    DTypeName(t->type));
    tensor_factors.resize(n_pairs);
    ops::DequantizeRow(t->type, t->data, tensor_factors.data(), n_pairs);
    for (int i = 0; i < n_pairs; ++i)
      if (!(tensor_factors[i] > 0.f) || !std::isfinite(tensor_factors[i]))
        return Errorf("tensor 'rope_freqs.weight'[{}] = {} must be a positive number", i,
                      tensor_factors[i]);
  }

  float linear = 1.0f;
  if (c.rope_scaling == "none" || c.rope_scaling.empty()) {
    c.rope_scaling = "none";
  } else if (c.rope_scaling == "linear") {
    if (!(factor > 0.0 && std::isfinite(factor)))
      return Errorf("key '{}rope.scaling.factor' = {} must be > 0 for linear scaling", p, factor);
    linear = static_cast<float>(factor);
    c.rope_scale = linear;
  } else if (c.rope_scaling == "llama3") {
    // rope_freqs.weight, when present, already holds the factors.
    const bool need_factor = tensor_factors.empty() || f.Has(p + "rope.scaling.factor");
    if (need_factor && !(factor >= 1.0 && std::isfinite(factor)))
      return Errorf("key '{}rope.scaling.factor' = {} must be >= 1 for llama3 scaling", p, factor);
    c.rope_scale = need_factor ? static_cast<float>(factor) : 1.0f;
    if (tensor_factors.empty()) {
      ASSIGN_OR_RETURN(double low, f.GetFloatOr(p + "rope.scaling.low_freq_factor", 1.0));
      ASSIGN_OR_RETURN(double high, f.GetFloatOr(p + "rope.scaling.high_freq_factor", 4.0));
      const std::string orig_key = p + "rope.scaling.original_context_length";
      if (!f.Has(orig_key))
        return Errorf("llama3 rope scaling without tensor 'rope_freqs.weight' needs key '{}'",
                      orig_key);
      ASSIGN_OR_RETURN(int64_t orig, f.GetInt(orig_key));
      if (!(low > 0.0 && high > low))
        return Errorf(
            "keys '{}rope.scaling.low_freq_factor' = {} and 'high_freq_factor' = {}: "
            "need 0 < low < high",
            p, low, high);
      if (orig < 1) return Errorf("key '{}' = {} must be >= 1", orig_key, orig);
      tensor_factors =
          Llama3FreqFactors(c.n_rot, c.rope_base, factor, low, high, static_cast<double>(orig));
    }
  } else {
    return Errorf(
        "key '{}' = '{}': rope scaling '{}' is not supported (rotor runs: none, "
        "linear, llama3)",
        type_key, c.rope_scaling, c.rope_scaling);
  }
  if (!tensor_factors.empty() || linear != 1.0f) {
    c.rope_freq_factors.assign(n_pairs, 1.0f);
    for (int i = 0; i < n_pairs; ++i)
      c.rope_freq_factors[i] = (tensor_factors.empty() ? 1.0f : tensor_factors[i]) * linear;
  }
  return Status::Ok();
}

}  // namespace

std::string SupportedArchitectures() {
  std::string out;
  for (const ArchInfo& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::vector<float> Llama3FreqFactors(int n_rot, double base, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_ctx) {
  const double low_wavelen = original_ctx / low_freq_factor;
  const double high_wavelen = original_ctx / high_freq_factor;
  std::vector<float> out(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / n_rot);
    const double wavelen = 2.0 * M_PI / freq;
    double div = 1.0;
    if (wavelen > low_wavelen) {
      div = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      div = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out[i] = static_cast<float>(div);
  }
  return out;
}

Result<ModelConfig> ReadModelConfig(const GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.arch, f.GetString("general.architecture"));
  const ArchInfo* arch = nullptr;
  for (const ArchInfo& a : kArchs)
    if (c.arch == a.name) arch = &a;
  if (arch == nullptr)
    return Errorf("architecture '{}' is not supported (rotor runs: {})", c.arch,
                  SupportedArchitectures());
  c.rope_layout = arch->layout;
  ASSIGN_OR_RETURN(c.name, f.GetStringOr("general.name", ""));
  const std::string p = c.arch + ".";
  auto get_int = [&](const std::string& key, int64_t lo, int64_t hi, int* out,
                     std::optional<int64_t> def = std::nullopt) -> Status {
    Result<int64_t> v = def ? f.GetIntOr(key, *def) : f.GetInt(key);
    if (!v.ok()) return v.status();
    if (*v < lo || *v > hi) return Errorf("key '{}' = {} out of range [{}, {}]", key, *v, lo, hi);
    *out = static_cast<int>(*v);
    return Status::Ok();
  };
  constexpr int64_t kBig = 1 << 24;
  RETURN_IF_ERROR(get_int(p + "embedding_length", 1, kBig, &c.n_embd));
  RETURN_IF_ERROR(get_int(p + "block_count", 1, 4096, &c.n_layer));
  RETURN_IF_ERROR(get_int(p + "attention.head_count", 1, 4096, &c.n_head));
  RETURN_IF_ERROR(get_int(p + "attention.head_count_kv", 1, 4096, &c.n_head_kv, c.n_head));
  RETURN_IF_ERROR(get_int(p + "feed_forward_length", 1, kBig, &c.n_ff));
  RETURN_IF_ERROR(get_int(p + "context_length", 1, kBig, &c.n_ctx_train));
  if (c.n_embd % c.n_head != 0)
    return Errorf("embedding_length {} is not a multiple of head_count {}", c.n_embd, c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    return Errorf("head_count {} is not a multiple of head_count_kv {}", c.n_head, c.n_head_kv);
  c.head_dim = c.n_embd / c.n_head;
  for (const char* key : {"attention.key_length", "attention.value_length"}) {
    ASSIGN_OR_RETURN(int64_t len, f.GetIntOr(p + key, c.head_dim));
    if (len != c.head_dim)
      return Errorf(
          "key '{}{}' = {}: heads of a size other than embedding_length / head_count "
          "({}) are not supported",
          p, key, len, c.head_dim);
  }
  RETURN_IF_ERROR(get_int(p + "rope.dimension_count", 2, c.head_dim, &c.n_rot, c.head_dim));
  if (c.n_rot % 2 != 0) return Errorf("key '{}rope.dimension_count' = {} must be even", p, c.n_rot);
  ASSIGN_OR_RETURN(double base, f.GetFloatOr(p + "rope.freq_base", 10000.0));
  if (!(base > 1.0) || !std::isfinite(static_cast<float>(base)))
    return Errorf("key '{}rope.freq_base' = {} must be a finite number > 1", p, base);
  c.rope_base = static_cast<float>(base);
  RETURN_IF_ERROR(ReadRopeScaling(f, p, c));
  ASSIGN_OR_RETURN(double eps, f.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0.0 && eps < 1.0))
    return Errorf("key '{}attention.layer_norm_rms_epsilon' = {} out of range (0, 1)", p, eps);
  c.rms_eps = static_cast<float>(eps);
  // Mistral-style files: the window is not applied (attention is full, or
  // what --kv says; `--kv window --kv-size W` gives the same mask).
  RETURN_IF_ERROR(get_int(p + "attention.sliding_window", 0, 1 << 30, &c.sliding_window, 0));
  if (c.sliding_window > 0 && c.sliding_window < c.n_ctx_train)
    Log(LogLevel::kInfo,
        "model: sliding window {} is not applied (attention sees the whole context; "
        "--kv window --kv-size {} applies it)",
        c.sliding_window, c.sliding_window);
  return c;
}

}  // namespace rotor
