#include "engine/embed.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "kv/kv_cache.h"
#include "model/forward.h"

namespace rotor {

std::string_view PoolingName(Pooling p) {
  switch (p) {
    case Pooling::kNone:
      return "none";
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
  }
  return "?";
}

Result<Pooling> ParsePooling(std::string_view name) {
  for (Pooling p : {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast})
    if (name == PoolingName(p)) return p;
  return Errorf("pooling '{}' is not one of none, mean, cls, last", name);
}

Result<Pooling> ModelPooling(const Model& model) {
  const std::string key = model.config().arch + ".pooling_type";
  ASSIGN_OR_RETURN(const int64_t type, model.file().GetIntOr(key, 1));
  switch (type) {
    case 0:
      return Pooling::kNone;
    case 1:
      return Pooling::kMean;
    case 2:
      return Pooling::kCls;
    case 3:
      return Pooling::kLast;
  }
  return Errorf("embed: {} {} is not a pooling rotor has (0 none, 1 mean, 2 cls, 3 last)", key,
                type);
}

Result<std::vector<float>> Embed(Engine& engine, std::span<const int32_t> tokens,
                                 const EmbedOptions& options) {
  const Model& model = engine.model();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = model.config().n_embd;
  if (n == 0) return Status::Error("embed: no tokens");
  if (n > engine.n_ctx())
    return Errorf("embed: {} tokens, more than the context size {}", n, engine.n_ctx());
  KvConfig kv;  // full
  kv.types = options.kv_types;
  ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      KvCache::Create(model.kv_shape(static_cast<int>(n)), kv, /*pool=*/nullptr));
  const int step = static_cast<int>(options.step > 0 ? std::min<int64_t>(options.step, n) : n);
  Forward forward(model, engine.pool(), step, static_cast<int>(n));
  // [n, n_embd] every token's normed hidden state.
  std::vector<float> hidden(static_cast<size_t>(n * E));
  for (int64_t b = 0; b < n; b += step) {
    const SeqInput in{cache.get(), tokens.subspan(b, std::min<int64_t>(step, n - b)),
                      LogitsWanted::kNone, /*prompt=*/true};
    RETURN_IF_ERROR(forward.RunHidden(std::span(&in, 1), hidden.data() + b * E));
  }
  std::vector<float> out;
  switch (options.pooling) {
    case Pooling::kNone:
      out = std::move(hidden);
      break;
    case Pooling::kMean: {
      std::vector<double> sum(E, 0.0);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < E; ++i) sum[i] += hidden[t * E + i];
      out.resize(E);
      for (int64_t i = 0; i < E; ++i) out[i] = static_cast<float>(sum[i] / n);
      break;
    }
    case Pooling::kCls:
      out.assign(hidden.begin(), hidden.begin() + E);
      break;
    case Pooling::kLast:
      out.assign(hidden.end() - E, hidden.end());
      break;
  }
  if (options.normalize) {
    for (size_t r = 0; r < out.size(); r += E) {
      double sq = 0;
      for (int64_t i = 0; i < E; ++i) sq += static_cast<double>(out[r + i]) * out[r + i];
      if (sq <= 0) continue;
      const double scale = 1.0 / std::sqrt(sq);
      for (int64_t i = 0; i < E; ++i) out[r + i] = static_cast<float>(out[r + i] * scale);
    }
  }
  return out;
}

}  // namespace rotor
