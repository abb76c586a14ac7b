// The reader against truncated, corrupted and hostile files: every case must
// end in an error Status (or succeed when only tensor payload changed), never
// a crash, a hang, or an allocation sized by an unchecked number.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <span>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

// Largest single allocation since the last reset: catches allocations sized by
// an untrusted count before it was checked against the file size.
namespace {
std::atomic<size_t> g_max_alloc{0};
void* TrackedAlloc(size_t n) {
  size_t prev = g_max_alloc.load(std::memory_order_relaxed);
  while (n > prev && !g_max_alloc.compare_exchange_weak(prev, n)) {
  }
  void* p = std::malloc(n ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace
void* operator new(size_t n) { return TrackedAlloc(n); }
void* operator new[](size_t n) { return TrackedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace rotor {
namespace {

using Bytes = std::vector<uint8_t>;

const std::string kStories = std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf";

bool Contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// Tensors of a successfully parsed file lie inside it, aligned, without overlap.
void CheckInvariants(const GgufFile& f) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const GgufTensor& t : f.tensors()) {
    ASSERT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_GE(t.data, f.bytes() + f.data_offset());
    ASSERT_LE(t.data + t.n_bytes, f.bytes() + f.file_size());
    ASSERT_GE(t.n_elements, 1);
    spans.push_back({t.offset, t.offset + t.n_bytes});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) ASSERT_LE(spans[i - 1].second, spans[i].first);
}

// Parses `bytes` (FromBytes: owned, so a read past a prefix is past its own
// allocation; FromView: in place); checks the allocation bound and, on
// success, the invariants.
template <class B>
Status ParseWith(B bytes, Result<std::unique_ptr<GgufFile>> (*from)(B, std::string)) {
  const size_t limit = 16 * bytes.size() + (1u << 20);
  g_max_alloc = 0;
  auto r = from(std::move(bytes), "<memory>");
  EXPECT_LE(g_max_alloc.load(), limit) << "allocation larger than the file justifies";
  if (r.ok()) CheckInvariants(**r);
  return r.status();
}

Status Parse(Bytes bytes) { return ParseWith<Bytes>(std::move(bytes), &GgufFile::FromBytes); }

void ExpectError(Bytes bytes, std::initializer_list<std::string_view> parts) {
  Status s = Parse(std::move(bytes));
  ASSERT_FALSE(s.ok()) << "parsed, expected an error containing " << *parts.begin();
  EXPECT_TRUE(s.message().starts_with("gguf: <memory>: ")) << s.message();
  for (std::string_view p : parts) EXPECT_TRUE(Contains(s.message(), p)) << s.message();
}

void Put32(Bytes* b, size_t pos, uint32_t v) { std::memcpy(b->data() + pos, &v, 4); }
void Put64(Bytes* b, size_t pos, uint64_t v) { std::memcpy(b->data() + pos, &v, 8); }
uint64_t Get64(const Bytes& b, size_t pos) {
  uint64_t v;
  std::memcpy(&v, b.data() + pos, 8);
  return v;
}

// Position of the u64 length of the GGUF string `s` (key or tensor name).
size_t StringAt(const Bytes& b, std::string_view s) {
  const uint64_t len = s.size();
  Bytes pattern(reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 8);
  pattern.insert(pattern.end(), s.begin(), s.end());
  auto it = std::search(b.begin(), b.end(), pattern.begin(), pattern.end());
  EXPECT_NE(it, b.end()) << s;
  return static_cast<size_t>(it - b.begin());
}
// Position just after the string `s`: a key's value type, a tensor's n_dims.
size_t After(const Bytes& b, std::string_view s) { return StringAt(b, s) + 8 + s.size(); }

Bytes ReadStories() {
  auto f = GgufFile::Open(kStories);
  EXPECT_TRUE(f.ok()) << f.message();
  if (!f.ok()) return {};
  return Bytes((*f)->bytes(), (*f)->bytes() + (*f)->file_size());
}

// A small file with every kind of field at known places.
Bytes MakeSmall(uint32_t alignment = 32) {
  GgufWriter w;
  w.SetString("general.architecture", "test");
  w.SetU32("general.alignment", alignment);
  w.SetU32("t.u32", 7);
  w.SetBool("t.bool", true);
  w.SetI32Array("t.arr", std::vector<int32_t>{1, 2, 3});
  w.SetStringArray("t.strs", std::vector<std::string>{"ab", "cd"});
  w.Set("t.nested", GgufValue::ArrayOfArrays({GgufValue::ArrayOf(std::vector<uint8_t>{1, 2})}));
  w.SetU32("t.tail", 9);
  std::vector<uint8_t> data(256, 0x3c);
  EXPECT_TRUE(w.AddTensor("w.a", DType::kF32, {8, 2}, data.data(), 64).ok());
  EXPECT_TRUE(w.AddTensor("w.b", DType::kQ8_0, {32, 2}, data.data(), 68).ok());
  EXPECT_TRUE(w.AddTensor("w.c", DType::kF16, {4}, data.data(), 8).ok());
  auto bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok()) << bytes.message();
  return bytes.ok() ? std::move(bytes).value() : Bytes{};
}

TEST(GgufMalformed, SmallFileIsValid) {
  Bytes b = MakeSmall();
  ASSERT_TRUE(Parse(b).ok()) << Parse(b).message();
  EXPECT_GT(g_max_alloc.load(), 0u);  // the allocation tracker is live
}

TEST(GgufMalformed, HeaderFields) {
  const Bytes good = MakeSmall();
  ExpectError({}, {"magic", "past end of file (size 0)"});
  ExpectError(Bytes{'G', 'G'}, {"magic", "past end"});
  Bytes b = good;
  b[0] = 'X';
  ExpectError(b, {"bad magic 'XGUF'"});
  b = good;
  b[3] = 0;
  ExpectError(b, {"bad magic 'GGU\\x00'"});
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu, 0x03000000u}) {
    b = good;
    Put32(&b, 4, v);
    ExpectError(b, {"unsupported version"});
  }
  b = good;
  Put32(&b, 4, 1);
  ExpectError(b, {"unsupported version 1"});
  Put32(&b, 4, 0x03000000u);
  ExpectError(b, {"big-endian"});
  b = good;
  Put32(&b, 4, 2);  // v2 has the same layout
  EXPECT_TRUE(Parse(b).ok());
  ExpectError(Bytes(good.begin(), good.begin() + 6), {"version", "past end"});
  ExpectError(Bytes(good.begin(), good.begin() + 20), {"metadata kv count", "past end"});

  for (uint64_t v : {uint64_t{1} << 32, uint64_t{1} << 63, ~uint64_t{0}, uint64_t{good.size()}}) {
    b = good;
    Put64(&b, 8, v);
    ExpectError(b, {"tensor count", "past end"});
    b = good;
    Put64(&b, 16, v);
    ExpectError(b, {"metadata kv count", "past end"});
  }
  // One tensor fewer is a well-formed file (the last info reads as padding).
  for (int delta : {-1, 1, 2}) {
    b = good;
    Put64(&b, 8, Get64(good, 8) + delta);
    if (delta > 0) {
      EXPECT_FALSE(Parse(b).ok()) << "tensor count + " << delta;
    }
    b = good;
    Put64(&b, 16, Get64(good, 16) + delta);
    EXPECT_FALSE(Parse(b).ok()) << "kv count + " << delta;
  }
}

TEST(GgufMalformed, StringLengthsAndKeys) {
  const Bytes good = MakeSmall();
  for (uint64_t v : {uint64_t{good.size()}, uint64_t{1} << 32, uint64_t{1} << 63, ~uint64_t{0}}) {
    Bytes b = good;
    Put64(&b, StringAt(good, "t.u32"), v);
    ExpectError(b, {"kv 2 key: string length", "past end"});
    b = good;
    Put64(&b, After(good, "general.architecture") + 4, v);  // the value "test"
    ExpectError(b, {"key 'general.architecture': string length", "past end"});
    b = good;
    Put64(&b, After(good, "t.strs") + 16 + 8 + 2, v);  // the second item "cd"
    ExpectError(b, {"key 't.strs': string length", "past end"});
    b = good;
    Put64(&b, StringAt(good, "w.b"), v);
    ExpectError(b, {"tensor 1 name: string length", "past end"});
  }
  Bytes b = good;
  Put64(&b, StringAt(good, "t.u32"), 0);  // empty key, then garbage
  ExpectError(b, {"kv 2", "empty key"});
  b = good;
  b[StringAt(good, "t.tail") + 8 + 2] = 'u';  // "t.uail": fine
  b[StringAt(good, "t.tail") + 8 + 5] = 'l';
  EXPECT_TRUE(Parse(b).ok());
  b = good;
  Put64(&b, StringAt(good, "t.tail"), 5);  // "t.tai", then "l" starts the value type
  ExpectError(b, {"key 't.tai': unknown type"});
}

TEST(GgufMalformed, DuplicateKeysAndTensors) {
  GgufWriter w;
  w.SetU32("a.x", 1);
  w.SetU32("a.y", 2);
  std::vector<uint8_t> data(64);
  ASSERT_TRUE(w.AddTensor("t0", DType::kF32, {4}, data.data(), 16).ok());
  ASSERT_TRUE(w.AddTensor("t1", DType::kF32, {4}, data.data(), 16).ok());
  Bytes good = std::move(w.WriteToBytes()).value();
  Bytes b = good;
  b[StringAt(good, "a.y") + 10] = 'x';
  ExpectError(b, {"key 'a.x': duplicate key"});
  b = good;
  b[StringAt(good, "t1") + 9] = '0';
  ExpectError(b, {"tensor 't0': duplicate tensor name"});
}

TEST(GgufMalformed, ValueTypes) {
  const Bytes good = MakeSmall();
  for (uint32_t t : {13u, 99u, 0xffffffffu}) {
    Bytes b = good;
    Put32(&b, After(good, "t.u32"), t);
    ExpectError(b, {"key 't.u32': unknown type " + std::to_string(t)});
    b = good;
    Put32(&b, After(good, "t.arr") + 4, t);
    ExpectError(b, {"key 't.arr': unknown type " + std::to_string(t) + " for array elements"});
  }
  Bytes b = good;
  b[After(good, "t.bool") + 4] = 2;
  ExpectError(b, {"key 't.bool': bool value 2", "not 0 or 1"});
  // Changing a type to one of another size desynchronises but must fail cleanly.
  for (uint32_t t = 0; t <= 12; ++t) {
    b = good;
    Put32(&b, After(good, "t.u32"), t);
    Status s = Parse(b);
    if (t == 4 || t == 5 || t == 6) {  // same size: still a valid file
      EXPECT_TRUE(s.ok()) << t << " " << s.message();
    } else {
      EXPECT_FALSE(s.ok()) << t;
    }
  }
}

TEST(GgufMalformed, ArrayCounts) {
  const Bytes good = MakeSmall();
  for (uint64_t v : {uint64_t{good.size()}, uint64_t{1} << 40, uint64_t{1} << 63, ~uint64_t{0}}) {
    for (const char* key : {"t.arr", "t.strs", "t.nested"}) {
      Bytes b = good;
      Put64(&b, After(good, key) + 8, v);
      ExpectError(b, {std::string("key '") + key + "': array count", "past end"});
    }
  }
  Bytes b = good;
  Put64(&b, After(good, "t.nested") + 20, ~uint64_t{0});  // the inner array's count
  ExpectError(b, {"key 't.nested': array count", "of u8", "past end"});
}

GgufValue Nested(int levels) {
  GgufValue v = GgufValue::ArrayOf(std::vector<uint8_t>{7});
  for (int i = 1; i < levels; ++i) v = GgufValue::ArrayOfArrays({v});
  return v;
}

TEST(GgufMalformed, NestingDepth) {
  GgufWriter w;
  w.Set("deep", Nested(kGgufMaxArrayDepth));
  Bytes ok = std::move(w.WriteToBytes()).value();
  EXPECT_TRUE(Parse(ok).ok());
  w.Set("deep", Nested(kGgufMaxArrayDepth + 1));
  ExpectError(std::move(w.WriteToBytes()).value(), {"key 'deep'", "nested too deep"});
  w.Set("deep", Nested(1000));
  ExpectError(std::move(w.WriteToBytes()).value(), {"nested too deep"});
}

TEST(GgufMalformed, Alignment) {
  const Bytes good = MakeSmall();
  const size_t at = After(good, "general.alignment");
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
    Bytes b = good;
    Put32(&b, at + 4, a);
    ExpectError(b, {"general.alignment", "alignment " + std::to_string(a), "power of two"});
  }
  Bytes b = good;
  Put32(&b, at, 5);  // i32, same size
  ExpectError(b, {"general.alignment", "type i32", "expected u32"});
  b = good;
  Put32(&b, at + 4, 64);  // valid, but the data section and offsets move
  EXPECT_FALSE(Parse(b).ok());
  b = good;
  Put32(&b, at + 4, 16);  // smaller: offsets still aligned, data section starts earlier
  Status s = Parse(b);
  (void)s;  // either outcome is fine; Parse checked the invariants
  GgufWriter w;
  w.SetU32("general.alignment", 4096);
  const float x[4] = {};
  ASSERT_TRUE(w.AddTensor("x", DType::kF32, {4}, x, sizeof(x)).ok());
  Bytes big = std::move(w.WriteToBytes()).value();
  ASSERT_TRUE(Parse(big).ok());
  Put32(&big, After(big, "general.alignment") + 4, 1u << 31);
  ExpectError(big, {"data section at offset 2147483648 past end of file"});
}

