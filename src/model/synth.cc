#include "model/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "gguf/gguf_writer.h"
#include "model/model_config.h"
#include "model/quantize_rules.h"
#include "ops/quant.h"

namespace rotor {

Result<SynthSpec> SynthPreset(const std::string& name) {
  SynthSpec s;
  s.name = name;
  if (name == "stories15m") {
    s.n_embd = 288, s.n_ff = 768, s.n_layer = 6, s.n_head = 6, s.n_head_kv = 6, s.n_ctx = 256;
  } else if (name == "stories110m") {
    s.n_embd = 768, s.n_ff = 2048, s.n_layer = 12, s.n_head = 12, s.n_head_kv = 12, s.n_ctx = 1024;
  } else if (name == "smollm2-135m") {
    s.n_embd = 576, s.n_ff = 1536, s.n_layer = 30, s.n_head = 9, s.n_head_kv = 3, s.n_ctx = 8192;
    s.rope_base = 100000.f;
  } else if (name == "llama3.2-1b") {
    s.n_embd = 2048, s.n_ff = 8192, s.n_layer = 16, s.n_head = 32, s.n_head_kv = 8;
    s.n_ctx = 131072, s.rope_base = 500000.f;
    s.rope_scaling = "llama3", s.rope_scale = 32.f, s.rope_orig_ctx = 8192, s.rope_freqs = true;
  } else if (name == "llama3-tiny") {  // a test shape: the factors act within 100 tokens
    s.n_embd = 128, s.n_ff = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.n_ctx = 512;
    s.rope_base = 500000.f;
    s.rope_scaling = "llama3", s.rope_scale = 8.f, s.rope_orig_ctx = 64, s.rope_freqs = true;
  } else if (name == "qwen2.5-0.5b") {
    s.arch = "qwen2", s.qkv_bias = true, s.tied_output = true, s.rms_eps = 1e-6f;
    s.n_embd = 896, s.n_ff = 4864, s.n_layer = 24, s.n_head = 14, s.n_head_kv = 2;
    s.n_vocab = 151936, s.n_ctx = 32768, s.rope_base = 1000000.f;
  } else if (name == "qwen2-tiny") {  // a test shape
    s.arch = "qwen2", s.qkv_bias = true, s.tied_output = true, s.rms_eps = 1e-6f;
    s.n_embd = 128, s.n_ff = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.n_ctx = 512;
    s.rope_base = 1000000.f;
  } else {
    return Errorf("synth: unknown shape '{}' (known: {})", name,
                  fmt::join(SynthPresetNames(), ", "));
  }
  return s;
}

std::vector<std::string> SynthPresetNames() {
  return {"stories15m",   "stories110m", "smollm2-135m", "llama3.2-1b",
          "qwen2.5-0.5b", "qwen2-tiny",  "llama3-tiny"};
}

namespace {

// splitmix64: a fast, seedable generator; each tensor gets its own stream.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Uniform() { return static_cast<float>(static_cast<double>(Next() >> 11) * 0x1.0p-52 - 1.0); }
};

uint64_t HashName(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A generated SPM vocabulary: specials, 256 byte tokens, then letter pieces.
void WriteTinyVocab(GgufWriter& w, int n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
    types.push_back(6);
  }
  const std::string sp = "\xE2\x96\x81";  // U+2581
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (int i = 0; static_cast<int>(tokens.size()) < n_vocab; ++i) {
    std::string piece;
    if (i < 26) piece = std::string(1, letters[i]);
    else if (i < 52) piece = sp + letters[i - 26];
    else piece = sp + letters[(i / 26) % 26] + letters[i % 26] + std::to_string(i);
    tokens.push_back(piece);
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);
  }
  tokens.resize(n_vocab), scores.resize(n_vocab), types.resize(n_vocab);
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetF32Array("tokenizer.ggml.scores", scores);
  w.SetI32Array("tokenizer.ggml.token_type", types);
  w.SetU32("tokenizer.ggml.bos_token_id", 1);
  w.SetU32("tokenizer.ggml.eos_token_id", 2);
  w.SetU32("tokenizer.ggml.unknown_token_id", 0);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
}

