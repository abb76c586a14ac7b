// GGUF reader: bounds-checked parsing of the header, metadata and tensor infos.
// Every count and length read from the file is checked against the bytes that
// remain before anything is allocated from it.
#include "gguf/gguf.h"

#include "base/log.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace rotor {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
// Smallest encodings, used to bound counts by the remaining bytes.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

std::string Printable(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f) {
      s += static_cast<char>(p[i]);
    } else {
      s += fmt::format("\\x{:02x}", p[i]);
    }
  }
  return s;
}

}  // namespace

// Reads the file front to back; messages say what was being read and where.
class GgufFile::Parser {
 public:
  Parser(GgufFile* f) : f_(f), p_(f->base_), size_(f->size_) {}

  Status Run();

 private:
  uint64_t remaining() const { return size_ - pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return Errorf("{} at offset {} ({} bytes) past end of file (size {})", what, pos_, n, size_);
    }
    return Status::Ok();
  }
  template <typename T>
  Status Read(T* out, std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status ReadString(std::string_view* out, std::string_view what) {
    uint64_t len = 0;
    const uint64_t at = pos_;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return Errorf("{}: string length {} at offset {} past end of file (size {})", what, len, at,
                    size_);
    }
    *out = std::string_view(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }
  Status ReadValue(GgufType type, int depth, const std::string& what, GgufValue* out);
  Status ReadArray(int depth, const std::string& what, GgufValue* out);
  Status ReadKvs(uint64_t n_kv);
  Status ReadTensorInfos(uint64_t n_tensors);
  Status PlaceTensors();

  GgufFile* f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Status GgufFile::Parser::ReadValue(GgufType type, int depth, const std::string& what,
                                   GgufValue* out) {
  switch (type) {
    case GgufType::kString: {
      std::string_view s;
      RETURN_IF_ERROR(ReadString(&s, what));
      *out = GgufValue::Of(s);
      return Status::Ok();
    }
    case GgufType::kArray:
      return ReadArray(depth + 1, what, out);
    default:
      break;
  }
  const size_t size = GgufScalarSize(type);
  RETURN_IF_ERROR(Need(size, what));
  uint64_t bits = 0;
  std::memcpy(&bits, p_ + pos_, size);
  if (type == GgufType::kBool && bits > 1) {
    return Errorf("{}: bool value {} at offset {} is not 0 or 1", what, bits, pos_);
  }
  pos_ += size;
  switch (type) {
    case GgufType::kU8:
      *out = GgufValue::Of(static_cast<uint8_t>(bits));
      break;
    case GgufType::kI8:
      *out = GgufValue::Of(static_cast<int8_t>(bits));
      break;
    case GgufType::kU16:
      *out = GgufValue::Of(static_cast<uint16_t>(bits));
      break;
    case GgufType::kI16:
      *out = GgufValue::Of(static_cast<int16_t>(bits));
      break;
    case GgufType::kU32:
      *out = GgufValue::Of(static_cast<uint32_t>(bits));
      break;
    case GgufType::kI32:
      *out = GgufValue::Of(static_cast<int32_t>(bits));
      break;
    case GgufType::kU64:
      *out = GgufValue::Of(static_cast<uint64_t>(bits));
      break;
    case GgufType::kI64:
      *out = GgufValue::Of(static_cast<int64_t>(bits));
      break;
    case GgufType::kBool:
      *out = GgufValue::Of(bits != 0);
      break;
    case GgufType::kF32: {
      float v;
      uint32_t u = static_cast<uint32_t>(bits);
      std::memcpy(&v, &u, 4);
      *out = GgufValue::Of(v);
      break;
    }
    case GgufType::kF64: {
      double v;
      std::memcpy(&v, &bits, 8);
      *out = GgufValue::Of(v);
      break;
    }
    default:
      return Errorf("{}: unknown type {}", what, static_cast<uint32_t>(type));
  }
  return Status::Ok();
}

Status GgufFile::Parser::ReadArray(int depth, const std::string& what, GgufValue* out) {
  if (depth > kGgufMaxArrayDepth) {
    return Errorf("{}: arrays nested too deep (more than {} levels) at offset {}", what,
                  kGgufMaxArrayDepth, pos_);
  }
  uint32_t elem_raw = 0;
  const uint64_t type_at = pos_;
  RETURN_IF_ERROR(Read(&elem_raw, what + ": array element type"));
  if (!IsKnownType(elem_raw)) {
    return Errorf("{}: unknown type {} for array elements at offset {}", what, elem_raw, type_at);
  }
  const GgufType elem = static_cast<GgufType>(elem_raw);
  uint64_t count = 0;
  const uint64_t count_at = pos_;
  RETURN_IF_ERROR(Read(&count, what + ": array count"));
  const uint64_t min_item = elem == GgufType::kString  ? kMinStringBytes
                            : elem == GgufType::kArray ? kMinArrayBytes
                                                       : GgufScalarSize(elem);
  if (count > remaining() / min_item) {
    return Errorf("{}: array count {} of {} at offset {} past end of file (size {})", what, count,
                  GgufTypeName(elem), count_at, size_);
  }
  if (elem == GgufType::kString) {
    std::vector<std::string_view> items(count);
    for (uint64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(ReadString(&items[i], what));
    }
    *out = GgufValue::StringArray(std::span<const std::string_view>(items));
    return Status::Ok();
  }
  if (elem == GgufType::kArray) {
    std::vector<GgufValue> items(count);
    for (uint64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(ReadArray(depth + 1, what, &items[i]));
    }
    *out = GgufValue::ArrayOfArrays(std::move(items));
    return Status::Ok();
  }
  const uint64_t n_bytes = count * min_item;  // no overflow: <= remaining()
  const char* src = reinterpret_cast<const char*>(p_ + pos_);
  if (elem == GgufType::kBool) {
    for (uint64_t i = 0; i < count; ++i) {
      if (static_cast<uint8_t>(src[i]) > 1) {
        return Errorf("{}: bool array item {} at offset {} is {}, not 0 or 1", what, i, pos_ + i,
                      static_cast<uint8_t>(src[i]));
      }
    }
  }
  *out = GgufValue::PackedArray(elem, std::string(src, n_bytes));
  pos_ += n_bytes;
  return Status::Ok();
}

Status GgufFile::Parser::ReadKvs(uint64_t n_kv) {
  f_->kvs_.reserve(n_kv);  // bounded by the remaining bytes (checked by the caller)
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string_view key;
    RETURN_IF_ERROR(ReadString(&key, fmt::format("kv {} key", i)));
    if (key.empty()) return Errorf("kv {} at offset {}: empty key", i, pos_);
    const std::string what = fmt::format("key '{}'", key);
    if (f_->kv_index_.count(key)) return Errorf("{}: duplicate key", what);
    uint32_t type_raw = 0;
    const uint64_t type_at = pos_;
    RETURN_IF_ERROR(Read(&type_raw, what + ": value type"));
    if (!IsKnownType(type_raw)) {
      return Errorf("{}: unknown type {} at offset {}", what, type_raw, type_at);
    }
    GgufKv kv{std::string(key), GgufValue()};
    RETURN_IF_ERROR(ReadValue(static_cast<GgufType>(type_raw), 0, what, &kv.value));
    f_->kv_index_.emplace(kv.key, f_->kvs_.size());
    f_->kvs_.push_back(std::move(kv));
  }
  if (const GgufValue* a = f_->Find("general.alignment")) {
    if (a->type() != GgufType::kU32) {
      return Errorf("key 'general.alignment': type {} (expected u32)", GgufTypeName(a->type()));
    }
    const uint64_t align = *a->AsUint();
    if (align == 0 || (align & (align - 1)) != 0) {
      return Errorf("key 'general.alignment': alignment {} is not a nonzero power of two", align);
    }
    f_->alignment_ = align;
  }
  return Status::Ok();
}

