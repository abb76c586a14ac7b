#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <thread>

#include "base/thread_pool.h"
#include "model/key_offsets.h"

namespace rotor {

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, bool pack_matrices,
                                           const GgufOpenOptions& open) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path, open));
  return FromGguf(std::move(file), pack_matrices);
}

Result<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<GgufFile> file, bool pack_matrices) {
  std::unique_ptr<Model> model(new Model());
  model->file_ = std::move(file);
  RETURN_IF_ERROR(model->Init());
  {  // FNV-1a over the size, the first MiB and 64 samples of 256 bytes.
    const uint8_t* p = model->file_->bytes();
    const uint64_t size = model->file_->file_size();
    uint64_t h = 0xcbf29ce484222325ull ^ size;
    auto add = [&](uint64_t from, uint64_t n) {
      for (uint64_t i = from; i < std::min(size, from + n); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    };
    add(0, uint64_t{1} << 20);
    for (uint64_t i = 1; i <= 64; ++i) add(size / 65 * i, 256);
    model->identity_ = h;
  }
  {
    const ModelConfig& c = model->config_;
    // The calibration's pool: a few threads (its result does not depend on how many).
    const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    model->key_offsets_ = std::make_unique<KvKeyOffsets>(
        [m = model.get(), threads] { return ComputeKeyOffsets(*m, threads); }, c.n_layer,
        c.n_head_kv * c.head_dim);
  }
  if (pack_matrices) model->PackMatrices();
  return model;
}

KvShape Model::kv_shape(int n_ctx) const {
  KvShape s = config_.kv_shape(n_ctx);
  s.k_offsets = key_offsets_.get();
  return s;
}

Result<ops::Weight> Model::Matrix(const std::string& name, int64_t k, int64_t n) {
  const GgufTensor* t = file_->FindTensor(name);
  if (t == nullptr) return Errorf("missing tensor '{}'", name);
  if (t->ne.size() != 2 || t->ne[0] != k || t->ne[1] != n)
    return Errorf("tensor '{}' has shape [{}], expected [{}, {}]", name, fmt::join(t->ne, ", "), k,
                  n);
  if (!Traits(t->type).supported)
    return Errorf("tensor '{}' has type {}, which rotor cannot run", name, DTypeName(t->type));
  ops::Weight w{t->type, k, n, t->data, static_cast<size_t>(RowBytes(t->type, k))};
  used_tensors_.insert(name);
  n_params_ += k * n;
  return w;
}

void Model::PackMatrices() {
  if (packed_.size() > 0) return;  // done before
  std::vector<ops::Weight*> all = {&output_};
  for (LayerWeights& l : layers_)
    for (ops::Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      all.push_back(w);
  // One arena for every packed copy, with 2 MiB pages as the roofline's read
  // probe has (most matrices are smaller than a huge page on their own).
  std::vector<ops::Weight*> todo;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (ops::Weight* w : all) {
    if (w->packed != nullptr || !ops::PackingHelps(w->type) ||
        w->k % Traits(w->type).block_size != 0)  // PackWeight wants whole blocks
      continue;
    todo.push_back(w);
    offsets.push_back(total);
    total += (static_cast<size_t>(ops::PackedWeightBytes(*w)) + kAlignment - 1) / kAlignment *
             kAlignment;
  }
  if (todo.empty()) return;
  packed_.Resize(total);
  AdviseHugePages(packed_.data(), packed_.bytes());  // before PackWeight writes it
  // Packing reads every matrix once and first-touches the arena's pages: a
  // few threads split each matrix's rows in groups of 32 (a multiple of
  // PackWeight's unit, 16 or 32 rows by type; the copy does not depend on the
  // split).
  ThreadPool pool(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u)));
  for (size_t i = 0; i < todo.size(); ++i) {
    ops::Weight* w = todo[i];
    uint8_t* dst = packed_.data() + offsets[i];
    pool.ParallelFor(w->n, 32,
                     [&](int64_t r0, int64_t r1, int) { ops::PackWeight(*w, dst, r0, r1); });
    w->packed = dst;
    // The rows stay readable (other ISAs, embedding lookups of a tied output).
    file_->ReleasePages(static_cast<const uint8_t*>(w->data), w->row_bytes * w->n);
  }
}

