#include "gguf/gguf_info.h"

#include <algorithm>

#include "base/memory.h"

namespace rotor {
namespace {

// Quoted and escaped, cut after max_bytes (at a UTF-8 character boundary).
std::string Quote(std::string_view s, size_t max_bytes) {
  size_t cut = s.size();
  if (cut > max_bytes) {
    cut = max_bytes;
    while (cut > 0 && (static_cast<uint8_t>(s[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out = "\"";
  for (size_t i = 0; i < cut; ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (cut < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string Scalar(const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kBool:
      return *v.AsBool() ? "true" : "false";
    case GgufType::kF32:
      return fmt::format("{}", static_cast<float>(*v.AsFloat()));
    case GgufType::kF64:
      return fmt::format("{}", *v.AsFloat());
    default:
      if (std::optional<int64_t> i = v.AsInt()) return fmt::format("{}", *i);
      return fmt::format("{}", v.raw_bits());  // u64 above int64
  }
}

std::string Item(const GgufValue& v, size_t i, const InfoOptions& o) {
  switch (v.array_type()) {
    case GgufType::kString:
      return Quote(v.StringAt(i), o.max_string_bytes);
    case GgufType::kArray: {
      std::string s(1, '[');
      s += FormatGgufValue(v.ArrayAt(i), o);
      s += ']';
      return s;
    }
    case GgufType::kBool:
      return v.BoolAt(i) ? "true" : "false";
    case GgufType::kF32:
      return fmt::format("{}", static_cast<float>(v.FloatAt(i)));
    case GgufType::kF64:
      return fmt::format("{}", v.FloatAt(i));
    case GgufType::kU64:
      return fmt::format("{}", v.UintAt(i));
    default:
      return fmt::format("{}", v.IntAt(i));
  }
}

std::string Shape(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace

std::string FormatGgufValue(const GgufValue& v, const InfoOptions& o) {
  if (v.type() == GgufType::kString) return Quote(*v.AsString(), o.max_string_bytes);
  if (!v.is_array()) return Scalar(v);
  std::string out = fmt::format("[{} x {}]", v.size(), GgufTypeName(v.array_type()));
  const size_t shown = std::min(v.size(), o.max_array_items);
  for (size_t i = 0; i < shown; ++i) {
    out += i ? ", " : " ";
    out += Item(v, i, o);
  }
  if (shown < v.size()) out += shown ? ", ..." : " ...";
  return out;
}

std::string FormatGgufInfo(const GgufFile& f, const InfoOptions& o) {
  std::string out;
  uint64_t total_bytes = 0;
  int64_t total_params = 0;
  for (const GgufTensor& t : f.tensors()) {
    total_bytes += t.n_bytes;
    total_params += t.n_elements;
  }
  out += fmt::format("file:        {}\n", f.path());
  out += fmt::format("version:     {}\n", f.version());
  out += fmt::format("alignment:   {}\n", f.alignment());
  out += fmt::format("file size:   {} bytes ({})\n", f.file_size(), HumanBytes(f.file_size()));
  out += fmt::format("data offset: {}\n", f.data_offset());
  out += fmt::format("metadata:    {} keys\n", f.metadata_count());
  out += fmt::format("tensors:     {}\n", f.tensors().size());

  if (o.metadata && f.metadata_count() > 0) {
    size_t key_width = 0;
    for (const GgufKv& kv : f.metadata()) key_width = std::max(key_width, kv.key.size());
    out += "\nmetadata:\n";
    for (const GgufKv& kv : f.metadata()) {
      const std::string type(GgufTypeName(kv.value.type()));
      out += fmt::format("  {:<{}}  {:<6}  {}\n", kv.key, key_width, type,
                         FormatGgufValue(kv.value, o));
    }
  }

  if (o.tensors && !f.tensors().empty()) {
    size_t name_width = 4;
    size_t shape_width = 5;
    for (const GgufTensor& t : f.tensors()) {
      name_width = std::max(name_width, t.name.size());
      shape_width = std::max(shape_width, Shape(t.ne).size());
    }
    out += "\ntensors:\n";
    out += fmt::format("  {:>5}  {:<{}}  {:<6}  {:<{}}  {:>12}  {:>12}\n", "#", "name", name_width,
                       "type", "shape", shape_width, "bytes", "offset");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const GgufTensor& t = f.tensors()[i];
      out += fmt::format("  {:>5}  {:<{}}  {:<6}  {:<{}}  {:>12}  {:>12}\n", i, t.name, name_width,
                         DTypeName(t.type), Shape(t.ne), shape_width, t.n_bytes, t.offset);
    }
  }
  out += fmt::format("\ntotal: {} tensors, {} bytes ({}), {} parameters\n", f.tensors().size(),
                     total_bytes, HumanBytes(total_bytes), total_params);
  return out;
}

}  // namespace rotor
