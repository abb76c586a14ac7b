#include "model/forward.h"

#include <algorithm>
#include <new>

#include "base/check.h"

namespace rotor {

Forward::Forward(const Model& model, ThreadPool& pool, int max_tokens, int n_ctx)
    : model_(model),
      pool_(pool),
      max_tokens_(max_tokens),
      matmul_scratch_(max_tokens, std::max(model.config().n_ff, model.config().n_embd)),
      attn_scratch_(pool.size(), model.config().n_head, model.config().n_head_kv,
                    model.config().head_dim),
      rope_table_(model.config().rope(),
                  static_cast<int64_t>(n_ctx > 0 ? n_ctx : model.config().n_ctx_train) +
                      max_tokens) {
  CHECK_GT(max_tokens, 0);
  decode_inputs_.reserve(max_tokens);
  attn_args_.reserve(max_tokens);
  attn_views_.reserve(max_tokens);
  const ModelConfig& c = model.config();
  const size_t t = max_tokens;
  x_.Resize(t * c.n_embd);
  xn_.Resize(t * c.n_embd);
  q_.Resize(t * c.n_head * c.head_dim);
  k_.Resize(t * c.n_head_kv * c.head_dim);
  v_.Resize(t * c.n_head_kv * c.head_dim);
  att_.Resize(t * c.n_head * c.head_dim);
  gate_.Resize(t * c.n_ff);
  up_.Resize(t * c.n_ff);
  out_.Resize(t * c.n_embd);
  perm_.Resize(static_cast<size_t>(pool.size()) * c.head_dim);
  rope_cos_.Resize(t * (c.n_rot / 2));
  rope_sin_.Resize(t * (c.n_rot / 2));
}

int64_t Forward::OutputRows(std::span<const SeqInput> seqs) {
  int64_t rows = 0;
  for (const SeqInput& s : seqs) {
    if (s.logits == LogitsWanted::kAll) rows += static_cast<int64_t>(s.tokens.size());
    if (s.logits == LogitsWanted::kLast && !s.tokens.empty()) rows += 1;
  }
  return rows;
}

Status Forward::RunLayers(std::span<const SeqInput> seqs, int64_t* n_tokens_out) {
  const ModelConfig& c = model_.config();
  failed_input_ = -1;
  int64_t n_tokens = 0;
  for (const SeqInput& s : seqs) n_tokens += static_cast<int64_t>(s.tokens.size());
  *n_tokens_out = 0;
  if (n_tokens == 0) return Status::Ok();
  if (n_tokens > max_tokens_)
    return Errorf("forward: ubatch of {} tokens exceeds the buffers' {}", n_tokens, max_tokens_);
  // Plan every sequence before anything mutates: a failure leaves all caches as they were.
  if (plans_.size() < seqs.size()) plans_.resize(seqs.size());
  // An allocation that fails for one sequence (its plan, its new blocks) is
  // that sequence's error: the caller ends it and runs the others again.
  const auto out_of_memory = [&](size_t si, const char* what) {
    failed_input_ = static_cast<int>(si);
    return Errorf("out of memory {} for {} tokens at depth {} (K/V memory in use: {} MiB); "
                  "lower -c, --kv-memory or --parallel, or retry later",
                  what, seqs[si].tokens.size(), seqs[si].cache->n_seen(),
                  seqs[si].cache->pool().stats().bytes >> 20);
  };
  for (size_t si = 0; si < seqs.size(); ++si) {
    for (int32_t tok : seqs[si].tokens)
      if (tok < 0 || tok >= c.n_vocab)
        return Errorf("forward: token id {} out of range [0, {})", tok, c.n_vocab);
    CHECK(seqs[si].cache != nullptr);
    try {
      RETURN_IF_ERROR(
          seqs[si].cache->Plan(static_cast<int32_t>(seqs[si].tokens.size()), &plans_[si]));
      plans_[si].tokens = seqs[si].tokens;
    } catch (const std::bad_alloc&) {
      return out_of_memory(si, "planning the K/V cells");
    }
  }
  // The blocks every sequence needs, against what each pool can give, before
  // any sequence takes one.
  for (size_t si = 0; si < seqs.size(); ++si) {
    const KvCache& a = *seqs[si].cache;
    int64_t need = 0;
    for (size_t sj = 0; sj < seqs.size(); ++sj) {
      const KvCache& b = *seqs[sj].cache;
      if (&b.pool() == &a.pool() && b.config().types == a.config().types)
        need += b.Unreserved(plans_[sj]);
    }
    if (need > a.pool().Available(a.config().types))
      return Errorf(
          "kv: the KV memory budget ({} MiB) has room for {} more blocks, this step needs {}",
          a.pool().budget_bytes() >> 20, a.pool().Available(a.config().types), need);
  }
  for (size_t si = 0; si < seqs.size(); ++si) {
    try {
      RETURN_IF_ERROR(seqs[si].cache->Prepare(plans_[si]));
    } catch (const std::bad_alloc&) {
      return out_of_memory(si, "taking K/V blocks");
    }
  }

  // The angles of every token whose keys are stored rotated (the caches'
  // views carry the config's rope_k), for every layer.
  int64_t row = 0;
  const int64_t n_pairs = c.n_rot / 2;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const int64_t n = plans_[si].n_tokens;
    if (seqs[si].cache->config().rope_k == RopeK::kCached)
      ops::RopeAngles(c.rope(), plans_[si].pos.data(), n, rope_cos_.data() + row * n_pairs,
                      rope_sin_.data() + row * n_pairs);
    row += n;
  }

