#include "run_cli.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace rotor::testing {
namespace {

// (Not "Slurp": tests batched with this file in a unity source define their own.)
std::string ReadCapture(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "rotor-cli-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CliResult RunRotor(const std::vector<std::string>& args) { return RunRotor(args, "/dev/null"); }

CliResult RunRotor(const std::vector<std::string>& args, const std::string& stdin_path) {
  // The child writes into files (no pipes to drain while it runs).
  TempDir dir;
  const std::string out_path = dir.File("stdout"), err_path = dir.File("stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 0, stdin_path.c_str(), O_RDONLY, 0);
  const std::string binary = std::string(ROTOR_BINARY_DIR) + "/rotor";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  CliResult r;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = std::string("posix_spawn ") + binary + ": " + std::strerror(rc);
    return r;
  }
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  r.max_rss_kib = usage.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  r.out = ReadCapture(out_path);
  r.err = ReadCapture(err_path);
  return r;
}

std::string BundledModel() { return std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf"; }
std::string LlamaVocab() { return std::string(ROTOR_MODELS_DIR) + "/ggml-vocab-llama-spm.gguf"; }

std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace rotor::testing
