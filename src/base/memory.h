// Process memory accounting (Linux /proc) and aligned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

namespace rotor {

// "512 B", "1.25 KiB", "3.00 MiB", "2.50 GiB".
std::string HumanBytes(int64_t n);

// Peak resident set size (VmHWM) in bytes; 0 if unknown.
int64_t PeakRssBytes();
// Current resident set size (VmRSS) in bytes; 0 if unknown.
int64_t CurrentRssBytes();
// The machine's physical memory in bytes; 0 if unknown.
int64_t PhysicalMemoryBytes();
// The memory the kernel estimates is available to a new process (MemAvailable
// in /proc/meminfo) in bytes; 0 if unknown.
int64_t AvailableMemoryBytes();
// Resets the kernel's peak RSS counter to the current RSS (writes /proc/self/clear_refs);
// returns false where not permitted. Lets a benchmark measure the peak of one phase.
bool ResetPeakRss();

inline constexpr size_t kAlignment = 64;

// Asks the kernel for transparent huge pages (2 MiB) over the whole 2 MiB
// extents inside [p, p + bytes) (Linux madvise MADV_HUGEPAGE; a no-op where
// unsupported or refused). Call before the memory is first written: the
// pages are chosen when they fault in. For large buffers streamed once per
// token (packed weights): one TLB entry per 2 MiB instead of per 4 KiB.
void AdviseHugePages(void* p, size_t bytes);

// Zero-filled, page-aligned memory of `bytes` that costs nothing until
// written: pages are committed as they are first touched (Linux mmap with
// MAP_NORESERVE; elsewhere calloc). Null when the address space is refused.
void* MapZeroed(size_t bytes);
void Unmap(void* p, size_t bytes);
// Returns the whole pages inside [p, p + bytes) of MapZeroed memory to the
// system; they read as zeros again (Linux madvise MADV_DONTNEED; elsewhere
// nothing happens).
void DiscardPages(void* p, size_t bytes);
// Commits every page that [p, p + bytes) touches in MapZeroed memory (zeroed)
// in one call (Linux madvise MADV_POPULATE_WRITE, kernel 5.14 and later),
// rather than a page fault at the first write to each. False where the
// kernel refuses (older kernels, memory short): the pages then fault in as
// they are first written, as without the call.
bool PopulatePages(void* p, size_t bytes);

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// A 64-byte aligned, uninitialised array of T. Sized once; never grows.
template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  void Resize(size_t n) {
    size_t bytes = (n * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = bytes ? std::aligned_alloc(kAlignment, bytes) : nullptr;
    if (bytes && !p) throw std::bad_alloc();
    data_.reset(static_cast<T*>(p));
    size_ = n;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  std::unique_ptr<T, AlignedFree> data_;
  size_t size_ = 0;
};

}  // namespace rotor