// Extends a copied vocabulary to n_vocab with unused tokens (never produced
// by the tokenizer): a real model's embedding size with a bundled vocabulary.
Status PadVocab(const GgufFile& vocab, int n_vocab, GgufWriter& w) {
  ASSIGN_OR_RETURN(std::vector<std::string> tokens, vocab.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n_file = tokens.size();
  std::vector<float> scores(n_file, 0.f);
  if (vocab.Has("tokenizer.ggml.scores")) {
    ASSIGN_OR_RETURN(scores, vocab.GetFloatArray("tokenizer.ggml.scores"));
  }
  std::vector<int32_t> types(n_file, 1);
  if (vocab.Has("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> t, vocab.GetIntArray("tokenizer.ggml.token_type"));
    types.assign(t.begin(), t.end());
  }
  if (scores.size() != n_file || types.size() != n_file)
    return Errorf("synth: the vocabulary's scores or token types do not match its {} tokens",
                  n_file);
  for (size_t i = n_file; i < static_cast<size_t>(n_vocab); ++i) {
    tokens.push_back(fmt::format("<unused_{}>", i));
    scores.push_back(-1e9f);
    types.push_back(5);  // unused
  }
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetF32Array("tokenizer.ggml.scores", scores);
  w.SetI32Array("tokenizer.ggml.token_type", types);
  return Status::Ok();
}

}  // namespace

Status WriteSynthModel(const SynthSpec& spec, const GgufFile* vocab, const std::string& path,
                       ThreadPool& pool) {
  SynthSpec s = spec;
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_head_kv != 0)
    return Errorf("synth: dim {} / heads {} / kv heads {} do not divide", s.n_embd, s.n_head,
                  s.n_head_kv);
  if (!Traits(s.type).supported || Traits(s.type).block_size > 256)
    return Errorf("synth: type {} cannot be written", DTypeName(s.type));
  GgufWriter w;
  if (s.arch != "llama" && s.arch != "qwen2")
    return Errorf("synth: architecture '{}' is not one of llama, qwen2", s.arch);
  const int64_t hd = s.n_embd / s.n_head;
  const int n_rot = s.n_rot > 0 ? s.n_rot : static_cast<int>(hd);
  if (n_rot % 2 != 0 || n_rot > hd)
    return Errorf("synth: rope dimensions {} must be even and <= head size {}", n_rot, hd);
  if (!(s.rope_base > 1.f) || !std::isfinite(s.rope_base))  // what the loader accepts
    return Errorf("synth: --rope-base {} must be a finite number > 1", s.rope_base);
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", s.name);
  w.SetU32("general.file_type", static_cast<uint32_t>(FileTypeOf(s.type)));
  if (vocab != nullptr) {
    ASSIGN_OR_RETURN(std::vector<std::string> tokens, vocab->GetStringArray("tokenizer.ggml.tokens"));
    const int n_file = static_cast<int>(tokens.size());
    if (s.n_vocab != 0 && s.n_vocab < n_file)
      return Errorf("synth: --vocab {} is smaller than the vocabulary file's {} tokens", s.n_vocab,
                    n_file);
    if (s.n_vocab == 0) s.n_vocab = n_file;
    for (const GgufKv& kv : vocab->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.Set(kv.key, kv.value);
    if (s.n_vocab > n_file) RETURN_IF_ERROR(PadVocab(*vocab, s.n_vocab, w));
  } else {
    if (s.n_vocab == 0) s.n_vocab = 512;
    if (s.n_vocab < 260) return Errorf("synth: --vocab {} too small (at least 260)", s.n_vocab);
    WriteTinyVocab(w, s.n_vocab);
  }
  const std::string p = s.arch + ".";
  w.SetU32(p + "vocab_size", s.n_vocab);
  w.SetU32(p + "context_length", s.n_ctx);
  w.SetU32(p + "embedding_length", s.n_embd);
  w.SetU32(p + "block_count", s.n_layer);
  w.SetU32(p + "feed_forward_length", s.n_ff);
  w.SetU32(p + "attention.head_count", s.n_head);
  w.SetU32(p + "attention.head_count_kv", s.n_head_kv);
  w.SetU32(p + "rope.dimension_count", n_rot);
  w.SetF32(p + "rope.freq_base", s.rope_base);
  w.SetF32(p + "attention.layer_norm_rms_epsilon", s.rms_eps);
  // A converted Llama 3.1+ file carries its factors as rope_freqs.weight and
  // no rope.scaling keys (llama.cpp refuses rope.scaling.type = llama3, a
  // type it does not define); without the tensor the keys say how to compute them.
  const bool factors_tensor = s.rope_scaling == "llama3" && s.rope_freqs;
  if (s.rope_scaling != "none" && !factors_tensor) {
    w.SetString(p + "rope.scaling.type", s.rope_scaling);
    w.SetF32(p + "rope.scaling.factor", s.rope_scale);
  }
  if (s.rope_scaling == "llama3" && !factors_tensor) {
    w.SetF32(p + "rope.scaling.low_freq_factor", 1.0f);
    w.SetF32(p + "rope.scaling.high_freq_factor", 4.0f);
    w.SetU32(p + "rope.scaling.original_context_length", s.rope_orig_ctx);
  }

  // Tensor payloads live until Write returns.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  // Rows of k elements the type's blocks cannot hold take llama-quantize's
  // fallback type (e.g. q4_K -> q5_0 for k = 176), so files mix types.
  auto matrix = [&](const std::string& name, int64_t k, int64_t n, float stddev,
                    DType want) -> Status {
    const DType type = FallbackForRowSize(want, k);
    const int64_t row_bytes = RowBytes(type, k);
    auto bytes = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(row_bytes * n));
    const uint64_t base = HashName(name, s.seed);
    const float scale = stddev * std::sqrt(3.0f);  // uniform [-a, a] has std a / sqrt(3)
    pool.ParallelFor(n, 64, [&](int64_t b, int64_t e, int) {
      std::vector<float> row(k);
      for (int64_t r = b; r < e; ++r) {
        Rng rng{base + static_cast<uint64_t>(r) * 0x632BE59BD9B4E019ull};
        for (int64_t j = 0; j < k; ++j) row[j] = rng.Uniform() * scale;
        ops::QuantizeRow(type, row.data(), bytes->data() + r * row_bytes, k);
      }
    });
    RETURN_IF_ERROR(w.AddTensorView(name, type, {k, n}, bytes->data(), bytes->size()));
    store.push_back(std::move(bytes));
    return Status::Ok();
  };
  auto ones = [&](const std::string& name, int64_t n, float value = 1.0f) -> Status {
    std::vector<float> v(n, value);
    return w.AddTensor(name, DType::kF32, {n}, v.data(), v.size() * sizeof(float));
  };
  const int64_t q_dim = s.n_embd, kv_dim = hd * s.n_head_kv;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float ff_std = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
  // Q/K biases of std 0.5 against projections of std 1: large enough to
  // matter. A V bias passes through attention unchanged (the probabilities sum
  // to 1) and adds the same vector to every position: kept small, or every
  // position's logits share one winner and greedy runs repeat a token.
  auto bias = [&](const std::string& name, int64_t n, float stddev) -> Status {
    std::vector<float> v(n);
    Rng rng{HashName(name, s.seed)};
    for (float& x : v) x = rng.Uniform() * stddev * std::sqrt(3.0f);
    return w.AddTensor(name, DType::kF32, {n}, v.data(), v.size() * sizeof(float));
  };
  // Tied embeddings are the output matrix too. A token's own embedding stays
  // in the residual stream and scores |e|^2 / rms(x) for itself: with the
  // output's usual scale a greedy run repeats its last token. So the rows are
  // small (the first norm makes the input scale irrelevant) and the final norm
  // weight restores logits of a few units.
  const float embd_std = s.tied_output ? 0.25f * in_std : 1.0f;
  const float out_norm = s.tied_output ? 8.0f : 1.0f;
  RETURN_IF_ERROR(matrix("token_embd.weight", s.n_embd, s.n_vocab, embd_std, s.type));
  if (s.rope_scaling == "llama3" && s.rope_freqs) {
    const std::vector<float> ff =
        Llama3FreqFactors(n_rot, s.rope_base, s.rope_scale, 1.0, 4.0, s.rope_orig_ctx);
    RETURN_IF_ERROR(w.AddTensor("rope_freqs.weight", DType::kF32, {static_cast<int64_t>(ff.size())},
                                ff.data(), ff.size() * sizeof(float)));
  }
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    RETURN_IF_ERROR(ones(b + "attn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(matrix(b + "attn_q.weight", s.n_embd, q_dim, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "attn_k.weight", s.n_embd, kv_dim, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "attn_v.weight", s.n_embd, kv_dim, in_std, s.type));
    if (s.qkv_bias) {
      RETURN_IF_ERROR(bias(b + "attn_q.bias", q_dim, 0.5f));
      RETURN_IF_ERROR(bias(b + "attn_k.bias", kv_dim, 0.5f));
      RETURN_IF_ERROR(bias(b + "attn_v.bias", kv_dim, 0.05f));
    }
    RETURN_IF_ERROR(matrix(b + "attn_output.weight", q_dim, s.n_embd, in_std, s.type));
    RETURN_IF_ERROR(ones(b + "ffn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(matrix(b + "ffn_gate.weight", s.n_embd, s.n_ff, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "ffn_up.weight", s.n_embd, s.n_ff, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "ffn_down.weight", s.n_ff, s.n_embd, ff_std, s.type));
  }
  RETURN_IF_ERROR(ones("output_norm.weight", s.n_embd, out_norm));
  // Output std 2/sqrt(dim): logits spread over a few units, so sampling is not uniform.
  if (!s.tied_output)
    RETURN_IF_ERROR(matrix("output.weight", s.n_embd, s.n_vocab, 2.0f * in_std, s.type));
  return w.Write(path);
}

}  // namespace rotor
