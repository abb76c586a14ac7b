// rotor quantize: a GGUF model in another weight type or a llama.cpp mix.
#include <fmt/format.h>

#include <memory>

#include "base/memory.h"
#include "base/thread_pool.h"
#include "cli_common.h"
#include "commands.h"
#include "model/quantize.h"

namespace rotor::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
  bool allow_requantize = false, leave_output = false, pure = false, quiet = false;
};

std::string Shape(const std::vector<int64_t>& ne) {
  return fmt::format("[{}]", fmt::join(ne, ", "));
}

int RunQuantize(const QuantizeArgs& a) {
  Result<QuantTarget> target = ParseQuantTarget(a.type);
  if (!target.ok()) return Fail(target.status());
  QuantizeOptions o{.target = *target,
                    .allow_requantize = a.allow_requantize,
                    .leave_output = a.leave_output,
                    .pure = a.pure};
  ThreadPool pool(a.threads > 0 ? a.threads : HardwareThreads());
  auto progress = [&a](size_t i, size_t n, const QuantizedTensor& t) {
    if (a.quiet) return;
    std::string what = t.convert
                           ? fmt::format("{} -> {}", DTypeName(t.in_type), DTypeName(t.out_type))
                           : fmt::format("{} (copied)", DTypeName(t.in_type));
    if (t.fallback_from)
      what += fmt::format(" (fallback: row {} is not a multiple of the {} block)", t.ne[0],
                          DTypeName(*t.fallback_from));
    fmt::print(stderr, "[{:>4}/{}] {:<32} {:<16} {} -> {}  {}\n", i + 1, n, t.name, Shape(t.ne),
               HumanBytes(static_cast<int64_t>(t.in_bytes)),
               HumanBytes(static_cast<int64_t>(t.out_bytes)), what);
  };
  Result<QuantizeStats> st = QuantizeModel(a.in, a.out, o, pool, progress);
  if (!st.ok()) return Fail(st.status());
  fmt::print(stderr,
             "rotor: quantized {} ({}) -> {} ({}, {}) in {:.2f} s: {} tensors converted, {} "
             "copied, {} fallbacks; {:.2f} bits per weight\n",
             a.in, HumanBytes(static_cast<int64_t>(st->in_file_bytes)), a.out,
             HumanBytes(static_cast<int64_t>(st->out_file_bytes)), o.target.name, st->seconds,
             st->n_converted, st->n_copied, st->n_fallback,
             st->n_elements == 0 ? 0.0 : 8.0 * st->out_tensor_bytes / st->n_elements);
  return 0;
}

}  // namespace

Runner RegisterQuantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "convert a GGUF model to another weight type or a llama.cpp quantization mix");
  sub->add_option("input", a->in, "input GGUF model")->required();
  sub->add_option("output", a->out, "output GGUF file")->required();
  sub->add_option("type", a->type,
                  fmt::format("target: {} (case-insensitive)", fmt::join(QuantTargetNames(), " ")))
      ->required();
  sub->add_option("-t,--threads", a->threads, "threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--allow-requantize", a->allow_requantize,
                "allow converting already-quantized tensors to another quantized type");
  sub->add_flag("--leave-output", a->leave_output, "copy output.weight unchanged");
  sub->add_flag(
      "--pure", a->pure,
      "no per-tensor rules: every converted tensor gets the target type (fallbacks aside)");
  sub->add_flag("-q,--quiet", a->quiet, "no per-tensor progress lines");
  return [a] { return RunQuantize(*a); };
}

}  // namespace rotor::cli
