// Parameter sweeps under the sanitizers. The numeric sweeps (every ISA x
// shape x policy x K/V type) are most of the suite's time under ASan+UBSan
// and TSan, where what they add is memory and thread safety of the same code
// paths, not the numbers again (the Release suite checks those in full).
// There a sweep runs every `stride`-th combination of its nested loops,
// starting at an offset taken from the running test's name, so that the
// parameterized instances of one test run different combinations; in every
// other build it runs all of them.
//
// Coverage: a value of one loop runs when the loops inside it make at least
// `stride` combinations, or when the loops around it run at least `stride`
// times and the stride divides no loop's size (then the kept combinations
// step that loop's index through every residue). tests/base/sweep_test.cc
// checks each sweep's loop sizes and stride with every offset. Sweeps over
// ISAs keep the ISA loop outermost, so that each ISA runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROTOR_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROTOR_TEST_SANITIZED 1
#endif
#endif

namespace rotor::testing {

#ifdef ROTOR_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

class Sweep {
 public:
  // stride: under the sanitizers, one combination in `stride` runs.
  explicit Sweep(int stride) : Sweep(kSanitized ? stride : 1, TestNameHash()) {}
  // One combination in `stride` from the offset's, in every build (the
  // sweep's own test checks the strides above with every offset).
  Sweep(int stride, uint64_t offset)
      : stride_(stride > 1 ? stride : 1), counter_(offset % static_cast<uint64_t>(stride_)) {}
  // Whether the next combination of the loops runs; call once per combination.
  bool Next() { return counter_++ % static_cast<uint64_t>(stride_) == 0; }
  int stride() const { return stride_; }

 private:
  // FNV-1a of the running test's full name: fixed from run to run.
  static uint64_t TestNameHash() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    uint64_t h = 1469598103934665603ull;
    for (std::string_view part : {std::string_view(info ? info->test_suite_name() : ""),
                                  std::string_view(info ? info->name() : "")})
      for (char c : part) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return h;
  }

  int stride_;
  uint64_t counter_;
};

}  // namespace rotor::testing
