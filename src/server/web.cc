#include "server/web.h"

namespace rotor::serve {

const StaticFile* FindStaticFile(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const StaticFile& f : StaticFiles())
    if (f.path == path) return &f;
  return nullptr;
}

}  // namespace rotor::serve
