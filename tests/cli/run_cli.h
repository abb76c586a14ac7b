// Runs the rotor binary of this build as a child process and captures what it
// prints, for end-to-end tests of the command line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace rotor::testing {

struct CliResult {
  int exit_code = -1;    // the child's exit status; 128 + signal if it was killed
  std::string out;       // stdout
  std::string err;       // stderr
  long max_rss_kib = 0;  // the child's own peak resident set in KiB (wait4's ru_maxrss)
};

// Runs ROTOR_BINARY_DIR/rotor with `args` (no shell: arguments go verbatim).
CliResult RunRotor(const std::vector<std::string>& args);
// The same with stdin read from a file (instead of /dev/null).
CliResult RunRotor(const std::vector<std::string>& args, const std::string& stdin_path);

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `text` to dir/name (bytes as given); the path.
std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& text);

// The bundled model and vocabulary.
std::string BundledModel();
std::string LlamaVocab();

}  // namespace rotor::testing
