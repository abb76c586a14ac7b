// deploy/local.sh as the replicas tests run it: N `rotor serve` replicas of
// this build behind HAProxy on 127.0.0.1, in a process group of their own
// that the destructor kills whatever happened; and an HTTP client that reads
// which replica answered.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rotor::replicas_testing {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool HaveHaproxy();  // haproxy and curl on the PATH

struct Replica {
  std::string name;  // r1, r2, ...
  int port = 0;
  pid_t pid = -1;
  std::string log;
};

struct SetupOptions {
  int replicas = 3;
  std::string balance = "affinity";  // or "roundrobin"
  std::string check_interval = "300ms";
  std::vector<std::string> serve_args;  // after the model
};

class LocalSetup {
 public:
  explicit LocalSetup(const SetupOptions& options);
  ~LocalSetup();  // Stop(), then SIGKILL to the whole process group
  bool ok() const { return ready_; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  const std::vector<Replica>& replicas() const { return replicas_; }
  const Replica* Find(const std::string& name) const;
  pid_t haproxy_pid() const { return haproxy_pid_; }
  // SIGTERM to the script; its exit status (-1: it did not end in `timeout`).
  int Stop(std::chrono::seconds timeout);
  std::string Output() const;
  // HAProxy's status of a server of the `replicas` backend ("UP", "DOWN", ...).
  std::string ServerStatus(const std::string& name) const;

 private:
  bool Start(const SetupOptions& options, int port);
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  bool ready_ = false, stopped_ = false;
  std::string error_;
  int port_ = 0;
  std::vector<Replica> replicas_;
  pid_t haproxy_pid_ = -1;
};

// One request through the balancer.
struct Outcome {
  int status = 0;         // 0: no response
  std::string replica;    // X-Rotor-Replica
  bool complete = false;  // a finish_reason (and [DONE] for a stream)
  int64_t cached_tokens = 0;
  std::string error;  // transport error or body, when not complete
  Clock::time_point start, end;
};

// POSTs `body` to `path` (a stream when body["stream"] is true); bounded by
// a 30 s read timeout.
Outcome Send(int port, const std::string& path, const json& body);

// Sums `name` (any labels) over the replicas' /metrics; -1 when one cannot be read.
double SumMetric(const std::vector<int>& ports, const std::string& name);

bool Alive(pid_t pid);

}  // namespace rotor::replicas_testing
