#include "reference_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/quant.h"
#include "tensor/fp16.h"

namespace rotor::testing {
namespace {

std::vector<float> Row(const ops::Weight& w, int64_t r) {
  std::vector<float> out(w.k);
  ops::DequantizeRow(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, out.data(),
                     w.k);
  return out;
}

// y = W x, in double.
std::vector<float> MatVec(const ops::Weight& w, const std::vector<float>& x) {
  std::vector<float> y(w.n);
  for (int64_t r = 0; r < w.n; ++r) {
    std::vector<float> row = Row(w, r);
    double s = 0;
    for (int64_t i = 0; i < w.k; ++i) s += static_cast<double>(row[i]) * x[i];
    y[r] = static_cast<float>(s);
  }
  return y;
}

std::vector<float> Norm(const std::vector<float>& x, const float* weight, float eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] * inv * weight[i]);
  return out;
}

// RoPE as the file defines it, read from its keys and tensors (not from
// ModelConfig): the pairing by architecture (qwen2: NeoX halves), rotated
// dimensions, base, and the per-pair frequency divisors.
struct RefRope {
  int n_rot = 0;
  float base = 10000.f;
  bool neox = false;
  std::vector<float> div;  // [n_rot / 2]

  explicit RefRope(const Model& model) {
    const GgufFile& f = model.file();
    const std::string arch = *f.GetString("general.architecture");
    const std::string p = arch + ".";
    neox = arch == "qwen2";
    n_rot = static_cast<int>(*f.GetIntOr(p + "rope.dimension_count", model.config().head_dim));
    base = static_cast<float>(*f.GetFloatOr(p + "rope.freq_base", 10000.0));
    div.assign(n_rot / 2, 1.0f);
    const std::string type = *f.GetStringOr(p + "rope.scaling.type", "none");
    const double factor = *f.GetFloatOr(p + "rope.scaling.factor", 1.0);
    if (const GgufTensor* t = f.FindTensor("rope_freqs.weight")) {
      const float* ff = reinterpret_cast<const float*>(t->data);
      div.assign(ff, ff + n_rot / 2);
    } else if (type == "llama3") {
      // Hugging Face's _compute_llama3_parameters, on the inverse frequencies.
      const double low = *f.GetFloatOr(p + "rope.scaling.low_freq_factor", 1.0);
      const double high = *f.GetFloatOr(p + "rope.scaling.high_freq_factor", 4.0);
      const double old_ctx = static_cast<double>(*f.GetInt(p + "rope.scaling.original_context_length"));
      for (int i = 0; i < n_rot / 2; ++i) {
        const double inv_freq = 1.0 / std::pow(static_cast<double>(base), 2.0 * i / n_rot);
        const double wavelen = 2 * M_PI / inv_freq;
        double scaled = inv_freq;
        if (wavelen > old_ctx / low) {
          scaled = inv_freq / factor;
        } else if (wavelen >= old_ctx / high) {
          const double smooth = (old_ctx / wavelen - low) / (high - low);
          scaled = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
        }
        div[i] = static_cast<float>(inv_freq / scaled);
      }
    }
    if (type == "linear")
      for (float& d : div) d *= static_cast<float>(factor);
  }

  // Rotates a head (file layout) to position pos: the angle in float as
  // llama.cpp computes it, the rotation in double.
  void Apply(std::vector<float>& x, int64_t pos) const {
    const int half = n_rot / 2;
    for (int i = 0; i < half; ++i) {
      const float freq = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(n_rot));
      const float theta = static_cast<float>(pos) * freq / div[i];
      const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const double c = std::cos(static_cast<double>(theta)), s = std::sin(static_cast<double>(theta));
      const double xa = x[a], xb = x[b];
      x[a] = static_cast<float>(xa * c - xb * s);
      x[b] = static_cast<float>(xa * s + xb * c);
    }
  }
};