Result<const float*> Model::Vector(const std::string& name, int64_t n) {
  const GgufTensor* t = file_->FindTensor(name);
  if (t == nullptr) return Errorf("missing tensor '{}'", name);
  if (t->n_elements != n || t->ne[0] != n)
    return Errorf("tensor '{}' has shape [{}], expected [{}]", name, fmt::join(t->ne, ", "), n);
  used_tensors_.insert(name);
  n_params_ += n;
  weight_bytes_ += static_cast<int64_t>(t->n_bytes);
  if (t->type == DType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
    return reinterpret_cast<const float*>(t->data);
  if (!Traits(t->type).supported)
    return Errorf("tensor '{}' has type {}, which rotor cannot run", name, DTypeName(t->type));
  owned_vectors_.emplace_back(n);
  ops::DequantizeRow(t->type, t->data, owned_vectors_.back().data(), n);
  return static_cast<const float*>(owned_vectors_.back().data());
}

Result<const float*> Model::OptionalVector(const std::string& name, int64_t n) {
  if (file_->FindTensor(name) == nullptr) return static_cast<const float*>(nullptr);
  return Vector(name, n);
}

Status Model::Init() {
  Status s = [&]() -> Status {
    ASSIGN_OR_RETURN(config_, ReadModelConfig(*file_));
    ModelConfig& c = config_;
    if (!c.rope_freq_factors.empty() && file_->FindTensor("rope_freqs.weight") != nullptr) {
      n_params_ += c.n_rot / 2;
      used_tensors_.insert("rope_freqs.weight");  // read with the config
    }
    const GgufTensor* embd = file_->FindTensor("token_embd.weight");
    if (embd == nullptr) return Status::Error("missing tensor 'token_embd.weight'");
    if (embd->ne.size() != 2 || embd->ne[0] != c.n_embd)
      return Errorf("tensor 'token_embd.weight' has shape [{}], expected [{}, n_vocab]",
                    fmt::join(embd->ne, ", "), c.n_embd);
    if (embd->ne[1] > (1 << 24))
      return Errorf("tensor 'token_embd.weight' has {} rows, too many", embd->ne[1]);
    c.n_vocab = static_cast<int>(embd->ne[1]);
    ASSIGN_OR_RETURN(token_embd_, Matrix("token_embd.weight", c.n_embd, c.n_vocab));
    ASSIGN_OR_RETURN(output_norm_, Vector("output_norm.weight", c.n_embd));
    if (file_->FindTensor("output.weight") != nullptr) {
      ASSIGN_OR_RETURN(output_, Matrix("output.weight", c.n_embd, c.n_vocab));
    } else {
      output_ = token_embd_;
      tied_output_ = true;
    }
    weight_bytes_ += static_cast<int64_t>(output_.row_bytes) * output_.n;
    const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
    std::map<std::string, int> type_count;
    layers_.resize(c.n_layer);
    for (int i = 0; i < c.n_layer; ++i) {
      const std::string b = fmt::format("blk.{}.", i);
      LayerWeights& l = layers_[i];
      ASSIGN_OR_RETURN(l.attn_norm, Vector(b + "attn_norm.weight", c.n_embd));
      ASSIGN_OR_RETURN(l.wq, Matrix(b + "attn_q.weight", c.n_embd, q_dim));
      ASSIGN_OR_RETURN(l.wk, Matrix(b + "attn_k.weight", c.n_embd, kv_dim));
      ASSIGN_OR_RETURN(l.wv, Matrix(b + "attn_v.weight", c.n_embd, kv_dim));
      ASSIGN_OR_RETURN(l.bq, OptionalVector(b + "attn_q.bias", q_dim));
      ASSIGN_OR_RETURN(l.bk, OptionalVector(b + "attn_k.bias", kv_dim));
      ASSIGN_OR_RETURN(l.bv, OptionalVector(b + "attn_v.bias", kv_dim));
      // Biases the graph has no place for must not be silently dropped.
      for (const char* name : {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias",
                               "attn_norm.bias", "ffn_norm.bias"})
        if (file_->FindTensor(b + name) != nullptr)
          return Errorf("tensor '{}{}': architecture '{}' with this bias is not supported", b, name,
                        c.arch);
      ASSIGN_OR_RETURN(l.wo, Matrix(b + "attn_output.weight", q_dim, c.n_embd));
      ASSIGN_OR_RETURN(l.ffn_norm, Vector(b + "ffn_norm.weight", c.n_embd));
      ASSIGN_OR_RETURN(l.w_gate, Matrix(b + "ffn_gate.weight", c.n_embd, c.n_ff));
      ASSIGN_OR_RETURN(l.w_up, Matrix(b + "ffn_up.weight", c.n_embd, c.n_ff));
      ASSIGN_OR_RETURN(l.w_down, Matrix(b + "ffn_down.weight", c.n_ff, c.n_embd));
      for (const ops::Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        weight_bytes_ += static_cast<int64_t>(w->row_bytes) * w->n;
        type_count[std::string(DTypeName(w->type))] += 1;
      }
    }
    // A tensor nobody reads is a file whose metadata and tensors disagree (a
    // 5th block under block_count 4) or a variant of the architecture that
    // rotor would run wrong by leaving it out; llama.cpp refuses both too.
    for (const GgufTensor& t : file_->tensors())
      if (!used_tensors_.contains(t.name))
        return Errorf(
            "tensor '{}' is not part of a {} model of {} layers (block_count {}): the file's "
            "tensors and metadata disagree, or it is a variant rotor does not run",
            t.name, c.arch, c.n_layer, c.n_layer);
    int best = 0;
    for (const auto& [name, count] : type_count)
      if (count > best) best = count, type_name_ = name;
    return Status::Ok();
  }();
  return s.WithContext("model: " + file_->path());
}

}  // namespace rotor
