// How deeply a JSON text nests arrays and objects, found by one scan that
// reads no values. A parsed value nested a hundred thousand levels deep is
// valid JSON, but serializing or walking it recurses once per level and
// overflows a thread's stack (a 200 KB request crashed rotor serve), so
// bodies and files are measured before they are parsed.
#pragma once

#include <string_view>

namespace rotor {

// Request bodies, --prompts lines and schema files: no real one comes near.
inline constexpr int kMaxJsonNesting = 256;

// The deepest nesting of [ and { outside strings (0 for a scalar). Text that
// is not JSON gets a number too; the parser reports what is wrong with it.
int JsonNesting(std::string_view text);

// Json::parse(text) without exceptions (nlohmann's json or ordered_json),
// or a discarded value when the text nests deeper than kMaxJsonNesting.
template <typename Json>
Json ParseBoundedJson(std::string_view text) {
  if (JsonNesting(text) > kMaxJsonNesting) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace rotor