Status GgufFile::Parser::ReadTensorInfos(uint64_t n_tensors) {
  f_->tensors_.reserve(n_tensors);  // bounded by the remaining bytes (checked by the caller)
  for (uint64_t i = 0; i < n_tensors; ++i) {
    std::string_view name_view;
    RETURN_IF_ERROR(ReadString(&name_view, fmt::format("tensor {} name", i)));
    GgufTensor t;
    t.name.assign(name_view);
    const std::string what = fmt::format("tensor '{}'", t.name);
    if (f_->tensor_index_.count(t.name)) return Errorf("{}: duplicate tensor name", what);
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(Read(&n_dims, what + ": n_dims"));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return Errorf("{}: n_dims {} out of range (1..{})", what, n_dims, kGgufMaxDims);
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      RETURN_IF_ERROR(Read(&ne, what + ": ne"));
      if (ne == 0) return Errorf("{}: ne[{}] is 0", what, d);
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Errorf("{}: ne[{}] = {} out of range (overflow)", what, d, ne);
      }
      t.ne.push_back(static_cast<int64_t>(ne));
      if (__builtin_mul_overflow(t.n_elements, static_cast<int64_t>(ne), &t.n_elements)) {
        return Errorf("{}: element count overflows int64 (ne[{}] = {})", what, d, ne);
      }
    }
    uint32_t type_id = 0;
    RETURN_IF_ERROR(Read(&type_id, what + ": type"));
    const std::optional<DTypeTraits> traits = LookupDType(type_id);
    if (!traits) return Errorf("{}: unknown type id {} (not a known GGML type)", what, type_id);
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      return Errorf("{}: row length ne[0] = {} is not a multiple of the {} block size {}", what,
                    t.ne[0], traits->name, traits->block_size);
    }
    int64_t n_bytes = 0;
    if (__builtin_mul_overflow(t.n_elements / traits->block_size, traits->type_size, &n_bytes) ||
        static_cast<uint64_t>(n_bytes) > std::numeric_limits<size_t>::max()) {
      return Errorf("{}: byte size of {} {} elements overflows", what, t.n_elements, traits->name);
    }
    t.n_bytes = static_cast<size_t>(n_bytes);
    RETURN_IF_ERROR(Read(&t.offset, what + ": offset"));
    if (t.offset % f_->alignment_ != 0) {
      return Errorf("{}: offset {} is not a multiple of the alignment {}", what, t.offset,
                    f_->alignment_);
    }
    f_->tensor_index_.emplace(t.name, f_->tensors_.size());
    f_->tensors_.push_back(std::move(t));
  }
  return Status::Ok();
}

