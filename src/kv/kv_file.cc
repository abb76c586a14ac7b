#include "kv/kv_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "kv/kv_quant.h"

namespace rotor {
namespace {

static_assert(std::endian::native == std::endian::little, "KV files are little-endian");
// The header stores these enums' values.
static_assert(static_cast<int>(KvType::kF32) == 0 && static_cast<int>(KvType::kF16) == 1 &&
              static_cast<int>(KvType::kQ5_0) == 5 && kKvTypeCount == 6);
static_assert(static_cast<int>(RopeK::kCached) == 0 && static_cast<int>(RopeK::kDeferred) == 1);
static_assert(static_cast<int>(KvPositions::kOriginal) == 0 &&
              static_cast<int>(KvPositions::kCompact) == 1);

constexpr char kMagic[8] = {'R', 'O', 'T', 'O', 'R', 'K', 'V', '\0'};

struct Header {
  char magic[8];
  uint32_t version, n_layer, n_head_kv, head_dim, type, rope_k, positions, v_type_rotate;
  uint64_t model, n_tokens;
};
static_assert(sizeof(Header) == 56);
constexpr int64_t kChecksumBytes = 8;

// Far above any model's, low enough that no size computed from them overflows.
constexpr uint32_t kMaxLayers = 1 << 12, kMaxHeads = 1 << 12, kMaxHeadDim = 1 << 14;

class Fnv1a {
 public:
  void Add(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

KvTypes TypesOf(const Header& h) {
  const auto k = static_cast<KvType>(h.type);
  return {k, h.version == 1 ? k : static_cast<KvType>(h.v_type_rotate & 0xff)};
}

// The bytes a header implies: header, tokens, rows, checksum.
unsigned __int128 ExpectedBytes(const Header& h) {
  const KvTypes t = TypesOf(h);
  const unsigned __int128 row =
      static_cast<unsigned __int128>(h.n_head_kv) *
      (KvHeadBytes(t.k, static_cast<int>(h.head_dim)) + KvHeadBytes(t.v, static_cast<int>(h.head_dim)));
  return sizeof(Header) + static_cast<unsigned __int128>(h.n_tokens) * 4 +
         static_cast<unsigned __int128>(h.n_layer) * h.n_tokens * row + kChecksumBytes;
}

std::string ByteCount(unsigned __int128 n) {
  if (n > std::numeric_limits<uint64_t>::max()) return "more than 2^64";
  return std::to_string(static_cast<uint64_t>(n));
}

class InFile {
 public:
  ~InFile() {
    if (f_ != nullptr) std::fclose(f_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "rb");
    if (f_ == nullptr) return Errorf("kv file {}: cannot open: {}", path, std::strerror(errno));
    struct stat st;
    if (fstat(fileno(f_), &st) != 0 || !S_ISREG(st.st_mode))
      return Errorf("kv file {}: not a regular file", path);
    size_ = st.st_size;
    return Status::Ok();
  }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Status Read(void* dst, size_t n) {
    if (std::fread(dst, 1, n, f_) != n)
      return Errorf("kv file {}: truncated after {} bytes (did it change while read?)", path_,
                    pos_);
    hash_.Add(dst, n);
    pos_ += static_cast<int64_t>(n);
    return Status::Ok();
  }
  Status Skip(int64_t n) {
    uint8_t buffer[1 << 16];
    while (n > 0) {
      const size_t chunk = static_cast<size_t>(std::min<int64_t>(n, sizeof buffer));
      RETURN_IF_ERROR(Read(buffer, chunk));
      n -= static_cast<int64_t>(chunk);
    }
    return Status::Ok();
  }
  // Reads the stored checksum and compares it with the bytes read so far.
  Status Finish() {
    uint64_t stored = 0;
    if (std::fread(&stored, 1, sizeof stored, f_) != sizeof stored)
      return Errorf("kv file {}: truncated: its checksum is missing", path_);
    if (stored != hash_.value())
      return Errorf(
          "kv file {}: checksum {:016x} does not match its contents ({:016x}): the file is "
          "corrupt",
          path_, stored, hash_.value());
    return Status::Ok();
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t size_ = 0, pos_ = 0;
  Fnv1a hash_;
};

// The fixed header: magic, version, and every field within its range.
Status ReadHeader(InFile& f, Header* h) {
  const int64_t least = static_cast<int64_t>(sizeof(Header)) + kChecksumBytes;
  if (f.size() < least)
    return Errorf("kv file {}: {} bytes, too short for a KV file (at least {})", f.path(), f.size(),
                  least);
  RETURN_IF_ERROR(f.Read(h, sizeof *h));
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0)
    return Errorf("kv file {}: not a rotor KV file (bad magic)", f.path());
  if (h->version != kKvFileVersion && h->version != 1)
    return Errorf("kv file {}: version {}; this rotor reads versions 1 and {}", f.path(),
                  h->version, kKvFileVersion);
  const uint32_t max_type = h->version == 1 ? 1 : kKvTypeCount - 1;
  if (h->type > max_type)
    return Errorf("kv file {}: K type {} is not a KV type (0 to {})", f.path(), h->type, max_type);
  if (h->version == 1 ? h->v_type_rotate != 0
                      : (h->v_type_rotate & 0xff) > max_type || (h->v_type_rotate >> 10) != 0)
    return Errorf("kv file {}: V type and rotation field {:#x} is invalid", f.path(),
                  h->v_type_rotate);
  if (h->rope_k > 1)
    return Errorf("kv file {}: rope_k {} is not 0 (cached) or 1 (deferred)", f.path(), h->rope_k);
  if (h->positions > 1)
    return Errorf("kv file {}: positions {} is not 0 (original) or 1 (compact)", f.path(),
                  h->positions);
  if (h->n_layer == 0 || h->n_layer > kMaxLayers || h->n_head_kv == 0 || h->n_head_kv > kMaxHeads ||
      h->head_dim == 0 || h->head_dim > kMaxHeadDim)
    return Errorf("kv file {}: shape {} layers x {} kv heads x {} dims is out of range", f.path(),
                  h->n_layer, h->n_head_kv, h->head_dim);
  const KvTypes t = TypesOf(*h);
  if ((KvTypeQuantized(t.k) || KvTypeQuantized(t.v) || ((h->v_type_rotate >> 8) & 1) != 0) &&
      KvQuantBlock(static_cast<int>(h->head_dim)) == 0)
    return Errorf("kv file {}: head size {} cannot hold {} K/V", f.path(), h->head_dim,
                  KvTypesName(t));
  return Status::Ok();
}

// The file's size must be the one the header implies.
Status CheckSize(const InFile& f, const Header& h) {
  const unsigned __int128 expected = ExpectedBytes(h);
  const auto size = static_cast<unsigned __int128>(f.size());
  if (expected > size)
    return Errorf(
        "kv file {}: truncated: {} bytes, but its header declares {} tokens of {} layers ({} "
        "bytes)",
        f.path(), f.size(), h.n_tokens, h.n_layer, ByteCount(expected));
  if (expected < size)
    return Errorf("kv file {}: {} bytes, {} more than its {} tokens of {} layers take", f.path(),
                  f.size(), ByteCount(size - expected), h.n_tokens, h.n_layer);
  return Status::Ok();
}

KvFileInfo InfoOf(const Header& h, int64_t bytes) {
  KvFileInfo info;
  info.model_id = h.model;
  info.n_layer = static_cast<int>(h.n_layer);
  info.n_head_kv = static_cast<int>(h.n_head_kv);
  info.head_dim = static_cast<int>(h.head_dim);
  info.types = TypesOf(h);
  info.rotate = h.version > 1 && ((h.v_type_rotate >> 8) & 1) != 0;
  info.k_offset = h.version > 1 && ((h.v_type_rotate >> 9) & 1) != 0;
  info.rope_k = static_cast<RopeK>(h.rope_k);
  info.positions = static_cast<KvPositions>(h.positions);
  info.bytes = bytes;
  return info;
}

// What the file must agree on with the cache it is loaded into.
Status CheckMatch(const std::string& path, const KvFileInfo& file, const KvCache& cache) {
  const uint64_t model = cache.pool().model_id();
  if (file.model_id != model)
    return Errorf(
        "kv file {}: written for another model (identity {:016x}; this model's is {:016x})", path,
        file.model_id, model);
  const KvShape& s = cache.shape();
  if (file.n_layer != s.n_layer || file.n_head_kv != s.n_head_kv || file.head_dim != s.head_dim)
    return Errorf(
        "kv file {}: shape {} layers x {} kv heads x {} dims; this model's is {} x {} x {}", path,
        file.n_layer, file.n_head_kv, file.head_dim, s.n_layer, s.n_head_kv, s.head_dim);
  const KvConfig& c = cache.config();
  if (file.types != c.types)
    return Errorf("kv file {}: K/V type (kv_type) {}; the cache's is {}", path,
                  KvTypesName(file.types), KvTypesName(c.types));
  if (file.rotate != c.rotate)
    return Errorf("kv file {}: rotation (kv_rotate) {}; the cache's is {}", path,
                  file.rotate ? "on" : "off", c.rotate ? "on" : "off");
  if (file.k_offset != c.k_offset)
    return Errorf("kv file {}: key offsets (kv_k_offset) {}; the cache's are {}", path,
                  file.k_offset ? "on" : "off", c.k_offset ? "on" : "off");
  if (file.rope_k != c.rope_k)
    return Errorf("kv file {}: RoPE mode (rope_k) {}; the cache's is {}", path,
                  RopeKName(file.rope_k), RopeKName(c.rope_k));
  if (file.positions != c.positions)
    return Errorf("kv file {}: positions (kv_positions) {}; the cache's are {}", path,
                  KvPositionsName(file.positions), KvPositionsName(c.positions));
  return Status::Ok();
}

// "kv file PATH: " + a KvCache error without its "kv: ".
Status Within(const std::string& path, const Status& s) {
  std::string_view m = s.message();
  if (m.starts_with("kv: ")) m.remove_prefix(4);
  return Errorf("kv file {}: {}", path, m);
}

}  // namespace

Result<KvFileInfo> ReadKvFileInfo(const std::string& path) {
  InFile f;
  RETURN_IF_ERROR(f.Open(path));
  Header h;
  RETURN_IF_ERROR(ReadHeader(f, &h));
  RETURN_IF_ERROR(CheckSize(f, h));
  KvFileInfo info = InfoOf(h, f.size());
  info.tokens.resize(h.n_tokens);  // bounded by the file's size, just checked
  RETURN_IF_ERROR(f.Read(info.tokens.data(), info.tokens.size() * sizeof(int32_t)));
  return info;
}

Result<int64_t> SaveKvFile(const std::string& path, const KvCache& cache,
                           std::span<const int32_t> tokens) {
  const KvShape& s = cache.shape();
  const KvConfig& c = cache.config();
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kKvFileVersion;
  h.n_layer = static_cast<uint32_t>(s.n_layer);
  h.n_head_kv = static_cast<uint32_t>(s.n_head_kv);
  h.head_dim = static_cast<uint32_t>(s.head_dim);
  h.type = static_cast<uint32_t>(c.types.k);
  h.v_type_rotate = static_cast<uint32_t>(c.types.v) | (c.rotate ? 1u << 8 : 0u) |
                    (c.k_offset ? 1u << 9 : 0u);
  h.rope_k = static_cast<uint32_t>(c.rope_k);
  h.positions = static_cast<uint32_t>(c.positions);
  h.model = cache.pool().model_id();
  h.n_tokens = tokens.size();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return Errorf("kv file {}: cannot create {}: {}", path, tmp, std::strerror(errno));
  Fnv1a hash;
  int64_t bytes = 0;
  std::string io_error;
  auto write = [&](const void* data, size_t n) {
    if (std::fwrite(data, 1, n, f) != n) {
      io_error = std::strerror(errno);
      return Status::Error(io_error);
    }
    hash.Add(data, n);
    bytes += static_cast<int64_t>(n);
    return Status::Ok();
  };
  Status st = write(&h, sizeof h);
  if (st.ok()) st = write(tokens.data(), tokens.size_bytes());
  if (st.ok())
    st = cache.ExportPrefix(tokens, [&](int, bool, int32_t, std::span<const uint8_t> rows) {
      return write(rows.data(), rows.size());
    });
  if (st.ok()) {
    const uint64_t sum = hash.value();  // not part of what it sums
    st = write(&sum, sizeof sum);
  }
  if (std::fclose(f) != 0 && st.ok()) io_error = std::strerror(errno);
  if (st.ok() && io_error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    io_error = fmt::format("cannot rename {} to it: {}", tmp, std::strerror(errno));
  if (!st.ok() || !io_error.empty()) {
    std::remove(tmp.c_str());
    if (!io_error.empty()) return Errorf("kv file {}: cannot write: {}", path, io_error);
    return Within(path, st);
  }
  return bytes;
}

Result<KvFileLoaded> LoadKvFile(const std::string& path, KvCache& cache,
                                const KvFileLoadOptions& options) {
  CHECK_EQ(cache.n_seen(), 0);  // an empty cache
  InFile f;
  RETURN_IF_ERROR(f.Open(path));
  Header h;
  RETURN_IF_ERROR(ReadHeader(f, &h));
  RETURN_IF_ERROR(CheckMatch(path, InfoOf(h, f.size()), cache));
  RETURN_IF_ERROR(CheckSize(f, h));
  if (!cache.SharesPrefix())
    return Errorf(
        "kv file {}: the {} cache cannot start from saved K/V (what it keeps depends on "
        "attention); full, sink and window can",
        path, cache.config().policy);
  const int64_t n = static_cast<int64_t>(h.n_tokens);
  if (!options.text && n > cache.n_cells())
    return Errorf("kv file {}: {} tokens, more than the cache's {} cells", path, n,
                  cache.n_cells());

  // The tokens, keeping only those that may be loaded (never more than the
  // text to match holds): the rest are read for the checksum alone.
  const int64_t keep =
      options.text ? std::min<int64_t>(n, static_cast<int64_t>(options.text->size())) : n;
  std::vector<int32_t> tokens(keep);
  RETURN_IF_ERROR(f.Read(tokens.data(), tokens.size() * sizeof(int32_t)));
  RETURN_IF_ERROR(f.Skip((n - keep) * static_cast<int64_t>(sizeof(int32_t))));
  int64_t m = keep;
  if (options.text)
    m = std::mismatch(tokens.begin(), tokens.end(), options.text->begin()).first - tokens.begin();
  tokens.resize(m);
  if (m > cache.n_cells())
    return Errorf("kv file {}: {} tokens to load, more than the cache's {} cells", path, m,
                  cache.n_cells());
  KvBlockPool& pool = cache.pool();
  const int64_t n_blocks = (m + pool.block_cells() - 1) / pool.block_cells();
  if (n_blocks > pool.Available(cache.config().types))
    return Errorf(
        "kv file {}: the KV memory budget ({} MiB) has no room for {} tokens ({} blocks of {}; "
        "{} available)",
        path, pool.budget_bytes() >> 20, m, n_blocks, pool.block_cells(),
        pool.Available(cache.config().types));

  const int64_t k_row = static_cast<int64_t>(cache.row_bytes(false));
  const int64_t v_row = static_cast<int64_t>(cache.row_bytes(true));
  KvFileLoaded loaded{.n_loaded = m, .n_file = n, .bytes = f.size(), .tokens = tokens};
  if (m == 0) {  // nothing to load: the file is checked all the same
    RETURN_IF_ERROR(f.Skip(static_cast<int64_t>(h.n_layer) * n * (k_row + v_row)));
    RETURN_IF_ERROR(f.Finish());
    return loaded;
  }
  const int last_layer = static_cast<int>(h.n_layer) - 1;
  Status st = cache.ImportPrefix(
      tokens, [&](int layer, bool is_v, int32_t first, std::span<uint8_t> rows) -> Status {
        RETURN_IF_ERROR(f.Read(rows.data(), rows.size()));
        const int64_t row = is_v ? v_row : k_row;
        if (first + static_cast<int64_t>(rows.size()) / row < m) return Status::Ok();
        // The end of a layer's K or V rows to load: the rest of its tokens.
        RETURN_IF_ERROR(f.Skip((n - m) * row));
        if (layer == last_layer && is_v) return f.Finish();
        return Status::Ok();
      });
  if (!st.ok()) return st.message().starts_with("kv file ") ? st : Within(path, st);
  return loaded;
}

}  // namespace rotor
