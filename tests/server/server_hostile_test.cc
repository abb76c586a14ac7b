// `rotor serve` (a child process of this build) under hostile and careless
// clients, loopback only: slowloris and idle connections by the thousand,
// bodies and header lines far over the limits, and an address-space limit
// smaller than the context asks for. Deadlines are short and set by flags.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `rotor serve --port 0 ...` as a child, its stderr in a file; killed at the end.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& args, rlim_t address_space = 0) {
    log_ = (fs::temp_directory_path() / ("rotor-hostile-" + std::to_string(getpid()) + "-" +
                                         std::to_string(counter_++) + ".log"))
               .string();
    const std::string binary = std::string(ROTOR_BINARY_DIR) + "/rotor";
    std::vector<std::string> all = {binary, "serve", "-m", BundledModel(), "--port", "0",
                                    "-t",   "1"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 2);
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      if (address_space > 0) {
        rlimit as{address_space, address_space};
        setrlimit(RLIMIT_AS, &as);
      }
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    // The port, from the start-up line.
    const std::regex listening("listening on http://[^:]+:([0-9]+)");
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      std::smatch m;
      const std::string text = Slurp(log_);
      if (std::regex_search(text, m, listening)) {
        port_ = std::stoi(m[1]);
        break;
      }
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove(log_, ec);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string log() const { return Slurp(log_); }
  // Resident memory in bytes (0 when it cannot be read).
  int64_t Rss() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return 0;
  }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

int Connect(int port, bool nonblocking) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  if (nonblocking) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Makes room for `n` descriptors (the hard limit permitting).
bool RaiseFileLimit(rlim_t n) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur >= n) return true;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < n) return false;
  r.rlim_cur = n;
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

// The status line's code of what arrived on `fd` ("HTTP/1.1 413 ..."), or 0.
int StatusOf(const std::string& response) {
  std::smatch m;
  static const std::regex status_line("^HTTP/1\\.[01] ([0-9]{3})");
  return std::regex_search(response, m, status_line) ? std::stoi(m[1]) : 0;
}

// A completion of 4 tokens; its status and how long it took.
std::pair<int, milliseconds> NormalRequest(int port) {
  const auto start = Clock::now();
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(5);
  cli.set_read_timeout(5);
  auto res = cli.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4})",
                      "application/json");
  return {res ? res->status : 0,
          std::chrono::duration_cast<milliseconds>(Clock::now() - start)};
}

// --parallel 8; 1,000 connections that send a header one byte every 2 s and
// 1,000 that send nothing, all open at once. A normal request is answered
// within 1 s throughout, the server's RSS stays within 100 MB of its idle
// value, and every slow connection is closed by its header deadline (3 s).
TEST(ServerHostileTest, SlowlorisAndIdleConnectionsStarveNobody) {
  constexpr int kSlow = 1000, kIdle = 1000;
  ASSERT_TRUE(RaiseFileLimit(kSlow + kIdle + 256)) << "RLIMIT_NOFILE too low for this test";
  ServeProcess serve({"--parallel", "8", "--max-connections", "4000",
                      "--max-connections-per-client", "0", "--header-timeout", "3",
                      "--keep-alive-timeout", "60"});
  ASSERT_GT(serve.port(), 0) << serve.log();
  ASSERT_EQ(NormalRequest(serve.port()).first, 200);
  const int64_t idle_rss = serve.Rss();
  ASSERT_GT(idle_rss, 0);

  std::vector<int> idle, slow;
  std::vector<Clock::time_point> first_byte;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = Connect(serve.port(), true);
    ASSERT_GE(fd, 0) << "idle connection " << i;
    idle.push_back(fd);
  }
  const std::string header = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  for (int i = 0; i < kSlow; ++i) {
    const int fd = Connect(serve.port(), true);
    ASSERT_GE(fd, 0) << "slow connection " << i;
    ASSERT_EQ(send(fd, header.data(), 1, MSG_NOSIGNAL), 1);
    slow.push_back(fd);
    first_byte.push_back(Clock::now());
  }
  std::vector<size_t> sent(kSlow, 1);
  std::vector<Clock::time_point> closed_at(kSlow, Clock::time_point::max());
  std::vector<std::string> answer(kSlow);
  int closed = 0;
  const auto start = Clock::now();
  auto last_drip = start;
  int normal = 0;
  milliseconds worst{0};
  int64_t peak_rss = idle_rss;
  while (closed < kSlow && Clock::now() - start < std::chrono::seconds(12)) {
    if (Clock::now() - last_drip >= std::chrono::seconds(2)) {
      last_drip = Clock::now();
      for (int i = 0; i < kSlow; ++i)
        if (closed_at[i] == Clock::time_point::max() &&
            send(slow[i], header.data() + sent[i] % header.size(), 1,
                 MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
          ++sent[i];
    }
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < kSlow; ++i)
      if (closed_at[i] == Clock::time_point::max()) {
        fds.push_back({slow[i], POLLIN, 0});
        which.push_back(i);
      }
    poll(fds.data(), fds.size(), 50);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      const int i = which[k];
      char buf[4096];
      const ssize_t n = recv(slow[i], buf, sizeof(buf), 0);
      if (n > 0) {
        answer[i].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        closed_at[i] = Clock::now();
        ++closed;
      }
    }
    const auto [status, took] = NormalRequest(serve.port());
    EXPECT_EQ(status, 200) << "normal request " << normal;
    worst = std::max(worst, took);
    ++normal;
    peak_rss = std::max(peak_rss, serve.Rss());
  }
  EXPECT_LT(worst.count(), 1000) << "slowest normal request, ms";
  EXPECT_GT(normal, 10);
  EXPECT_LT(peak_rss - idle_rss, 100 << 20) << "RSS growth";
  EXPECT_EQ(closed, kSlow);
  int late = 0, answered_408 = 0;
  for (int i = 0; i < kSlow; ++i) {
    // 3 s header deadline, checked every 100 ms, plus this loop's own pace.
    if (closed_at[i] - first_byte[i] > milliseconds(3000 + 1000)) ++late;
    if (StatusOf(answer[i]) == 408) ++answered_408;
  }
  EXPECT_EQ(late, 0) << "slow connections closed after their deadline";
  EXPECT_EQ(answered_408, kSlow);
  // The idle connections are still open (their keep-alive time is 60 s) and
  // the server answers.
  int idle_open = 0;
  for (int fd : idle) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) ++idle_open;
  }
  EXPECT_EQ(idle_open, kIdle);
  RecordProperty("worst_normal_ms", static_cast<int>(worst.count()));
  RecordProperty("rss_growth_kb", static_cast<int>((peak_rss - idle_rss) / 1024));
  std::printf("slowloris %d + idle %d: %d normal requests, slowest %lld ms, RSS %lld -> %lld KB\n",
              kSlow, kIdle, normal, static_cast<long long>(worst.count()),
              static_cast<long long>(idle_rss / 1024), static_cast<long long>(peak_rss / 1024));
  for (int fd : idle) close(fd);
  for (int fd : slow) close(fd);
  EXPECT_TRUE(serve.alive());
}

