// Embeddings: the final hidden states of a text (after the output norm,
// before the LM head) pooled into one vector, as llama.cpp's embedding mode.
//
// The tokens run through a scratch full cache sized to them (on a private
// pool, freed on return) and a forward pass of their own: the sequences of
// the scheduler, the prefix cache and the KV budget are not touched. The
// engine's thread pool is used, so the caller runs Embed on the thread that
// owns it (the server: Batcher::RunOnEngineThread).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "kv/kv_config.h"

namespace rotor {

// none: every token's vector; mean: their average; cls: the first token's;
// last: the last token's.
enum class Pooling { kNone, kMean, kCls, kLast };
std::string_view PoolingName(Pooling p);
// "none" | "mean" | "cls" | "last".
Result<Pooling> ParsePooling(std::string_view name);
// The model's pooling: the GGUF's {arch}.pooling_type (llama.cpp's numbers:
// 0 none, 1 mean, 2 cls, 3 last) when present, else mean (a generative model
// has no pooling of its own).
Result<Pooling> ModelPooling(const Model& model);

struct EmbedOptions {
  Pooling pooling = Pooling::kMean;
  bool normalize = true;           // each vector scaled to unit L2 norm (a zero vector stays)
  int step = kDefaultPrefillStep;  // tokens per forward pass (0 = all at once)
  KvTypes kv_types;                // of the scratch cache
};

// The embedding of `tokens` (one sequence, at most engine.n_ctx() tokens):
// [n_embd] when pooled, [tokens.size(), n_embd] for Pooling::kNone.
Result<std::vector<float>> Embed(Engine& engine, std::span<const int32_t> tokens,
                                 const EmbedOptions& options);

}  // namespace rotor
