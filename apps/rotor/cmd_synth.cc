// rotor synth: a random-weight GGUF in the shape of a real model, for benchmarks.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "base/timer.h"
#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "model/quantize.h"
#include "model/synth.h"

namespace rotor::cli {
namespace {

constexpr const char* kDefaultVocab = "models/ggml-vocab-llama-spm.gguf";

// The bundled vocabulary from any working directory (FindBundledFile).
std::string FindDefaultVocab() { return FindBundledFile(kDefaultVocab); }

struct SynthArgs {
  std::string shape = "stories15m";
  std::string type = "f32";
  std::string vocab;  // empty: FindDefaultVocab()
  std::string out;
  uint64_t seed = 1;
  int threads = 0;
  int dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, n_vocab = 0, ctx = 0;
  std::optional<float> rope_base;  // the shape's when absent
  bool no_vocab = false;
};

int RunSynth(const SynthArgs& a) {
  Result<SynthSpec> preset = SynthPreset(a.shape);
  if (!preset.ok()) return Fail(preset.status());
  SynthSpec s = *preset;
  // f32 f16 bf16 q8_0 q4_0: every matrix written in that type. Any other
  // `rotor quantize` target: written in f32, then quantized with its rules.
  std::optional<DType> type = ParseDType(a.type);
  std::optional<QuantTarget> target;
  if (!type || !Traits(*type).supported) {
    Result<QuantTarget> t = ParseQuantTarget(a.type);
    if (!t.ok())
      return Fail(Errorf("synth: --type '{}' is neither a weight type (f32, f16, bf16, q8_0, q4_0, q4_1, "
                         "q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K) nor a quantize type: {}",
                         a.type, fmt::join(QuantTargetNames(), " ")));
    target = *t;
    type = DType::kF32;
  }
  s.type = *type;
  s.seed = a.seed;
  if (a.dim) s.n_embd = a.dim;
  if (a.ffn) s.n_ff = a.ffn;
  if (a.layers) s.n_layer = a.layers;
  if (a.heads) s.n_head = a.heads, s.n_head_kv = a.kv_heads ? a.kv_heads : a.heads;
  if (a.kv_heads) s.n_head_kv = a.kv_heads;
  if (a.n_vocab) s.n_vocab = a.n_vocab;
  if (a.ctx) s.n_ctx = a.ctx;
  if (a.rope_base) s.rope_base = *a.rope_base;
  std::unique_ptr<GgufFile> vocab;
  if (!a.no_vocab) {
    Result<std::unique_ptr<GgufFile>> v =
        GgufFile::Open(a.vocab.empty() ? FindDefaultVocab() : a.vocab);
    if (!v.ok())
      return Fail(v.status().WithContext(
          "synth: --vocab-file (or --no-vocab-file for a small byte-level vocabulary)"));
    vocab = std::move(*v);
  }
  ThreadPool pool(a.threads > 0 ? a.threads : HardwareThreads());
  Timer timer;
  const std::string f32_path = a.out + ".f32.tmp";
  Status st = WriteSynthModel(s, vocab.get(), target ? f32_path : a.out, pool);
  if (!st.ok()) return Fail(st);
  if (target) {
    Result<QuantizeStats> q = QuantizeModel(f32_path, a.out, {.target = *target}, pool);
    std::filesystem::remove(f32_path);
    if (!q.ok()) return Fail(q.status().WithContext("synth"));
  }
  fmt::print(stderr, "rotor: wrote {} ({} {}, {} layers, dim {}, ffn {}, heads {}/{}) in {:.1f} s\n",
             a.out, a.shape, target ? target->name : std::string(DTypeName(s.type)), s.n_layer, s.n_embd, s.n_ff, s.n_head,
             s.n_head_kv, timer.ElapsedSeconds());
  return 0;
}

}  // namespace

Runner RegisterSynth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* sub = app.add_subcommand("synth", "write a random-weight GGUF of a real model's shape");
  sub->add_option("-o,--out", a->out, "output GGUF file")->required();
  sub->add_option("--shape", a->shape, fmt::format("preset: {}", fmt::join(SynthPresetNames(), ", ")))
      ->capture_default_str();
  sub->add_option("--type", a->type, "weight type: f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|q2_K|q3_K|q4_K|q5_K|q6_K "
                  "(every matrix; rows the type cannot hold fall back like llama-quantize: q4_K to q5_0, ...), "
                  "or a rotor quantize mix (Q4_K_M, Q5_K_S, ...: written in f32, then quantized with its rules)")->capture_default_str();
  sub->add_option("--seed", a->seed, "RNG seed")->capture_default_str();
  sub->add_option("--vocab-file", a->vocab, "GGUF whose tokenizer.* keys are copied (default: the bundled models/ggml-vocab-llama-spm.gguf)")
      ->capture_default_str();
  sub->add_flag("--no-vocab-file", a->no_vocab, "generate a small byte-level vocabulary instead")
      ->excludes("--vocab-file");
  sub->add_option("--dim", a->dim, "embedding length")->check(CLI::Range(1, 1 << 16));
  sub->add_option("--ffn", a->ffn, "feed-forward length")->check(CLI::Range(1, 1 << 18));
  sub->add_option("--layers", a->layers, "blocks")->check(CLI::Range(1, 512));
  sub->add_option("--heads", a->heads, "attention heads")->check(CLI::Range(1, 1024));
  sub->add_option("--kv-heads", a->kv_heads, "KV heads")->check(CLI::Range(1, 1024));
  sub->add_option("--vocab", a->n_vocab, "vocabulary size")->check(CLI::Range(260, 1 << 20));
  sub->add_option("--ctx", a->ctx, "trained context length")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--rope-base", a->rope_base, "RoPE frequency base");
  sub->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 1024));
  return [a] { return RunSynth(*a); };
}

}  // namespace rotor::cli
