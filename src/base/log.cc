#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rotor {
namespace {
LogLevel LevelFromEnv() {
  const char* env = std::getenv("ROTOR_LOG");
  if (env == nullptr) return LogLevel::kWarn;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kWarn;
}
std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};
}  // namespace

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }
void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void LogLine(LogLevel level, std::string_view text) {
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "rotor [%s] %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(text.size()), text.data());
}

}  // namespace rotor