TEST(GgufMalformed, TensorInfos) {
  const Bytes good = MakeSmall();
  const size_t a = After(good, "w.a");  // n_dims, ne[0], ne[1], type, offset
  const size_t b_at = After(good, "w.b");
  Bytes b = good;
  for (uint32_t n : {0u, 5u, 0xffffffffu}) {
    b = good;
    Put32(&b, a, n);
    ExpectError(b, {"tensor 'w.a': n_dims " + std::to_string(n) + " out of range"});
  }
  b = good;
  Put64(&b, a + 4 + 8, 0);
  ExpectError(b, {"tensor 'w.a': ne[1] is 0"});
  b = good;
  Put64(&b, a + 4, uint64_t{1} << 63);
  ExpectError(b, {"tensor 'w.a': ne[0]", "out of range (overflow)"});
  b = good;
  Put64(&b, a + 4, uint64_t{1} << 32);
  Put64(&b, a + 12, uint64_t{1} << 32);
  ExpectError(b, {"tensor 'w.a': element count overflows"});
  b = good;
  Put64(&b, a + 4, uint64_t{1} << 40);  // fits int64, far past the end
  ExpectError(b, {"tensor 'w.a'", "past end"});
  b = good;
  Put64(&b, a + 12, 1);  // ne 1 is fine: a smaller tensor
  EXPECT_TRUE(Parse(b).ok());
  for (uint32_t t : {4u, 5u, 31u, 99u, 0xffffffffu}) {
    b = good;
    Put32(&b, a + 20, t);
    ExpectError(b, {"tensor 'w.a': unknown type id " + std::to_string(t)});
  }
  b = good;
  Put32(&b, a + 20, static_cast<uint32_t>(DType::kQ4_K));  // ne[0] = 8
  ExpectError(b, {"tensor 'w.a': row length ne[0] = 8", "q4_K block size 256"});
  b = good;
  Put64(&b, b_at + 4, 16);  // q8_0 row of 16
  ExpectError(b, {"tensor 'w.b'", "block size 32"});
  b = good;
  Put32(&b, a + 20, static_cast<uint32_t>(DType::kF16));  // smaller: still valid
  EXPECT_TRUE(Parse(b).ok());

  // Offsets: w.a at 0, w.b at 64, w.c at 160.
  const size_t off_a = a + 24, off_b = b_at + 24;
  ASSERT_EQ(Get64(good, off_a), 0u);
  ASSERT_EQ(Get64(good, off_b), 64u);
  for (uint64_t o : {uint64_t{1}, uint64_t{31}, uint64_t{65}}) {
    b = good;
    Put64(&b, off_b, o);
    ExpectError(
        b, {"tensor 'w.b': offset " + std::to_string(o), "not a multiple of the alignment 32"});
  }
  for (uint64_t o : {uint64_t{4096}, uint64_t{1} << 40, ~uint64_t{31}}) {
    b = good;
    Put64(&b, off_b, o);
    ExpectError(b, {"tensor 'w.b' offset " + std::to_string(o), "past end of file"});
  }
  b = good;
  Put64(&b, off_b, 32);
  ExpectError(b, {"tensor 'w.a'", "overlaps tensor 'w.b'"});
  b = good;
  Put64(&b, off_b, 0);
  ExpectError(b, {"overlaps"});
  b = good;
  Put64(&b, off_a, 128);  // over the end of w.b and all of w.c
  ExpectError(b, {"overlaps"});
}

