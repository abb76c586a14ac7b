// A parse stack of the matcher (matcher.h): grammar positions, the top last.
// Most stacks are a few elements deep, so up to kInline of them live inside
// the object and a step copies a stack without the heap (with 2,000 open
// alternatives a mask spent 30% of its time in malloc and free when each
// stack was a std::vector).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rotor::grammar {

struct Element;

class SmallStack {
 public:
  using value_type = const Element*;
  static constexpr uint32_t kInline = 8;

  SmallStack() = default;
  SmallStack(const value_type* first, const value_type* last) {
    Reserve(static_cast<uint32_t>(last - first));
    Copy(first, static_cast<uint32_t>(last - first));
  }
  SmallStack(const SmallStack& o) : SmallStack(o.begin(), o.end()) {}
  SmallStack(SmallStack&& o) noexcept { Steal(o); }
  SmallStack& operator=(const SmallStack& o) {
    if (this != &o) {
      size_ = 0;
      Reserve(o.size_);
      Copy(o.begin(), o.size_);
    }
    return *this;
  }
  SmallStack& operator=(SmallStack&& o) noexcept {
    if (this != &o) {
      Release();
      Steal(o);
    }
    return *this;
  }
  ~SmallStack() { Release(); }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  value_type back() const { return data()[size_ - 1]; }
  void push_back(value_type v) {
    if (size_ == cap_) Reserve(size_ + 1);
    data()[size_++] = v;
  }
  void pop_back() { --size_; }
  const value_type* begin() const { return data(); }
  const value_type* end() const { return data() + size_; }
  bool operator==(const SmallStack& o) const {
    return size_ == o.size_ && std::equal(begin(), end(), o.begin());
  }
  struct Hash {
    size_t operator()(const SmallStack& s) const {
      size_t h = s.size();
      for (const value_type e : s) h = (h ^ reinterpret_cast<uintptr_t>(e)) * 0x9E3779B97F4A7C15ull;
      return h ^ (h >> 29);
    }
  };

 private:
  value_type* data() { return heap_ != nullptr ? heap_ : inline_; }
  const value_type* data() const { return heap_ != nullptr ? heap_ : inline_; }
  void Copy(const value_type* from, uint32_t n) {
    if (n > 0) std::memcpy(data(), from, n * sizeof(value_type));
    size_ = n;
  }
  void Reserve(uint32_t n) {
    if (n <= cap_) return;
    const uint32_t cap = std::max(n, 2 * cap_);
    auto* grown = new value_type[cap];
    if (size_ > 0) std::memcpy(grown, data(), size_ * sizeof(value_type));
    delete[] heap_;
    heap_ = grown;
    cap_ = cap;
  }
  void Release() {
    delete[] heap_;
    heap_ = nullptr;
    cap_ = kInline;
    size_ = 0;
  }
  void Steal(SmallStack& o) {
    if (o.heap_ != nullptr) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.heap_ = nullptr;
      o.cap_ = kInline;
      o.size_ = 0;
    } else {
      Copy(o.inline_, o.size_);
      o.size_ = 0;
    }
  }

  value_type inline_[kInline];
  value_type* heap_ = nullptr;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
};

}  // namespace rotor::grammar