  // Embeddings. x: [n_tokens, n_embd]
  const ops::Weight& embd = model_.token_embd();
  row = 0;
  for (const SeqInput& s : seqs)
    for (int32_t tok : s.tokens)
      ops::DequantizeRow(embd.type, static_cast<const uint8_t*>(embd.data) + tok * embd.row_bytes,
                         x_.data() + (row++) * c.n_embd, c.n_embd);

  // Which rows are sampled tokens fed back (the rest are text): a product
  // whose kernel depends on it treats each row the same in any batch
  // (MatmulScratch::SetSampledRows).
  sampled_.clear();
  for (const SeqInput& s : seqs) sampled_.insert(sampled_.end(), s.tokens.size(), s.prompt ? 0 : 1);
  matmul_scratch_.SetSampledRows(sampled_);
  for (int il = 0; il < c.n_layer; ++il) Layer(il, seqs, n_tokens);
  // The last layer's feed-forward output (each layer's norm adds the one before).
  if (c.n_layer > 0) ops::Add(x_.data(), out_.data(), n_tokens * c.n_embd);
  for (size_t si = 0; si < seqs.size(); ++si) seqs[si].cache->Commit(plans_[si], &pool_);
  *n_tokens_out = n_tokens;
  return Status::Ok();
}

Status Forward::RunHidden(std::span<const SeqInput> seqs, float* hidden) {
  const ModelConfig& c = model_.config();
  int64_t n_tokens = 0;
  RETURN_IF_ERROR(RunLayers(seqs, &n_tokens));
  if (n_tokens == 0) return Status::Ok();
  pool_.ParallelFor(n_tokens, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r)
      ops::RmsNorm(x_.data() + r * c.n_embd, model_.output_norm(), hidden + r * c.n_embd,
                   c.n_embd, c.rms_eps);
  });
  return Status::Ok();
}

Status Forward::Run(std::span<const SeqInput> seqs, float* logits) {
  const ModelConfig& c = model_.config();
  int64_t n_tokens = 0;
  RETURN_IF_ERROR(RunLayers(seqs, &n_tokens));
  if (n_tokens == 0) return Status::Ok();

  // Final norm of the rows whose logits are wanted, gathered into xn: [n_out, n_embd].
  int64_t n_out = 0;
  int64_t row = 0;
  sampled_.clear();  // of the gathered rows
  for (const SeqInput& s : seqs) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t first = s.logits == LogitsWanted::kAll ? 0 : s.logits == LogitsWanted::kLast ? n - 1 : n;
    for (int64_t i = first; i < n; ++i) {
      ops::RmsNorm(x_.data() + (row + i) * c.n_embd, model_.output_norm(),
                   xn_.data() + (n_out++) * c.n_embd, c.n_embd, c.rms_eps);
      sampled_.push_back(s.prompt ? 0 : 1);
    }
    row += n;
  }
  matmul_scratch_.SetSampledRows(sampled_);
  if (n_out > 0)
    ops::Matmul(pool_, model_.output(), xn_.data(), n_out, logits, c.n_vocab, matmul_scratch_);
  return Status::Ok();
}

