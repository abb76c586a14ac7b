// Parameter sweeps under the sanitizers. The numeric sweeps (every ISA x
// shape x policy x K/V type) are most of the suite's time under ASan+UBSan
// and TSan, where what they add is memory and thread safety of the same code
// paths, not the numbers again (the Release suite checks those in full).
// There a sweep runs every `stride`-th combination of its nested loops,
// starting at an offset taken from the running test's name, so that the
// parameterized instances of one test run different combinations; in every
// other build it runs all of them.
//
// Coverage is checked where the sweep runs, not argued: Next() takes the
// index of each loop, and EveryValueRan() fails the test unless every value
// that reached Next() in each loop position ran at least once (every ISA,
// every case, every m). Whether a stride keeps that depends on the loops'
// sizes, which depend on the machine's ISAs; the strides of the suite keep
// it on machines with two ISAs (scalar, AVX2) and with three (AVX-512).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

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
  // sweep's own test uses it).
  Sweep(int stride, uint64_t offset)
      : stride_(stride > 1 ? stride : 1), counter_(offset % static_cast<uint64_t>(stride_)) {}

  // Whether the next combination of the loops runs; call once per
  // combination that would run, with each loop's index (outermost first).
  bool Next(std::initializer_list<int> at = {}) {
    const bool run = counter_++ % static_cast<uint64_t>(stride_) == 0;
    if (offered_.size() < at.size()) {
      offered_.resize(at.size());
      ran_.resize(at.size());
    }
    int d = 0;
    for (int v : at) {
      offered_[d].insert(v);
      if (run) ran_[d].insert(v);
      ++d;
    }
    return run;
  }

  // Every value that reached Next() in each loop position ran at least once.
  ::testing::AssertionResult EveryValueRan() const {
    for (size_t d = 0; d < offered_.size(); ++d)
      for (int v : offered_[d])
        if (!ran_[d].count(v)) {
          std::ostringstream os;
          os << "sweep (stride " << stride_ << "): value " << v << " of loop " << d
             << " never ran";
          return ::testing::AssertionFailure() << os.str();
        }
    return ::testing::AssertionSuccess();
  }
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
  std::vector<std::set<int>> offered_, ran_;  // [loop] values that reached Next() / ran
};

}  // namespace rotor::testing