// Sends `head` and then `filler` bytes in pieces until the server answers;
// returns the answer's status and how many filler bytes were sent by then.
// RSS is sampled as it goes.
struct Flood {
  int status = 0;
  int64_t sent = 0;
  int64_t peak_rss = 0;
};
Flood SendUntilAnswered(const ServeProcess& serve, const std::string& head, int64_t filler,
                        bool chunked) {
  Flood f;
  const int fd = Connect(serve.port(), false);
  if (fd < 0) return f;
  timeval tv{0, 200 * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const std::string piece(64 << 10, 'a');
  const std::string chunk_head = fmt::format("{:x}\r\n", piece.size());
  std::string answer;
  int pieces = 0;
  while (f.sent < filler) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) break;  // an answer (or the close)
    bool ok = true;
    if (chunked) ok = send(fd, chunk_head.data(), chunk_head.size(), MSG_NOSIGNAL) > 0;
    const ssize_t n = ok ? send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) : -1;
    if (chunked && n > 0) send(fd, "\r\n", 2, MSG_NOSIGNAL);
    if (n <= 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue;  // the server stopped reading
      break;
    }
    f.sent += n;
    if (++pieces % 16 == 0) f.peak_rss = std::max(f.peak_rss, serve.Rss());
  }
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) > 0) {
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) answer.assign(buf, static_cast<size_t>(n));
  }
  f.peak_rss = std::max(f.peak_rss, serve.Rss());
  close(fd);
  f.status = StatusOf(answer);
  return f;
}

// A 200 MiB chunked body and a 256 MiB header line: 413 and 431 before much
// more than the limit has been sent, RSS growing by less than 20 MB.
TEST(ServerHostileTest, HugeChunkedBodyAndHeaderLineAreRefusedEarly) {
  ServeProcess serve({"--parallel", "2", "--max-body", "1048576"});
  ASSERT_GT(serve.port(), 0) << serve.log();
  ASSERT_EQ(NormalRequest(serve.port()).first, 200);
  const int64_t idle_rss = serve.Rss();
  // What the sockets buffer between the two sides on loopback, at most.
  constexpr int64_t kInFlight = 16 << 20;

  const Flood body = SendUntilAnswered(
      serve,
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n",
      int64_t{200} << 20, true);
  EXPECT_EQ(body.status, 413);
  EXPECT_LT(body.sent, (1 << 20) + kInFlight);
  EXPECT_LT(body.peak_rss - idle_rss, 20 << 20) << "RSS growth, chunked body";

  const Flood line =
      SendUntilAnswered(serve, "GET /health HTTP/1.1\r\nX-Long: ", int64_t{256} << 20, false);
  EXPECT_EQ(line.status, 431);
  EXPECT_LT(line.sent, (16 << 10) + kInFlight);
  EXPECT_LT(line.peak_rss - idle_rss, 20 << 20) << "RSS growth, header line";

  std::printf("chunked 200 MiB: %d after %lld bytes; header 256 MiB: %d after %lld bytes; RSS "
              "%lld -> %lld KB\n",
              body.status, static_cast<long long>(body.sent), line.status,
              static_cast<long long>(line.sent), static_cast<long long>(idle_rss / 1024),
              static_cast<long long>(std::max(body.peak_rss, line.peak_rss) / 1024));
  EXPECT_EQ(NormalRequest(serve.port()).first, 200);
}