Status GgufFile::Parser::PlaceTensors() {
  const uint64_t align = f_->alignment_;
  f_->data_offset_ = (pos_ + align - 1) / align * align;  // pos_ <= size_, align <= 2^31
  if (f_->tensors_.empty()) return Status::Ok();
  if (f_->data_offset_ > size_) {
    return Errorf("data section at offset {} past end of file (size {})", f_->data_offset_, size_);
  }
  const uint64_t data_size = size_ - f_->data_offset_;
  for (GgufTensor& t : f_->tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return Errorf("tensor '{}' offset {} + {} bytes past end of file (size {}, data at {})",
                    t.name, t.offset, t.n_bytes, size_, f_->data_offset_);
    }
    t.data = p_ + f_->data_offset_ + t.offset;
  }
  std::vector<const GgufTensor*> order;
  order.reserve(f_->tensors_.size());
  for (const GgufTensor& t : f_->tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& a = *order[i - 1];
    const GgufTensor& b = *order[i];
    if (a.offset + a.n_bytes > b.offset) {  // no overflow: both end inside the file
      return Errorf("tensor '{}' (offset {}, {} bytes) overlaps tensor '{}' (offset {})", a.name,
                    a.offset, a.n_bytes, b.name, b.offset);
    }
  }
  return Status::Ok();
}

Status GgufFile::Parser::Run() {
  RETURN_IF_ERROR(Need(4, "magic"));
  uint32_t magic = 0;
  std::memcpy(&magic, p_, 4);
  if (magic != kMagic) {
    return Errorf("bad magic '{}' (expected 'GGUF'); not a GGUF file", Printable(p_, 4));
  }
  pos_ = 4;
  RETURN_IF_ERROR(Read(&f_->version_, "version"));
  const uint32_t v = f_->version_;
  if (v == 1) return Errorf("unsupported version 1 (GGUF v1 is obsolete; re-convert the model)");
  if (v != 2 && v != 3) {
    if (v == 0x02000000u || v == 0x03000000u) {
      return Errorf("unsupported version {:#x} (a big-endian GGUF file?)", v);
    }
    return Errorf("unsupported version {} (expected 2 or 3)", v);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(Read(&n_tensors, "tensor count"));
  RETURN_IF_ERROR(Read(&n_kv, "metadata kv count"));
  if (n_kv > remaining() / kMinKvBytes) {
    return Errorf("metadata kv count {} past end of file: cannot fit in the remaining {} bytes",
                  n_kv, remaining());
  }
  // Each tensor's info needs at least kMinTensorInfoBytes after the kvs.
  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return Errorf("tensor count {} past end of file: cannot fit in the remaining {} bytes",
                  n_tensors, remaining());
  }
  RETURN_IF_ERROR(ReadKvs(n_kv));
  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return Errorf("tensor count {} past end of file: cannot fit in the remaining {} bytes",
                  n_tensors, remaining());
  }
  RETURN_IF_ERROR(ReadTensorInfos(n_tensors));
  return PlaceTensors();
}

