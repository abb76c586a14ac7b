// Minimal leveled logging to stderr. ROTOR_LOG=debug|info|warn|error (default warn).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace rotor {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
void LogLine(LogLevel level, std::string_view text);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rotor
