#include "model/key_offsets.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>

#include "base/check.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "ops/rope.h"
#include "tokenizer/tokenizer.h"

namespace rotor {
namespace {

// A short plain-English paragraph (written for this purpose, not taken from
// any evaluation text): keys of ordinary text, whose channel means are the
// ones a cache sees. Pseudo-random token ids give means far from them
// (docs/EVALUATION.md, "Key offsets": they are the fallback below only).
constexpr std::string_view kCalibrationText =
    "The old lighthouse stood at the edge of the harbor, and every evening its keeper climbed "
    "the narrow stairs to light the lamp. Ships passing in the night followed the steady beam "
    "home. One winter a storm broke the glass, and the whole town came together to repair it "
    "before the fishing boats returned in the spring. Children carried buckets of sand, the baker "
    "brought bread for the workers, and an old sailor told stories about the ships he had seen. "
    "When the lamp was lit again, people stood on the cliffs and watched the light sweep across "
    "the dark water, and they felt that the harbor was safe once more.";

// The paragraph's tokens (BOS first) up to kKeyOffsetTokens and the model's
// context (any vocabulary gives it more than 20); a fixed pseudo-random
// sequence of ids after BOS when the file's vocabulary cannot be read.
std::vector<int32_t> CalibrationTokens(const Model& model) {
  const ModelConfig& mc = model.config();
  const int n = mc.n_ctx_train > 0 ? std::min(kKeyOffsetTokens, mc.n_ctx_train) : kKeyOffsetTokens;
  CHECK_GT(n, kKeyOffsetSkip);
  std::vector<int32_t> tokens;
  if (auto tok = Tokenizer::FromGguf(model.file()); tok.ok()) {
    tokens = (*tok)->Encode(kCalibrationText, /*add_special=*/true);
    if (tokens.size() > static_cast<size_t>(n)) tokens.resize(n);
    const bool in_range = std::all_of(tokens.begin(), tokens.end(),
                                      [&](int32_t t) { return t >= 0 && t < mc.n_vocab; });
    if (in_range && tokens.size() >= static_cast<size_t>(kKeyOffsetSkip + 16)) return tokens;
  }
  tokens.assign(n, 0);
  const Result<int64_t> bos_id = model.file().GetIntOr("tokenizer.ggml.bos_token_id", 1);
  const int64_t bos = bos_id.ok() ? *bos_id : 1;
  tokens[0] = static_cast<int32_t>(bos >= 0 && bos < mc.n_vocab ? bos : 0);
  uint64_t x = 0x9e3779b97f4a7c15ull;  // splitmix64: the same ids on every platform
  for (int i = 1; i < n; ++i) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    tokens[i] = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(mc.n_vocab));
  }
  return tokens;
}

// Pre-RoPE keys stored as (k - c) / s: c the middle of each channel's range
// [lo, hi] over the calibration tokens, s its half-width, at least 1/64 of
// the head's widest (a channel nearly constant here must not blow up another
// text's keys) and 1 in a head whose keys did not vary. Measured on
// stories260K's q4_0 keys: this paragraph's ranges give PPL within 0.2% of
// each evaluated chunk's own ranges (docs/EVALUATION.md, "Key channels").
void ChannelRanges(const std::vector<float>& lo, const std::vector<float>& hi, int hd,
                   float* center, float* scale) {
  for (size_t h0 = 0; h0 < lo.size(); h0 += hd) {
    float widest = 0.f;
    for (int d = 0; d < hd; ++d) widest = std::max(widest, 0.5f * (hi[h0 + d] - lo[h0 + d]));
    for (int d = 0; d < hd; ++d) {
      const size_t e = h0 + d;
      center[e] = 0.5f * (lo[e] + hi[e]);
      scale[e] = widest > 0.f ? std::max(0.5f * (hi[e] - lo[e]), widest / 64) : 1.f;
    }
  }
}

}  // namespace

