// A Llama-graph model (architectures llama, qwen2): hyper-parameters from the
// GGUF `<arch>.*` keys (model_config.h) and weights as views into the mmap'd
// file (norm and bias vectors converted to f32 once).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/memory.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "kv/kv_key_offsets.h"
#include "model/model_config.h"
#include "ops/ops.h"

namespace rotor {

struct LayerWeights {
  const float* attn_norm;  // [n_embd]
  ops::Weight wq;          // [n_embd] -> [n_head * head_dim]
  ops::Weight wk;          // [n_embd] -> [n_head_kv * head_dim]
  ops::Weight wv;          // [n_embd] -> [n_head_kv * head_dim]
  const float* bq;         // [n_head * head_dim] or null (qwen2: attn_q.bias)
  const float* bk;         // [n_head_kv * head_dim] or null
  const float* bv;         // [n_head_kv * head_dim] or null
  ops::Weight wo;          // [n_head * head_dim] -> [n_embd]
  const float* ffn_norm;   // [n_embd]
  ops::Weight w_gate;      // [n_embd] -> [n_ff]
  ops::Weight w_up;        // [n_embd] -> [n_ff]
  ops::Weight w_down;      // [n_ff] -> [n_embd]
};

class Model {
 public:
  // Opens and validates a GGUF model file. Errors name the file, key or tensor.
  // pack_matrices false: run from the mapped rows until PackMatrices() (rotor
  // bench validates every model first and packs each when its tests start).
  static Result<std::unique_ptr<Model>> Load(const std::string& path, bool pack_matrices = true,
                                             const GgufOpenOptions& open = {});
  // Builds a model from an already opened file (takes ownership).
  static Result<std::unique_ptr<Model>> FromGguf(std::unique_ptr<GgufFile> file,
                                                 bool pack_matrices = true);

  const ModelConfig& config() const { return config_; }
  // The KV cache shape of caches of n_ctx tokens: config().kv_shape with the
  // model's key offsets (kv/kv_key_offsets.h), computed on first use by a
  // short calibration run (model/key_offsets.h).
  KvShape kv_shape(int n_ctx) const;
  const GgufFile& file() const { return *file_; }
  const ops::Weight& token_embd() const { return token_embd_; }  // [n_vocab rows of n_embd]
  const float* output_norm() const { return output_norm_; }      // [n_embd]
  const ops::Weight& output() const { return output_; }          // [n_embd] -> [n_vocab]
  bool tied_output() const { return tied_output_; }
  const LayerWeights& layer(int i) const { return layers_[i]; }
  // Row-interleaved copies of the matrices the active kernels read faster so
  // (ops::PackingHelps), in one arena of 2 MiB pages; the mapped pages they
  // replace are released. Load does it unless asked not to; a second call
  // does nothing.
  void PackMatrices();
  // Bytes of weights a decode step reads (every matrix once; embeddings one row).
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t n_params() const { return n_params_; }
  // A 64-bit fingerprint of the file: its size, its first MiB (header,
  // metadata, tensor table) and 64 samples of its tensor data. Cached KV is
  // keyed by it (prefix cache, prompt-cache files).
  uint64_t identity() const { return identity_; }
  // The most common matrix type, e.g. "q8_0" (for reports).
  std::string type_name() const { return type_name_; }

 private:
  uint64_t identity_ = 0;
  Model() = default;
  Status Init();
  Result<ops::Weight> Matrix(const std::string& name, int64_t k, int64_t n);
  Result<const float*> Vector(const std::string& name, int64_t n);
  Result<const float*> OptionalVector(const std::string& name, int64_t n);  // null if absent

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ops::Weight token_embd_{};
  const float* output_norm_ = nullptr;
  ops::Weight output_{};
  bool tied_output_ = false;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<float>> owned_vectors_;  // norms stored in a non-f32 type
  AlignedBuffer<uint8_t> packed_;  // [sum of PackedWeightBytes(w), each 64-aligned]: the arena
  int64_t weight_bytes_ = 0;
  int64_t n_params_ = 0;
  std::set<std::string, std::less<>> used_tensors_;  // read by Init: no others may be in the file
  std::string type_name_;
  std::unique_ptr<KvKeyOffsets> key_offsets_;
};

}  // namespace rotor