void GgufFile::ReleasePages(const uint8_t* p, size_t n) const {
  if (map_ == nullptr || anonymous_ || n == 0) return;
  const auto* base = static_cast<const uint8_t*>(map_);
  if (p < base || p + n > base + map_size_) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t e = reinterpret_cast<uintptr_t>(p + n);
  // Read-only MAP_PRIVATE pages were never written: dropping them loses nothing.
  madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

GgufFile::~GgufFile() {
  if (locked_) munlock(map_, map_size_);
  if (map_ != nullptr) munmap(map_, map_size_);
}

Status GgufFile::Where(const Status& s) const {
  return s.ok() ? s : Status::Error(fmt::format("gguf: {}: {}", path_, s.message()));
}

Status GgufFile::Parse() { return Where(Parser(this).Run()); }

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                 const GgufOpenOptions& options) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errorf("gguf: {}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Errorf("gguf: {}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Errorf("gguf: {}: not a regular file", path);
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    // Without mmap the bytes go to anonymous pages: page-aligned like a mapping.
    void* m = options.mmap ? mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0)
                           : mmap(nullptr, f->size_, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Errorf("gguf: {}: {} of {} bytes failed: {}", path,
                    options.mmap ? "mmap" : "allocation", f->size_, std::strerror(err));
    }
    f->map_ = m;
    f->map_size_ = f->size_;
    f->anonymous_ = !options.mmap;
    f->base_ = static_cast<const uint8_t*>(m);
    if (!options.mmap) {
      auto* dst = static_cast<uint8_t*>(m);
      uint64_t done = 0;
      while (done < f->size_) {
        const ssize_t n = ::pread(fd, dst + done, f->size_ - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const int err = n < 0 ? errno : 0;
          ::close(fd);
          return Errorf("gguf: {}: read failed at byte {} of {}: {}", path, done, f->size_,
                        err != 0 ? std::strerror(err) : "unexpected end of file");
        }
        done += static_cast<uint64_t>(n);
      }
      mprotect(m, f->size_, PROT_READ);
    }
    if (options.mlock) {
      if (::mlock(m, f->size_) == 0) {
        f->locked_ = true;
      } else {
        const int err = errno;
        struct rlimit lim = {};
        getrlimit(RLIMIT_MEMLOCK, &lim);
        Log(LogLevel::kWarn,
            "gguf: {}: mlock of {} bytes failed: {} (RLIMIT_MEMLOCK is {}; raise it with "
            "`ulimit -l`); the model may be paged out",
            path, f->size_, std::strerror(err),
            lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                          : fmt::format("{} bytes", lim.rlim_cur));
      }
    }
  }
  ::close(fd);  // the mapping stays valid
  Log(LogLevel::kDebug, "gguf: {}: {} bytes {}{}", path, f->size_,
      f->anonymous_ ? "read into memory" : "mapped", f->locked_ ? ", locked" : "");
  RETURN_IF_ERROR(f->Parse());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::vector<uint8_t> bytes,
                                                      std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  RETURN_IF_ERROR(f->Parse());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromView(std::span<const uint8_t> bytes,
                                                     std::string name) {
  // Tensors are read in place as their element types: the start must be
  // aligned as well as the heap's blocks FromBytes holds (16 bytes).
  if (reinterpret_cast<uintptr_t>(bytes.data()) % kViewAlignment != 0)
    return Errorf("gguf: {}: the bytes start at {}, not at a multiple of {}", name,
                  static_cast<const void*>(bytes.data()), kViewAlignment);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->base_ = bytes.data();
  f->size_ = bytes.size();
  RETURN_IF_ERROR(f->Parse());
  return f;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace rotor
