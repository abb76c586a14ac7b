// The chat page of `rotor serve` (web/): static files compiled into the binary
// at build time (cmake/embed_files.cmake), served at GET / and GET /<name>.
#pragma once

#include <span>
#include <string_view>

namespace rotor::serve {

struct StaticFile {
  std::string_view path;  // "/index.html", "/chat.js", ...
  std::string_view content_type;
  std::string_view body;
};

// Every embedded file, in the order of web/CMake's list.
std::span<const StaticFile> StaticFiles();

// The file a GET of `path` answers with ("/" is /index.html), or nullptr.
const StaticFile* FindStaticFile(std::string_view path);

}  // namespace rotor::serve
