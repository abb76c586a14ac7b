// CHECK: invariants that only a bug can break. Failing aborts with file:line.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace rotor::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "rotor: CHECK failed at %s:%d: %s %s\n", file, line, cond, msg ? msg : "");
  std::abort();
}
}  // namespace rotor::internal

#define CHECK(cond) \
  ((cond) ? (void)0 : ::rotor::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr))
#define CHECK_MSG(cond, msg) \
  ((cond) ? (void)0 : ::rotor::internal::CheckFailed(__FILE__, __LINE__, #cond, msg))
#define CHECK_EQ(a, b) CHECK((a) == (b))
#define CHECK_LE(a, b) CHECK((a) <= (b))
#define CHECK_LT(a, b) CHECK((a) < (b))
#define CHECK_GE(a, b) CHECK((a) >= (b))
#define CHECK_GT(a, b) CHECK((a) > (b))
#ifdef NDEBUG
#define DCHECK(cond) ((void)0)
#else
#define DCHECK(cond) CHECK(cond)
#endif