std::vector<float> ComputeKeyOffsets(const Model& model, int n_threads) {
  const Timer timer;
  const ModelConfig& mc = model.config();
  const std::vector<int32_t> tokens = CalibrationTokens(model);  // [n]
  const int n = static_cast<int>(tokens.size());
  // Keys before RoPE (a deferred cache stores them so): their mean is what
  // a token's key carries whatever its position.
  const KvShape shape = mc.kv_shape(n);
  KvConfig kv;
  kv.types = {KvType::kF32, KvType::kF32};
  kv.rope_k = RopeK::kDeferred;
  auto cache = KvCache::Create(shape, kv);
  CHECK_MSG(cache.ok(), cache.message().c_str());
  ThreadPool pool(std::max(1, n_threads));
  Forward forward(model, pool, n, n);
  const SeqInput input{
      .cache = cache->get(), .tokens = tokens, .logits = LogitsWanted::kNone, .prompt = true};
  const Status s = forward.Run(std::span<const SeqInput>(&input, 1), nullptr);
  CHECK_MSG(s.ok(), s.message().c_str());

  // The stored keys are rotated by their positions: the constant that best
  // fits them all is the mean c rotated by every position of the context,
  // averaged: per pair i, [C -S; S C] c with C, S the means of cos and sin of
  // theta_i over positions [0, P). Fast pairs average to nearly 0 (no
  // constant fits a key that turns), slow ones keep c.
  const ops::RopeConfig rope = mc.rope();
  const int span = std::clamp(mc.n_ctx_train, 1, kKeyOffsetSpan);
  std::vector<double> cs(rope.n_rot / 2), sn(rope.n_rot / 2);  // [n_rot / 2] mean cos, sin
  for (int i = 0; i < rope.n_rot / 2; ++i) {
    double c = 0, si = 0;
    for (int p = 0; p < span; ++p) {
      const double th = ops::RopeTheta(rope, i, p);
      c += std::cos(th), si += std::sin(th);
    }
    cs[i] = c / span, sn[i] = si / span;
  }
  const int hd = mc.head_dim;
  const size_t row = static_cast<size_t>(mc.n_head_kv) * hd;
  const size_t part = static_cast<size_t>(mc.n_layer) * row;
  std::vector<float> out(3 * part);     // [3 (m, c, s), n_layer, n_head_kv, head_dim]
  std::vector<double> sum(row);         // [n_head_kv * head_dim]
  std::vector<float> lo(row), hi(row);  // [n_head_kv * head_dim] each channel's range
  for (int l = 0; l < mc.n_layer; ++l) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(lo.begin(), lo.end(), std::numeric_limits<float>::infinity());
    std::fill(hi.begin(), hi.end(), -std::numeric_limits<float>::infinity());
    for (int32_t c = kKeyOffsetSkip; c < n; ++c) {
      CHECK_EQ((*cache)->CellIndex(c), c);
      const std::vector<float> k = (*cache)->CellK(l, c);
      for (size_t e = 0; e < row; ++e) {
        sum[e] += k[e];
        lo[e] = std::min(lo[e], k[e]);
        hi[e] = std::max(hi[e], k[e]);
      }
    }
    ChannelRanges(lo, hi, hd, out.data() + part + l * row, out.data() + 2 * part + l * row);
    for (size_t e = 0; e < row; ++e) sum[e] /= (n - kKeyOffsetSkip);
    float* o = out.data() + l * row;
    for (int h = 0; h < mc.n_head_kv; ++h) {
      const double* c = sum.data() + static_cast<size_t>(h) * hd;
      float* m = o + static_cast<size_t>(h) * hd;
      for (int d = 0; d < hd; ++d) m[d] = static_cast<float>(c[d]);  // unrotated dims
      for (int i = 0; i < rope.n_rot / 2; ++i) {  // kNormal pairs (ModelConfig::rope)
        m[2 * i] = static_cast<float>(cs[i] * c[2 * i] - sn[i] * c[2 * i + 1]);
        m[2 * i + 1] = static_cast<float>(sn[i] * c[2 * i] + cs[i] * c[2 * i + 1]);
      }
    }
  }
  // A one-time pause before the first cache with key offsets (measured 3.8 s
  // for the 1B shape on 2 busy cores): said at info level (ROTOR_LOG=info).
  Log(LogLevel::kInfo,
      "model: key offsets and channel ranges from {} calibration tokens in {:.2f} s", n,
      timer.ElapsedSeconds());
  return out;
}

}  // namespace rotor
