#include "local_setup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

extern char** environ;

namespace rotor::replicas_testing {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A port nobody listens on now (HAProxy binds it a moment later; Start
// retries on another when that fails).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// The script's exit status, or -1 when it has not ended by `deadline`.
int WaitExit(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

bool HaveHaproxy() {
  return std::system("command -v haproxy >/dev/null 2>&1 && command -v curl >/dev/null 2>&1") == 0;
}

bool Alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  // A process killed but not yet reaped by its parent (the script) is a zombie.
  const std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

LocalSetup::LocalSetup(const SetupOptions& options) {
  std::string t = (fs::temp_directory_path() / "rotor-replicas-test-XXXXXX").string();
  if (mkdtemp(t.data()) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = t;
  // The port may be taken between FreePort and HAProxy's bind: try others.
  for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
    if (Start(options, FreePort())) break;
    if (Output().find("HAProxy failed") == std::string::npos) break;  // not a port clash
  }
}

bool LocalSetup::Start(const SetupOptions& options, int port) {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    WaitExit(pid_, Clock::now() + std::chrono::seconds(10));
    pid_ = -1;
  }
  port_ = port;
  const std::string script = std::string(ROTOR_SOURCE_DIR) + "/deploy/local.sh";
  const std::string model = std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf";
  std::vector<std::string> args = {"bash",
                                   script,
                                   "--replicas",
                                   std::to_string(options.replicas),
                                   "--port",
                                   std::to_string(port),
                                   "-m",
                                   model,
                                   "--balance",
                                   options.balance,
                                   "--check-interval",
                                   options.check_interval};
  args.insert(args.end(), options.serve_args.begin(), options.serve_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"ROTOR=" + std::string(ROTOR_BINARY_DIR) + "/rotor",
                                          "ROTOR_LOCAL_DIR=" + (dir_ / "local").string()};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string_view(*e).rfind("ROTOR=", 0) != 0 &&
        std::string_view(*e).rfind("ROTOR_LOCAL_DIR=", 0) != 0)
      env_strings.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, (dir_ / "stdout").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, (dir_ / "stderr").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // a group of its own: killed whole at the end
  const int rc = posix_spawnp(&pid_, "bash", &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    pid_ = -1;
    error_ = "cannot run bash";
    return false;
  }
  // Ready within 60 s (three replicas of the bundled model load in well under one).
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    const std::string out = Slurp(dir_ / "stdout");
    if (out.find("rotor local: ready") != std::string::npos) {
      const std::regex replica(R"(replica (r\d+) http://127\.0\.0\.1:(\d+) pid (\d+) log (\S+))");
      for (std::sregex_iterator it(out.begin(), out.end(), replica), end; it != end; ++it)
        replicas_.push_back(Replica{(*it)[1], std::stoi((*it)[2]),
                                    static_cast<pid_t>(std::stoi((*it)[3])), (*it)[4]});
      std::smatch m;
      const std::regex haproxy(R"(HAProxy pid (\d+))");
      if (std::regex_search(out, m, haproxy)) haproxy_pid_ = std::stoi(m[1]);
      ready_ = static_cast<int>(replicas_.size()) == options.replicas && haproxy_pid_ > 0;
      if (!ready_) error_ = "cannot read the replicas from: " + out;
      return ready_;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "deploy/local.sh exited: " + Output();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = "deploy/local.sh not ready in 60 s: " + Output();
  return false;
}

LocalSetup::~LocalSetup() {
  if (pid_ > 0) {
    if (!stopped_) Stop(std::chrono::seconds(40));
    kill(-pid_, SIGKILL);
    if (!stopped_) WaitExit(pid_, Clock::now() + std::chrono::seconds(10));
  }
  for (const Replica& r : replicas_) kill(r.pid, SIGKILL);  // in case they left the group
  if (haproxy_pid_ > 0) kill(haproxy_pid_, SIGKILL);
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

int LocalSetup::Stop(std::chrono::seconds timeout) {
  if (pid_ <= 0 || stopped_) return -1;
  kill(pid_, SIGTERM);
  const int status = WaitExit(pid_, Clock::now() + timeout);
  stopped_ = status >= 0;
  return status;
}

std::string LocalSetup::Output() const { return Slurp(dir_ / "stdout") + Slurp(dir_ / "stderr"); }

const Replica* LocalSetup::Find(const std::string& name) const {
  for (const Replica& r : replicas_)
    if (r.name == name) return &r;
  return nullptr;
}

std::string LocalSetup::ServerStatus(const std::string& name) const {
  httplib::Client cli("127.0.0.1", port_);
  cli.set_connection_timeout(std::chrono::seconds(2));
  cli.set_read_timeout(std::chrono::seconds(2));
  cli.set_url_encode(false);  // HAProxy's ";csv" must stay as it is
  auto res = cli.Get("/haproxy-stats;csv");
  if (!res || res->status != 200) return "";
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cols;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) cols.push_back(f);
    if (cols.size() > 17 && cols[0] == "replicas" && cols[1] == name) return cols[17];
  }
  return "";
}

Outcome Send(int port, const std::string& path, const json& body) {
  Outcome o;
  o.start = Clock::now();
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(std::chrono::seconds(5));
  cli.set_read_timeout(std::chrono::seconds(30));
  cli.set_write_timeout(std::chrono::seconds(10));
  const bool stream = body.value("stream", false);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string raw;
  bool done = false, finished = false;
  if (stream) {
    std::string pending;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      raw.append(data, n);
      pending.append(data, n);
      for (size_t at; (at = pending.find("\n\n")) != std::string::npos; pending.erase(0, at + 2)) {
        const std::string ev = pending.substr(0, at);
        if (ev == "data: [DONE]") {
          done = true;
          continue;
        }
        if (ev.rfind("data: ", 0) != 0) continue;
        const json j = json::parse(ev.substr(6), nullptr, false);
        if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
        if (j["choices"][0].value("finish_reason", json()).is_string()) finished = true;
      }
      return true;
    };
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  o.end = Clock::now();
  if (!sent) {
    o.error = httplib::to_string(err);
    o.status = res.status > 0 ? res.status : 0;
    o.replica = res.get_header_value("X-Rotor-Replica");
    return o;
  }
  o.status = res.status;
  o.replica = res.get_header_value("X-Rotor-Replica");
  if (stream) {
    o.complete = res.status == 200 && done && finished;
    if (!o.complete) o.error = raw.substr(0, 300);
    return o;
  }
  const json j = json::parse(res.body, nullptr, false);
  o.complete = res.status == 200 && !j.is_discarded() && j.contains("choices") &&
               !j["choices"].empty() && j["choices"][0].value("finish_reason", json()).is_string();
  if (o.complete && j.contains("usage"))
    o.cached_tokens =
        j["usage"].value("prompt_tokens_details", json::object()).value("cached_tokens", 0);
  if (!o.complete) o.error = res.body.substr(0, 300);
  return o;
}

double SumMetric(const std::vector<int>& ports, const std::string& name) {
  double sum = 0;
  for (const int port : ports) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(std::chrono::seconds(5));
    auto res = cli.Get("/metrics");
    if (!res || res->status != 200) return -1;
    std::istringstream lines(res->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name, 0) != 0) continue;
      const char next = line.size() > name.size() ? line[name.size()] : '\0';
      if (next != ' ' && next != '{') continue;
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

}  // namespace rotor::replicas_testing
