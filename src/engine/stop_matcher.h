// Streams generated text while watching for stop strings: text that might be
// the start of a stop string is held back until it is known not to be one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rotor {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds text; returns what may be emitted now. Sets stopped() once a stop
  // string appears (the stop string and anything after it are dropped).
  std::string Push(std::string_view text);
  // The held-back text, at the end of generation.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace rotor