TEST(GgufMalformed, TruncatedStoriesEveryHeaderByte) {
  const Bytes full = ReadStories();
  ASSERT_FALSE(full.empty());
  auto f = GgufFile::FromBytes(Bytes(full));
  ASSERT_TRUE(f.ok());
  uint64_t end = 0;  // last byte any tensor uses
  for (const GgufTensor& t : (*f)->tensors())
    end = std::max(end, (*f)->data_offset() + t.offset + t.n_bytes);
  const size_t header = (*f)->data_offset() + 256;
  std::vector<size_t> cuts;
  for (size_t n = 0; n < header; ++n) cuts.push_back(n);
  for (size_t n = header; n < full.size(); n += 3989) cuts.push_back(n);
  for (size_t n = full.size() - 64; n < full.size(); ++n) cuts.push_back(n);
  for (size_t n : cuts) {
    Status s = Parse(Bytes(full.begin(), full.begin() + n));
    if (n >= end) {
      EXPECT_TRUE(s.ok()) << n << ": " << s.message();
    } else {
      ASSERT_FALSE(s.ok()) << "prefix " << n << " parsed";
      ASSERT_TRUE(Contains(s.message(), "past end")) << n << ": " << s.message();
    }
  }
}

TEST(GgufMalformed, TruncatedFilesOnDisk) {
  const Bytes full = ReadStories();
  ASSERT_FALSE(full.empty());
  const std::string path =
      ::testing::TempDir() + "/gguf_malformed_" + std::to_string(getpid()) + ".gguf";
  for (size_t n : {size_t{3}, size_t{24}, size_t{5000}, size_t{14176}, full.size() - 1}) {
    std::FILE* fp = std::fopen(path.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(full.data(), 1, n, fp), n);
    std::fclose(fp);
    auto r = GgufFile::Open(path);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_TRUE(r.message().starts_with("gguf: " + path + ": ")) << r.message();
    EXPECT_TRUE(Contains(r.message(), "past end")) << r.message();
  }
  std::remove(path.c_str());
}