int64_t VmSize(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
  return 0;
}

// Four requests at once to a server whose address space is limited;
// each is answered (200, or 503 naming memory), and the server goes on.
void FourRequests(const ServeProcess& serve, int* ok, int* out_of_memory) {
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "Once upon a time there was a dog. ";
  const std::string body = json{{"prompt", prompt}, {"max_tokens", 4}}.dump();
  std::vector<std::thread> clients;
  std::vector<std::pair<int, std::string>> answers(4);
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] {
      httplib::Client cli("127.0.0.1", serve.port());
      cli.set_read_timeout(50);
      auto res = cli.Post("/v1/completions", body, "application/json");
      if (res) answers[i] = {res->status, res->body};
    });
  for (std::thread& t : clients) t.join();
  for (const auto& [status, text] : answers) {
    if (status == 200) ++*ok;
    if (status == 503 && text.find("out of memory") != std::string::npos) ++*out_of_memory;
    EXPECT_TRUE(status == 200 || status == 503) << status << " " << text;
  }
}

// g++ defines __SANITIZE_ADDRESS__/__SANITIZE_THREAD__; clang 14 tells by __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROTOR_CLANG_SANITIZER 1
#endif
#endif
#ifndef ROTOR_CLANG_SANITIZER
#define ROTOR_CLANG_SANITIZER 0
#endif

// `serve -c 1048576` under an address-space limit: with 3 GiB every request
// is answered (K/V memory grows with the tokens); with the limit just above
// what the idle server maps, requests get a 503 that names memory, and the
// server stays up and answers.
TEST(ServerHostileTest, AddressSpaceLimitGivesErrorsNotACrash) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || ROTOR_CLANG_SANITIZER
  // The sanitizers reserve terabytes of shadow address space at start-up: no
  // process of theirs starts under an address-space limit.
  GTEST_SKIP() << "address-space limits cannot apply to a sanitizer build";
#endif
  int64_t idle_vm = 0;
  {
    // What the server maps once the model is loaded, before any request:
    // K/V memory comes in slabs of up to 64 MiB of address space (kv_pool.h),
    // so after one request a few MiB more would hold many requests' blocks.
    ServeProcess serve({"-c", "1048576", "--parallel", "4"});
    ASSERT_GT(serve.port(), 0) << serve.log();
    httplib::Client cli("127.0.0.1", serve.port());
    for (int i = 0; i < 600; ++i) {
      auto health = cli.Get("/health");
      if (health && health->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    idle_vm = VmSize(serve.pid());
    ASSERT_EQ(NormalRequest(serve.port()).first, 200);
  }
  ASSERT_GT(idle_vm, 0);
  {
    ServeProcess serve({"-c", "1048576", "--parallel", "4"}, rlim_t{3} << 30);
    ASSERT_GT(serve.port(), 0) << serve.log();
    int ok = 0, oom = 0;
    FourRequests(serve, &ok, &oom);
    EXPECT_EQ(ok + oom, 4);
    EXPECT_TRUE(serve.alive());
  }
  {
    ServeProcess serve({"-c", "1048576", "--parallel", "4"},
                       static_cast<rlim_t>(idle_vm + (4 << 20)));
    ASSERT_GT(serve.port(), 0) << serve.log();
    int ok = 0, oom = 0;
    FourRequests(serve, &ok, &oom);
    EXPECT_EQ(ok + oom, 4);
    EXPECT_GT(oom, 0) << "the tight limit should make some request run out of memory";
    ASSERT_TRUE(serve.alive()) << serve.log();
    httplib::Client cli("127.0.0.1", serve.port());
    auto health = cli.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto again = cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})",
                          "application/json");
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->status == 200 ||
                (again->status == 503 && again->body.find("out of memory") != std::string::npos))
        << again->status << " " << again->body;
    std::printf("address space %lld MiB: %d answered, %d out of memory\n",
                static_cast<long long>((idle_vm + (4 << 20)) >> 20), ok, oom);
  }
}

}  // namespace
}  // namespace rotor::serve::testing
