#include "model/quantize.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/check.h"
#include "base/timer.h"
#include "gguf/gguf_writer.h"
#include "ops/quant.h"

namespace rotor {
namespace {}  // namespace

QuantModelInfo QuantModelInfoOf(const GgufFile& in) {
  QuantModelInfo m;
  int n_attn_v = 0;
  for (const GgufTensor& t : in.tensors())
    if (t.name.find("attn_v.weight") != std::string::npos) ++n_attn_v;
  m.has_output = in.FindTensor("output.weight") != nullptr;
  const Result<std::string> arch = in.GetString("general.architecture");
  m.arch = arch.ok() ? *arch : "llama";
  const std::string p = m.arch + ".";
  const Result<int64_t> blocks = in.GetInt(p + "block_count");
  m.n_layer = blocks.ok() ? static_cast<int>(*blocks) : n_attn_v;
  // head_count may be a per-layer array in some files: then no GQA bonus.
  const Result<int64_t> heads = in.GetInt(p + "attention.head_count");
  if (heads.ok() && *heads > 0) {
    const Result<int64_t> kv = in.GetIntOr(p + "attention.head_count_kv", *heads);
    if (kv.ok() && *kv > 0) m.n_gqa = static_cast<int>(*heads / *kv);
  }
  return m;
}

namespace {

// Errors when ops in this build cannot read (role "read") or write `t`.
Status CheckSupported(DType t, const QuantizedTensor& q, std::string_view role) {
  if (ops::IsSupported(t)) return Status::Ok();
  std::string why;
  if (q.fallback_from)
    why = fmt::format(" (the fallback for {}: row length {} is not a multiple of its block)",
                      DTypeName(*q.fallback_from), q.ne[0]);
  return Errorf(
      "quantize: tensor '{}': type {}{} is not yet supported by this build of rotor "
      "(ops cannot {} it)",
      q.name, DTypeName(t), why, role);
}

// Fills `dst` with tensor `t` converted to `out` ([rows, RowBytes(out, ne0)]).
void ConvertTensor(const GgufTensor& t, DType out, uint8_t* dst, ThreadPool& pool) {
  const int64_t n = t.ne[0];
  const int64_t rows = t.rows();
  const int64_t in_row = RowBytes(t.type, n), out_row = RowBytes(out, n);
  // Rows per task: about 64K elements, so small tensors stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / n);
  pool.ParallelFor(rows, grain, [&](int64_t b, int64_t e, int) {
    std::vector<float> row(n);  // [n] one dequantized row
    for (int64_t r = b; r < e; ++r) {
      const uint8_t* src = t.data + r * in_row;
      const float* f = row.data();
      if (t.type == DType::kF32) {
        std::memcpy(row.data(), src, n * sizeof(float));  // the mmap may be unaligned
      } else {
        ops::DequantizeRow(t.type, src, row.data(), n);
      }
      ops::QuantizeRow(out, f, dst + r * out_row, n);
    }
  });
}

}  // namespace

Result<std::vector<QuantizedTensor>> PlanQuantization(const GgufFile& in,
                                                      const QuantizeOptions& options) {
  const QuantModelInfo model = QuantModelInfoOf(in);
  const QuantRuleOptions rules{.pure = options.pure, .leave_output = options.leave_output};
  std::vector<QuantizedTensor> plan;
  plan.reserve(in.tensors().size());
  for (const GgufTensor& t : in.tensors()) {
    const TensorChoice c = ChooseTensorType(options.target, model, rules, t.name, t.ne, t.type);
    QuantizedTensor q{.name = t.name,
                      .ne = t.ne,
                      .in_type = t.type,
                      .out_type = c.type,
                      .convert = c.convert,
                      .fallback_from = c.fallback_from,
                      .in_bytes = t.n_bytes,
                      .out_bytes = t.n_bytes};
    if (c.convert) {
      RETURN_IF_ERROR(CheckSupported(t.type, q, "read"));
      RETURN_IF_ERROR(CheckSupported(c.type, q, "write"));
      if (IsQuantizedType(t.type) && IsQuantizedType(c.type) && !options.allow_requantize) {
        return Errorf(
            "quantize: tensor '{}' is already quantized ({}); requantizing it to {} loses "
            "accuracy twice: pass --allow-requantize to do it anyway, or start from an "
            "f32/f16/bf16 model",
            t.name, DTypeName(t.type), DTypeName(c.type));
      }
      q.out_bytes = static_cast<uint64_t>(RowBytes(c.type, t.ne[0]) * t.rows());
    }
    plan.push_back(std::move(q));
  }
  return plan;
}

Result<QuantizeStats> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                    const QuantizeOptions& options, ThreadPool& pool,
                                    const QuantizeProgress& progress) {
  Timer timer;
  std::error_code ec;
  if (!std::filesystem::exists(in_path, ec))
    return Errorf("quantize: input '{}' does not exist", in_path);
  if (std::filesystem::is_directory(in_path, ec))
    return Errorf("quantize: input '{}' is a directory, not a GGUF file", in_path);
  Result<std::unique_ptr<GgufFile>> opened = GgufFile::Open(in_path);
  if (!opened.ok()) return opened.status().WithContext("quantize: input is not a valid GGUF file");
  const GgufFile& in = **opened;
  ASSIGN_OR_RETURN(std::vector<QuantizedTensor> plan, PlanQuantization(in, options));

  GgufWriter w;
  w.CopyMetadata(in);
  w.SetU32("general.quantization_version", kQuantizationVersion);
  w.SetU32("general.file_type", static_cast<uint32_t>(options.target.file_type));

  QuantizeStats stats;
  const size_t n = plan.size();
  for (size_t i = 0; i < n; ++i) {
    const QuantizedTensor& q = plan[i];
    const GgufTensor& t = in.tensors()[i];
    CHECK(t.name == q.name);
    stats.in_tensor_bytes += q.in_bytes;
    stats.out_tensor_bytes += q.out_bytes;
    stats.n_elements += t.n_elements;
    q.convert ? ++stats.n_converted : ++stats.n_copied;
    if (q.fallback_from) ++stats.n_fallback;
    // Runs while Write streams the file, one tensor at a time, in order.
    auto fill = [&in, &t, &q, &pool, &progress, i, n](uint8_t* dst) -> Status {
      if (progress) progress(i, n, q);
      if (q.convert) {
        ConvertTensor(t, q.out_type, dst, pool);
      } else {
        std::memcpy(dst, t.data, q.out_bytes);
      }
      in.ReleasePages(t.data, t.n_bytes);
      return Status::Ok();
    };
    RETURN_IF_ERROR(w.AddTensorFilled(q.name, q.out_type, q.ne, q.out_bytes, fill));
  }
  std::filesystem::path parent = std::filesystem::path(out_path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    return Errorf("quantize: output '{}': directory '{}' does not exist", out_path,
                  parent.string());
  // Before the work: the file is written whole, then renamed over the path.
  if (std::filesystem::is_directory(out_path, ec))
    return Errorf("quantize: output '{}' is a directory; name a file", out_path);
  Status st = w.Write(out_path);
  if (!st.ok()) return st.WithContext(fmt::format("quantize: cannot write output '{}'", out_path));
  stats.in_file_bytes = in.file_size();
  stats.out_file_bytes = std::filesystem::file_size(out_path, ec);
  stats.seconds = timer.ElapsedSeconds();
  return stats;
}

}  // namespace rotor