void Forward::Layer(int il, std::span<const SeqInput> seqs, int64_t n_tokens) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.layer(il);
  const int64_t E = c.n_embd;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  const ops::RopeConfig rope = c.rope();
  // x += out (with `add`: the residual of the block before) then xn = norm(x),
  // row by row in one parallel pass.
  auto norm_rows = [&](const float* weight, bool add) {
    pool_.ParallelFor(n_tokens, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        if (add) ops::Add(x_.data() + r * E, out_.data() + r * E, E);
        ops::RmsNorm(x_.data() + r * E, weight, xn_.data() + r * E, E, c.rms_eps);
      }
    });
  };

  // Attention block (out: the feed-forward output of layer il - 1).
  norm_rows(w.attn_norm, il > 0);
  const ops::MatmulOut qkv[] = {
      {&w.wq, q_.data(), q_dim}, {&w.wk, k_.data(), kv_dim}, {&w.wv, v_.data(), kv_dim}};
  ops::MatmulGroup(pool_, qkv, xn_.data(), n_tokens, matmul_scratch_);
  BiasAndPermute(w, n_tokens);
  int64_t row = 0;
  attn_args_.clear();
  attn_views_.clear();
  for (size_t si = 0; si < seqs.size(); ++si) attn_views_.push_back(seqs[si].cache->View(il));
  for (size_t si = 0; si < seqs.size(); ++si) {
    KvPlan& plan = plans_[si];
    const int64_t n = plan.n_tokens;
    float* q = q_.data() + row * q_dim;
    float* k = k_.data() + row * kv_dim;
    float* v = v_.data() + row * kv_dim;
    const KvLayerView& view = attn_views_[si];
    if (view.rope_k == RopeK::kCached) {  // deferred: attention rotates on the fly
      const float* cos = rope_cos_.data() + row * (c.n_rot / 2);
      const float* sin = rope_sin_.data() + row * (c.n_rot / 2);
      ops::RopeWithAngles(rope, cos, sin, q, n, c.n_head);
      ops::RopeWithAngles(rope, cos, sin, k, n, c.n_head_kv);
    }
    AttentionArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.q_stride = q_dim;
    args.kv_stride = kv_dim;
    args.n_head = c.n_head;
    args.n_head_kv = c.n_head_kv;
    args.head_dim = c.head_dim;
    args.cache = &view;
    args.plan = &plan;
    args.rope = &rope_table_;
    args.out = att_.data() + row * q_dim;
    args.out_stride = q_dim;
    args.prompt = seqs[si].prompt;
    attn_args_.push_back(args);
    row += n;
  }
  // Every sequence's attention in one parallel region, then the writes (each
  // ubatch reads its own keys and values from k_/v_, not from its cache):
  // the rows attention made in the cache's stored form.
  AttendBatch(pool_, attn_args_, attn_scratch_);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const AttentionScratch::Cut& cut = attn_scratch_.cuts()[si];
    seqs[si].cache->WriteStored(il, plans_[si], cut.chunk_k, cut.chunk_k_row_bytes, cut.chunk_v,
                                cut.chunk_v_row_bytes);
  }
  ops::Matmul(pool_, w.wo, att_.data(), n_tokens, out_.data(), E, matmul_scratch_);

  // Feed-forward block (SwiGLU); its output stays in out_ for the next
  // layer's norm (or RunLayers) to add.
  norm_rows(w.ffn_norm, true);
  const ops::MatmulOut gate_up[] = {{&w.w_gate, gate_.data(), c.n_ff},
                                     {&w.w_up, up_.data(), c.n_ff}};
  ops::MatmulGroup(pool_, gate_up, xn_.data(), n_tokens, matmul_scratch_);
  // Tokens split so each part has at least 8K elements (fewer run on this thread).
  const int64_t ff = c.n_ff;
  pool_.ParallelFor(n_tokens, (8192 + ff - 1) / ff, [&](int64_t b, int64_t e, int) {
    ops::SwiGlu(gate_.data() + b * ff, up_.data() + b * ff, gate_.data() + b * ff, (e - b) * ff);
  });
  ops::Matmul(pool_, w.w_down, gate_.data(), n_tokens, out_.data(), E, matmul_scratch_);
}

void Forward::BiasAndPermute(const LayerWeights& w, int64_t n_tokens) {
  const ModelConfig& c = model_.config();
  const bool permute = c.permute_qk();
  if (!permute && w.bq == nullptr && w.bk == nullptr && w.bv == nullptr) return;
  const int64_t hd = c.head_dim, half = c.n_rot / 2;
  const int64_t q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  pool_.ParallelFor(n_tokens, 16, [&](int64_t b, int64_t e, int thread) {
    float* tmp = perm_.data() + thread * hd;  // [n_rot]
    // NeoX pair (i, i + half) becomes interleaved pair (2i, 2i + 1); dims >= n_rot stay.
    auto permute_heads = [&](float* x, int64_t n_heads) {
      for (int64_t h = 0; h < n_heads; ++h) {
        float* head = x + h * hd;
        for (int64_t i = 0; i < half; ++i) tmp[2 * i] = head[i], tmp[2 * i + 1] = head[i + half];
        std::copy(tmp, tmp + 2 * half, head);
      }
    };
    for (int64_t r = b; r < e; ++r) {
      float* q = q_.data() + r * q_dim;
      float* k = k_.data() + r * kv_dim;
      if (w.bq != nullptr) ops::Add(q, w.bq, q_dim);
      if (w.bk != nullptr) ops::Add(k, w.bk, kv_dim);
      if (w.bv != nullptr) ops::Add(v_.data() + r * kv_dim, w.bv, kv_dim);
      if (permute) permute_heads(q, c.n_head), permute_heads(k, c.n_head_kv);
    }
  });
}

Status Forward::Decode(std::span<KvCache* const> caches, std::span<const int32_t> tokens,
                       float* logits) {
  if (caches.size() != tokens.size())
    return Errorf("forward: {} caches for {} decode tokens", caches.size(), tokens.size());
  decode_inputs_.clear();
  for (size_t i = 0; i < caches.size(); ++i)
    decode_inputs_.push_back(SeqInput{caches[i], tokens.subspan(i, 1), LogitsWanted::kLast});
  return Run(decode_inputs_, logits);
}

}  // namespace rotor
