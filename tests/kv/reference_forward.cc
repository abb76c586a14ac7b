#include "reference_forward.h"

#include <cmath>

#include "ops/quant.h"
#include "ops/rope.h"

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

}  // namespace

std::vector<float> ReferenceLogits(const Model& model, const std::vector<int32_t>& tokens,
                                   const DistanceFn& distance) {
  const ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), hd = c.head_dim;
  const int group = c.n_head / c.n_head_kv;
  std::vector<std::vector<float>> x(n);
  for (int64_t t = 0; t < n; ++t) x[t] = Row(model.token_embd(), tokens[t]);
  ops::RopeConfig rope = c.rope();
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& w = model.layer(il);
    std::vector<std::vector<float>> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> xn = Norm(x[t], w.attn_norm, c.rms_eps);
      q[t] = MatVec(w.wq, xn), k[t] = MatVec(w.wk, xn), v[t] = MatVec(w.wv, xn);
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
          const int32_t pq = static_cast<int32_t>(d), pk = 0;
          ops::Rope(rope, qh.data(), 1, 1, &pq);
          ops::Rope(rope, kh.data(), 1, 1, &pk);
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
