// The forward pass: tokens of one or more sequences in, logits out, each
// sequence attending through its own KV cache. Activation buffers are sized
// once for the largest ubatch and reused for every chunk and decode step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention/attention.h"
#include "base/memory.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "ops/ops.h"

namespace rotor {

// Which logits a sequence's tokens produce: the last token's (generation),
// every token's (scoring a text), or none (a prompt chunk that is not the last).
enum class LogitsWanted { kLast, kAll, kNone };

// One sequence's share of a ubatch.
struct SeqInput {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
  LogitsWanted logits = LogitsWanted::kLast;
  // The tokens are given text (a prompt, a text scored or embedded), not a
  // sampled token fed back: attention computes each as in any other cut of
  // the text (AttentionArgs::prompt), so a prefix-cache hit or a prefill
  // chunk that leaves one token gives the same bits as one long chunk.
  bool prompt = false;
};

class Forward {
 public:
  // max_tokens: the most tokens one ubatch may hold, summed over its sequences.
  // n_ctx: the largest cache a sequence will use (0 = the model's context); it
  // bounds the distances of the deferred-RoPE table.
  Forward(const Model& model, ThreadPool& pool, int max_tokens, int n_ctx = 0);

  int max_tokens() const { return max_tokens_; }
  const Model& model() const { return model_; }
  // Logit rows a ubatch produces, summed over its sequences.
  static int64_t OutputRows(std::span<const SeqInput> seqs);

  // Runs one ubatch. `logits` receives OutputRows(seqs) rows of n_vocab floats,
  // sequence by sequence. Fails before touching any cache if a token id is out
  // of range or a cache cannot take the tokens.
  Status Run(std::span<const SeqInput> seqs, float* logits);
  // The input of the last Run whose K/V memory could not be had (an
  // allocation failed planning its tokens or taking its blocks): that Run
  // returned an out-of-memory error before anything ran, with every cache as
  // it was apart from blocks already taken. -1 when the last Run's result is
  // not one input's.
  int failed_input() const { return failed_input_; }
  // Runs one ubatch as Run does (the `logits` of each SeqInput ignored) but
  // computes no logits: `hidden` receives every token's final hidden state
  // after the output norm, [n_tokens, n_embd] sequence by sequence (what
  // embeddings pool).
  Status RunHidden(std::span<const SeqInput> seqs, float* hidden);

  // The decode step of a batch: one token for each sequence, all in one pass
  // (each weight read once). logits: [caches.size(), n_vocab].
  Status Decode(std::span<KvCache* const> caches, std::span<const int32_t> tokens, float* logits);

 private:
  // Plans the caches, runs every layer and commits: x_ holds the final
  // residual stream, [n_tokens, n_embd]. *n_tokens = 0: nothing to run.
  Status RunLayers(std::span<const SeqInput> seqs, int64_t* n_tokens);
  void Layer(int il, std::span<const SeqInput> seqs, int64_t n_tokens);
  // Adds the Q/K/V biases and permutes NeoX Q/K heads into interleaved pairs
  // (ModelConfig::rope); nothing to do, and no pass, for a plain Llama.
  void BiasAndPermute(const LayerWeights& w, int64_t n_tokens);

  const Model& model_;
  ThreadPool& pool_;
  int max_tokens_;
  std::vector<KvPlan> plans_;
  int failed_input_ = -1;
  std::vector<SeqInput> decode_inputs_;  // reserved for max_tokens sequences
  std::vector<AttentionArgs> attn_args_;  // one per sequence of a step
  std::vector<KvLayerView> attn_views_;   // what attn_args_ point to
  ops::MatmulScratch matmul_scratch_;
  std::vector<uint8_t> sampled_;  // [rows of a product]: 1 = a sampled token (SetSampledRows)
  AttentionScratch attn_scratch_;
  RopeDistanceTable rope_table_;
  AlignedBuffer<float> x_;     // [max_tokens, n_embd] residual stream
  AlignedBuffer<float> xn_;    // [max_tokens, n_embd] normed input of a block
  AlignedBuffer<float> q_;     // [max_tokens, n_head * head_dim]
  AlignedBuffer<float> k_;     // [max_tokens, n_head_kv * head_dim]
  AlignedBuffer<float> v_;     // [max_tokens, n_head_kv * head_dim]
  AlignedBuffer<float> att_;   // [max_tokens, n_head * head_dim]
  AlignedBuffer<float> gate_;  // [max_tokens, n_ff]
  AlignedBuffer<float> up_;    // [max_tokens, n_ff]
  AlignedBuffer<float> out_;   // [max_tokens, n_embd] block output before the residual add
  AlignedBuffer<float> perm_;  // [pool threads, head_dim] a head being permuted
  // RoPE's cos and sin at each token's position, computed once per ubatch for
  // every layer: [max_tokens, n_rot / 2] each.
  AlignedBuffer<float> rope_cos_, rope_sin_;
};

}  // namespace rotor