// Every byte of the small file's header set to a few values: no crash, and
// when it still parses, the invariants hold (checked by Parse).
TEST(GgufMalformed, EveryHeaderByteCorrupted) {
  const Bytes good = MakeSmall();
  auto f = GgufFile::FromBytes(Bytes(good));
  ASSERT_TRUE(f.ok());
  const size_t header = (*f)->data_offset();
  int failed = 0;
  for (size_t i = 0; i < header; ++i) {
    for (int v : {0x00, 0xff, good[i] ^ 0x80, good[i] + 1, good[i] ^ 0x01}) {
      Bytes b = good;
      b[i] = static_cast<uint8_t>(v);
      if (b[i] == good[i]) continue;
      failed += Parse(b).ok() ? 0 : 1;
    }
  }
  EXPECT_GT(failed, static_cast<int>(header));
  // Payload bytes never matter.
  for (size_t i = header; i < good.size(); i += 7) {
    Bytes b = good;
    b[i] ^= 0xff;
    ASSERT_TRUE(Parse(b).ok()) << i;
  }
}

// Flips 1-4 bytes of `good` at a time, parses the result in place (one
// buffer of the file's size: a view, so no copy of the file per flip), and
// puts the bytes back.
void RandomFlips(const Bytes& good, int iterations, uint32_t seed) {
  auto f = GgufFile::FromBytes(Bytes(good));
  ASSERT_TRUE(f.ok());
  const size_t header = (*f)->data_offset();
  std::mt19937 rng(seed);
  Bytes b = good;
  for (int it = 0; it < iterations; ++it) {
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    bool in_header = false;
    size_t flipped[4];
    for (int k = 0; k < n_flips; ++k) {
      // Three in four flips land in the header, where they matter.
      const size_t pos = (rng() % 4 != 0) ? rng() % header : rng() % b.size();
      flipped[k] = pos;
      in_header |= pos < header;
      if (rng() % 2) {
        b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else {
        b[pos] = static_cast<uint8_t>(rng());
      }
    }
    Status s = ParseWith<std::span<const uint8_t>>(b, &GgufFile::FromView);
    for (int k = 0; k < n_flips; ++k) b[flipped[k]] = good[flipped[k]];
    if (!in_header) {
      ASSERT_TRUE(s.ok()) << "payload-only flip failed: " << s.message();
    }
    if (!s.ok()) {
      ASSERT_TRUE(s.message().starts_with("gguf: <memory>: ")) << s.message();
    }
  }
}

TEST(GgufMalformed, RandomFlipsSmall) { RandomFlips(MakeSmall(), 4000, 1234); }

TEST(GgufMalformed, RandomFlipsStories) { RandomFlips(ReadStories(), 1500, 99); }

}  // namespace
}  // namespace rotor
