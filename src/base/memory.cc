#include "base/memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace rotor {

std::string HumanBytes(int64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < (int64_t{1} << 20)) return fmt::format("{:.2f} KiB", n / 1024.0);
  if (n < (int64_t{1} << 30)) return fmt::format("{:.2f} MiB", n / 1048576.0);
  return fmt::format("{:.2f} GiB", n / 1073741824.0);
}

namespace {
// The "key: N kB" line of a /proc file (status, meminfo): N; 0 if missing.
int64_t ReadProcKb(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  size_t key_len = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      kb = std::strtoll(line + key_len + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb;
}

#if defined(__linux__)
// madvise over the pages of [p, p + bytes): the whole pages inside it
// (outward = false) or every page it touches (outward = true).
int AdvisePages(void* p, size_t bytes, bool outward, int advice) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), z = a + bytes;
  const uintptr_t begin = (outward ? a : a + page - 1) / page * page;
  const uintptr_t end = (outward ? z + page - 1 : z) / page * page;
  return end > begin ? madvise(reinterpret_cast<void*>(begin), end - begin, advice) : 0;
}
#endif
}  // namespace

int64_t PeakRssBytes() { return ReadProcKb("/proc/self/status", "VmHWM") * 1024; }
int64_t CurrentRssBytes() { return ReadProcKb("/proc/self/status", "VmRSS") * 1024; }

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t AvailableMemoryBytes() { return ReadProcKb("/proc/meminfo", "MemAvailable") * 1024; }

bool ResetPeakRss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = std::fputs("5", f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok;
}

void AdviseHugePages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) / kPage * kPage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / kPage * kPage;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool PopulatePages(void* p, size_t bytes) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries' headers lack it
#endif
  return AdvisePages(p, bytes, /*outward=*/true, MADV_POPULATE_WRITE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

void* MapZeroed(size_t bytes) {
#if defined(__linux__)
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? nullptr : p;
#else
  return std::calloc(1, bytes);
#endif
}

void Unmap(void* p, size_t bytes) {
#if defined(__linux__)
  if (p != nullptr) munmap(p, bytes);
#else
  (void)bytes;
  std::free(p);
#endif
}

void DiscardPages(void* p, size_t bytes) {
#if defined(__linux__)
  AdvisePages(p, bytes, /*outward=*/false, MADV_DONTNEED);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace rotor
