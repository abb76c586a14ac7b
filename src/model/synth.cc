#include "model/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "gguf/gguf_writer.h"
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
  } else {
    return Errorf("synth: unknown shape '{}' (known: {})", name,
                  fmt::join(SynthPresetNames(), ", "));
  }
  return s;
}

std::vector<std::string> SynthPresetNames() {
  return {"stories15m", "stories110m", "smollm2-135m", "llama3.2-1b"};
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

// llama.cpp's general.file_type (LLAMA_FTYPE_*) of a model mostly of type t.
uint32_t LlamaFileType(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;  // Q3_K_S
    case DType::kQ4_K: return 14;  // Q4_K_S
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kIQ4_NL: return 25;
    case DType::kBF16: return 32;
    default: return 0;
  }
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
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", s.name);
  w.SetU32("general.file_type", LlamaFileType(s.type));
  if (vocab != nullptr) {
    ASSIGN_OR_RETURN(std::vector<std::string> tokens, vocab->GetStringArray("tokenizer.ggml.tokens"));
    if (s.n_vocab != 0 && s.n_vocab != static_cast<int>(tokens.size()))
      return Errorf("synth: --vocab {} differs from the vocabulary file's {} tokens", s.n_vocab,
                    tokens.size());
    s.n_vocab = static_cast<int>(tokens.size());
    for (const GgufKv& kv : vocab->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.Set(kv.key, kv.value);
  } else {
    if (s.n_vocab == 0) s.n_vocab = 512;
    if (s.n_vocab < 260) return Errorf("synth: --vocab {} too small (at least 260)", s.n_vocab);
    WriteTinyVocab(w, s.n_vocab);
  }
  const std::string p = "llama.";
  w.SetU32(p + "vocab_size", s.n_vocab);
  w.SetU32(p + "context_length", s.n_ctx);
  w.SetU32(p + "embedding_length", s.n_embd);
  w.SetU32(p + "block_count", s.n_layer);
  w.SetU32(p + "feed_forward_length", s.n_ff);
  w.SetU32(p + "attention.head_count", s.n_head);
  w.SetU32(p + "attention.head_count_kv", s.n_head_kv);
  w.SetU32(p + "rope.dimension_count", s.n_embd / s.n_head);
  w.SetF32(p + "rope.freq_base", s.rope_base);
  w.SetF32(p + "attention.layer_norm_rms_epsilon", 1e-5f);

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
  auto ones = [&](const std::string& name, int64_t n) -> Status {
    std::vector<float> v(n, 1.0f);
    return w.AddTensor(name, DType::kF32, {n}, v.data(), v.size() * sizeof(float));
  };
  const int64_t hd = s.n_embd / s.n_head, q_dim = s.n_embd, kv_dim = hd * s.n_head_kv;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float ff_std = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
  RETURN_IF_ERROR(matrix("token_embd.weight", s.n_embd, s.n_vocab, 1.0f, s.type));
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    RETURN_IF_ERROR(ones(b + "attn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(matrix(b + "attn_q.weight", s.n_embd, q_dim, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "attn_k.weight", s.n_embd, kv_dim, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "attn_v.weight", s.n_embd, kv_dim, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "attn_output.weight", q_dim, s.n_embd, in_std, s.type));
    RETURN_IF_ERROR(ones(b + "ffn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(matrix(b + "ffn_gate.weight", s.n_embd, s.n_ff, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "ffn_up.weight", s.n_embd, s.n_ff, in_std, s.type));
    RETURN_IF_ERROR(matrix(b + "ffn_down.weight", s.n_ff, s.n_embd, ff_std, s.type));
  }
  RETURN_IF_ERROR(ones("output_norm.weight", s.n_embd));
  // Output std 2/sqrt(dim): logits spread over a few units, so sampling is not uniform.
  if (!s.tied_output)
    RETURN_IF_ERROR(matrix("output.weight", s.n_embd, s.n_vocab, 2.0f * in_std, s.type));
  return w.Write(path);
}

}  // namespace rotor
