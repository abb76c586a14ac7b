#include "base/memory.h"

#include <cstdio>
#include <cstring>

namespace rotor {
namespace {
int64_t ReadStatusKb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
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
}  // namespace

int64_t PeakRssBytes() { return ReadStatusKb("VmHWM") * 1024; }
int64_t CurrentRssBytes() { return ReadStatusKb("VmRSS") * 1024; }

bool ResetPeakRss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = std::fputs("5", f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok;
}

}  // namespace rotor
