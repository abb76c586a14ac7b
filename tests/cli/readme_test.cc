// Every command of the README's ```sh / ```bash blocks runs and exits 0.
//
// The commands run with bash in a fresh directory holding build/rotor (this
// build's binary) and models/ (the bundled model), as if from the source
// tree. Substitutions, each because the README's command needs a file it
// names as a placeholder, a server, or minutes of work (kSubstitutions below
// is the whole list; nothing else is changed or skipped):
//   - placeholder files: MODEL.gguf, MODEL-F32.gguf, IN.gguf -> the bundled
//     model; MODEL-F16.gguf -> testdata/stories260K-F16.gguf; VOCAB.gguf ->
//     testdata/ggml-vocab-gpt-2.gguf; text.txt -> testdata/tinystories-valid-8k.txt;
//     prompt.txt, long_prompt.txt, other.txt and prompts.txt are written here;
//   - long runs: -n 100000 -> -n 2000 (still 4 times the bundled model's
//     trained context, so the defaults of the evicting policies are what is
//     tested), --stream 20000 -> --stream 2000, bench -r 5 -> -r 1 and
//     -d 0,4096 -> -d 0,256, synth of stories110m with --layers 2,
//     /tmp/ outputs -> this directory;
//   - make run -> the command it runs after building (Makefile: generate -m
//     MODEL -p "Once upon a time"); make test -> not run (it runs this test);
//     make install PREFIX=$HOME/.local -> cmake --install of this build into
//     ./prefix (what make install runs after building), examples/ -> the
//     source tree's;
//   - deploy/local.sh -> the source tree's, with ROTOR=build/rotor;
//   - the serve blocks (rotor serve, deploy/local.sh): the server runs in the background on a free port
//     (--port 8080 -> that port, localhost:8080 -> localhost:that port), the
//     block waits for /health, and curl gets -f so an HTTP error fails it;
//   - stdin is empty (chat ends at once), unless the command pipes its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace rotor::testing {
namespace {

namespace fs = std::filesystem;

struct Substitution {
  std::string from, to;
};

// Applied in order to every command (see the top of the file for why).
std::vector<Substitution> Substitutions(int port) {
  const std::string models = ROTOR_MODELS_DIR, data = ROTOR_TESTDATA_DIR;
  return {
      // First: the paths put in below may be under /tmp (a clone there).
      {"/tmp/", "./"},
      {"MODEL-F32.gguf", models + "/stories260K.gguf"},
      {"MODEL-F16.gguf", data + "/stories260K-F16.gguf"},
      {"MODEL-Q8_0.gguf", "model-q8_0.gguf"},
      {"MODEL-Q4_K_M.gguf", "model-q4_k_m.gguf"},
      {"MODEL.gguf", models + "/stories260K.gguf"},
      {"IN.gguf", models + "/stories260K.gguf"},
      {"VOCAB.gguf", data + "/ggml-vocab-gpt-2.gguf"},
      {"-n 100000", "-n 2000"},
      {"--stream 20000", "--stream 2000"},
      {"-r 5", "-r 1"},
      {"-d 0,4096", "-d 0,256"},
      {"--shape stories110m", "--shape stories110m --layers 2"},
      {"make run", "build/rotor generate -m models/stories260K.gguf -p \"Once upon a time\""},
      {"make install PREFIX=$HOME/.local",
       std::string("cmake --install ") + ROTOR_BINARY_DIR + " --prefix $HOME/.local > /dev/null"},
      {"$HOME/.local", "$PWD/prefix"},
      {"examples/", models + "/../examples/"},
      {"deploy/local.sh", "ROTOR=$PWD/build/rotor " + models + "/../deploy/local.sh"},
      {"--port 8080", "--port " + std::to_string(port)},
      {"localhost:8080", "localhost:" + std::to_string(port)},
      {"curl -s", "curl -sf"},
  };
}

std::string Substitute(std::string cmd, const std::vector<Substitution>& subs) {
  for (const Substitution& s : subs)
    for (size_t at = cmd.find(s.from); at != std::string::npos;
         at = cmd.find(s.from, at + s.to.size()))
      cmd.replace(at, s.from.size(), s.to);
  return cmd;
}

// The commands of each ```sh / ```bash block: continuation lines joined.
std::vector<std::vector<std::string>> ShellBlocks(const std::string& readme) {
  std::vector<std::vector<std::string>> blocks;
  std::istringstream in(readme);
  std::string line;
  bool inside = false;
  std::string pending;
  while (std::getline(in, line)) {
    if (!inside) {
      if (line == "```sh" || line == "```bash") {
        inside = true;
        blocks.emplace_back();
      }
      continue;
    }
    if (line.starts_with("```")) {
      inside = false;
      continue;
    }
    if (!line.empty() && line.back() == '\\') {
      pending += line.substr(0, line.size() - 1);
      continue;
    }
    pending += line;
    if (pending.find_first_not_of(" \t") != std::string::npos) blocks.back().push_back(pending);
    pending.clear();
  }
  return blocks;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

struct BashRun {
  int exit_code = -1;
  std::string output;
};

// Runs a bash script in `dir`, stdin empty, output (both streams) captured.
BashRun Bash(const fs::path& dir, const std::string& script) {
  const fs::path file = dir / "command.sh", log = dir / "command.log";
  std::ofstream(file) << "set -euo pipefail\n" << script << "\n";
  const std::string cmd = "cd '" + dir.string() +
                          "' && timeout 300 bash command.sh < /dev/null > '" + log.string() +
                          "' 2>&1";
  const int status = std::system(cmd.c_str());
  BashRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(log);
  std::ostringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

TEST(ReadmeTest, EveryCommandBlockRuns) {
  std::ifstream in(std::string(ROTOR_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::vector<std::vector<std::string>> blocks = ShellBlocks(ss.str());
  ASSERT_GE(blocks.size(), 8u) << "the README's sh blocks were not found";

  TempDir dir;
  const fs::path root = dir.path();
  fs::create_directories(root / "build");
  fs::create_symlink(fs::path(ROTOR_BINARY_DIR) / "rotor", root / "build" / "rotor");
  fs::create_directory_symlink(ROTOR_MODELS_DIR, root / "models");
  fs::copy_file(std::string(ROTOR_TESTDATA_DIR) + "/tinystories-valid-8k.txt", root / "text.txt");
  for (const char* name : {"prompt.txt", "long_prompt.txt"})
    std::ofstream(root / name) << "Once upon a time, there was a little girl named Lily. She "
                                  "loved to play outside with her dog. One day, they went to "
                                  "the park and saw a big red ball.";
  std::ofstream(root / "other.txt") << "Once upon a time, there was a little boy named Tom.";
  std::ofstream(root / "prompts.txt")
      << "Once upon a time\nThe little dog\n"
      << R"({"prompt": "One day", "max_tokens": 20, "temperature": 0, "kv": "sink", "kv_size": 64})"
      << "\n";

  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::vector<Substitution> subs = Substitutions(port);
  int ran = 0;
  for (const std::vector<std::string>& block : blocks) {
    bool serve = false;
    auto starts_server = [](const std::string& c) {
      return c.find("rotor serve") != std::string::npos ||
             c.find("deploy/local.sh") != std::string::npos;
    };
    for (const std::string& c : block) serve |= starts_server(c);
    if (serve) {
      // The server in the background; the requests once it answers.
      std::string script;
      for (const std::string& c : block) {
        const std::string cmd = Substitute(c, subs);
        if (starts_server(c)) {
          script += cmd.substr(0, cmd.find(" #")) + " > serve.log 2>&1 &\nSERVER=$!\n" +
                    "trap 'kill $SERVER; wait $SERVER' EXIT\n" +
                    "for i in $(seq 200); do curl -sf localhost:" + std::to_string(port) +
                    "/health > /dev/null && break; sleep 0.1; done\n";
        } else {
          script += cmd + "\n";
        }
      }
      const BashRun r = Bash(root, script);
      EXPECT_EQ(r.exit_code, 0) << script << "\n" << r.output;
      ++ran;
      continue;
    }
    for (const std::string& c : block) {
      if (c.starts_with("make test")) continue;  // runs this test; see the top of the file
      const std::string cmd = Substitute(c, subs);
      const BashRun r = Bash(root, cmd);
      EXPECT_EQ(r.exit_code, 0) << "README: " << c << "\nran: " << cmd << "\n" << r.output;
      ++ran;
    }
  }
  EXPECT_GE(ran, 25) << "fewer README commands than expected ran";
}

}  // namespace
}  // namespace rotor::testing