// x += the file's bias tensor `name`, if it has one.
void AddBias(const Model& model, const std::string& name, std::vector<float>& x) {
  const GgufTensor* t = model.file().FindTensor(name);
  if (t == nullptr) return;
  const float* b = reinterpret_cast<const float*>(t->data);
  for (size_t i = 0; i < x.size(); ++i) x[i] += b[i];
}

}  // namespace

DistanceFn RingDistance(int size, int keep, bool compact) {
  return [=](int64_t t, int64_t j) -> int64_t {
    if (!(j < keep || t - j < size - keep)) return -1;
    if (compact && j < keep) return std::min<int64_t>(t, size - 1) - j;
    return t - j;
  };
}

std::vector<float> ReferenceLogits(const Model& model, const std::vector<int32_t>& tokens,
                                   const DistanceFn& distance, bool kv_f16) {
  const ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), hd = c.head_dim;
  const int group = c.n_head / c.n_head_kv;
  std::vector<std::vector<float>> x(n);
  for (int64_t t = 0; t < n; ++t) x[t] = Row(model.token_embd(), tokens[t]);
  const RefRope rope(model);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& w = model.layer(il);
    std::vector<std::vector<float>> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> xn = Norm(x[t], w.attn_norm, c.rms_eps);
      q[t] = MatVec(w.wq, xn), k[t] = MatVec(w.wk, xn), v[t] = MatVec(w.wv, xn);
      const std::string b = "blk." + std::to_string(il) + ".";
      AddBias(model, b + "attn_q.bias", q[t]);
      AddBias(model, b + "attn_k.bias", k[t]);
      AddBias(model, b + "attn_v.bias", v[t]);
      if (kv_f16)
        for (std::vector<float>* r : {&k[t], &v[t]})
          for (float& e : *r) e = F16ToF32(F32ToF16(e));
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> att(static_cast<size_t>(c.n_head) * hd, 0.f);
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / group;
        std::vector<double> score(n, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t d = distance(t, j);
          if (d < 0) continue;
          // Query at position d, key at 0: only the difference matters.
          std::vector<float> qh(q[t].begin() + h * hd, q[t].begin() + (h + 1) * hd);
          std::vector<float> kh(k[j].begin() + g * hd, k[j].begin() + (g + 1) * hd);
          rope.Apply(qh, d);
          double s = 0;
          for (int64_t e = 0; e < hd; ++e) s += static_cast<double>(qh[e]) * kh[e];
          score[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j)
          if (std::isfinite(score[j])) sum += std::exp(score[j] - mx);
        for (int64_t j = 0; j <= t; ++j) {
          if (!std::isfinite(score[j])) continue;
          const double p = std::exp(score[j] - mx) / sum;
          for (int64_t e = 0; e < hd; ++e) att[h * hd + e] += static_cast<float>(p * v[j][g * hd + e]);
        }
      }
      std::vector<float> o = MatVec(w.wo, att);
      for (int64_t e = 0; e < c.n_embd; ++e) x[t][e] += o[e];
      std::vector<float> xn = Norm(x[t], w.ffn_norm, c.rms_eps);
      std::vector<float> gate = MatVec(w.w_gate, xn), up = MatVec(w.w_up, xn);
      for (int64_t e = 0; e < c.n_ff; ++e)
        gate[e] = static_cast<float>(gate[e] / (1.0 + std::exp(-static_cast<double>(gate[e]))) * up[e]);
      std::vector<float> down = MatVec(w.w_down, gate);
      for (int64_t e = 0; e < c.n_embd; ++e) x[t][e] += down[e];
    }
  }
  std::vector<float> logits(static_cast<size_t>(n) * c.n_vocab);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> l = MatVec(model.output(), Norm(x[t], model.output_norm(), c.rms_eps));
    std::copy(l.begin(), l.end(), logits.begin() + t * c.n_vocab);
  }
  return logits;
}

}  // namespace rotor::testing
