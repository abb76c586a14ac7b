#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <unordered_map>

namespace rotor::serve {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakerId = 1;
// Bytes read ahead (pipelining) while a request is handled; beyond, the loop
// stops reading and watches only for the peer closing.
constexpr size_t kMaxReadAhead = 64 << 10;
// How long a refused or timed-out connection may take to read its answer.
constexpr std::chrono::seconds kLinger{2};
constexpr std::chrono::milliseconds kTick{100};

std::string Head(int status, const HttpHeaders* defaults, const HttpHeaders& headers,
                 const std::string& content_type, bool keep_alive, const HttpHeaders& cors = {}) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status, HttpReason(status));
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  if (defaults)
    for (const auto& [k, v] : *defaults) h += k + ": " + v + "\r\n";
  for (const auto& [k, v] : cors) h += k + ": " + v + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return h;
}

}  // namespace

// Exchanges tell the loop they have output through it; it outlives the
// loop if an exchange does (then the wake-ups go nowhere).
class Waker {
 public:
  Waker() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Waker() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  void Mark(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      dirty_.push_back(id);
    }
    Wake();
  }
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
  }
  std::vector<uint64_t> Take() {
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(fd_, &v, sizeof(v));
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(dirty_, {});
  }

 private:
  int fd_;
  std::mutex mu_;
  std::vector<uint64_t> dirty_;
};

HttpExchange::HttpExchange(HttpRequest request, bool keep_alive, const HttpHeaders* defaults,
                           std::shared_ptr<Waker> waker, uint64_t conn_id, bool cors)
    : request_(std::move(request)),
      head_(request_.method == "HEAD"),
      keep_alive_(keep_alive),
      default_headers_(defaults),
      waker_(std::move(waker)),
      conn_id_(conn_id) {
  // HEAD is answered as GET is (RFC 9110 9.3.2), without the body.
  if (head_) request_.method = "GET";
  // The parser keeps CR and LF out of field values: the origin is one line.
  if (const std::string* origin = request_.Header("origin"); cors && origin)
    cors_ = {{"Access-Control-Allow-Origin", *origin},
             {"Access-Control-Allow-Credentials", "true"},
             {"Vary", "Origin"}};
}

void HttpExchange::Append(std::string bytes, bool finished) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_ || finished_) return;
    outbox_ += bytes;
    finished_ = finished;
  }
  waker_->Mark(conn_id_);
}

void HttpExchange::Respond(const HttpResponse& r) {
  std::string out = Head(r.status, default_headers_, r.headers, r.content_type, keep_alive_, cors_);
  out += fmt::format("Content-Length: {}\r\n\r\n", r.body.size());
  if (!head_) out += r.body;
  Append(std::move(out), true);
}

void HttpExchange::StartStream(int status, const std::string& content_type,
                               const HttpHeaders& headers) {
  // HTTP/1.0 has no chunked coding: the body ends when the connection does.
  // A HEAD request gets the head alone (no length, no chunks).
  const bool chunked = request_.minor_version >= 1 && !head_;
  std::string out = Head(status, default_headers_, headers, content_type,
                         keep_alive_ && (chunked || head_), cors_);
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  out += "\r\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunked_ = chunked;
  }
  Append(std::move(out), false);
}

bool HttpExchange::Write(std::string_view data) {
  if (data.empty() || head_) return !gone();
  bool chunked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return false;
    chunked = chunked_;
  }
  Append(chunked ? fmt::format("{:x}\r\n{}\r\n", data.size(), data) : std::string(data), false);
  return !gone();
}

void HttpExchange::End() {
  bool chunked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunked = chunked_;
  }
  Append(chunked ? "0\r\n\r\n" : "", true);
}

bool HttpExchange::gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

enum class Phase { kIdle, kHeaders, kBody, kHandling, kClosing };

struct HttpServer::Conn {
  Conn(uint64_t id, int fd, std::string addr, const HttpLimits& limits)
      : id(id), fd(fd), addr(std::move(addr)), parser(limits) {}
  uint64_t id;
  int fd;
  std::string addr;
  RequestParser parser;
  Phase phase = Phase::kIdle;
  Clock::time_point deadline;
  std::string in;   // bytes read and not parsed yet (pipelined)
  std::string out;  // bytes to send
  size_t out_pos = 0;
  std::shared_ptr<HttpExchange> ex;
  bool ex_finished = false;  // the exchange's last byte is in `out`
  bool close_after = false;  // close once `out` is sent
  int served = 0;
  bool peer_closed = false;
  uint32_t events = 0;  // current epoll interest
};

struct HttpServer::Impl {
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, int> per_addr;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Bind(const HttpServerOptions& options,
                                                     Handler handler, ErrorPage error_page) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->options_ = options;
  s->handler_ = std::move(handler);
  s->error_page_ = std::move(error_page);
  s->impl_ = std::make_unique<Impl>();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options.port);
  if (int rc = getaddrinfo(options.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Errorf("serve: cannot listen on {}:{}: {}", options.host, options.port,
                  gai_strerror(rc));
  int err = 0;
  for (addrinfo* ai = res; ai && s->listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR (restart while old connections linger) but not
    // SO_REUSEPORT, which would let a second server bind the same port.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      s->listen_fd_ = fd;
    } else {
      err = errno;
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (s->listen_fd_ < 0)
    return Errorf("serve: cannot listen on {}:{}: {}", options.host, options.port,
                  std::strerror(err));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  s->waker_ = std::make_shared<Waker>();
  if (s->epoll_fd_ < 0 || s->waker_->fd() < 0)
    return Errorf("serve: epoll: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerId;
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->listen_fd_, &ev);
  ev.data.u64 = kWakerId;
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->waker_->fd(), &ev);
  return s;
}

HttpServer::~HttpServer() {
  if (impl_)
    for (auto& [id, c] : impl_->conns) {
      if (c->ex) {
        std::lock_guard<std::mutex> lock(c->ex->mu_);
        c->ex->gone_ = true;
      }
      close(c->fd);
    }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void HttpServer::Stop() {
  stop_.store(true);
  if (waker_) waker_->Wake();
}

void HttpServer::Run() {
  std::vector<epoll_event> events(256);
  Clock::time_point next_check = Clock::now() + kTick;
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenerId) {
        try {
          Accept();
        } catch (const std::bad_alloc&) {
          // Accept closes what it could not take; the next wake-up retries.
        }
      } else if (id == kWakerId) {
        // (Waker::Take allocates nothing: it swaps the list out.)
        for (uint64_t d : waker_->Take()) {
          auto it = impl_->conns.find(d);
          if (it == impl_->conns.end()) continue;
          try {
            PullOutput(*it->second);
            if (impl_->conns.count(d)) Flush(*it->second);
          } catch (const std::bad_alloc&) {
            Close(d);
          }
        }
      } else {
        try {
          OnEvents(id, events[i].events);
        } catch (const std::bad_alloc&) {
          OutOfMemory(id);
        }
      }
    }
    if (Clock::now() >= next_check) {
      try {
        CheckDeadlines();
      } catch (const std::bad_alloc&) {
        // The next tick tries again.
      }
      next_check = Clock::now() + kTick;
    }
  }
  // Answers already handed over (a Stop after ending requests) go out as far
  // as the sockets take them at once.
  for (uint64_t d : waker_->Take()) {
    auto it = impl_->conns.find(d);
    if (it != impl_->conns.end()) PullOutput(*it->second);
  }
  std::vector<uint64_t> ids;
  for (auto& [id, c] : impl_->conns) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = impl_->conns.find(id);
    if (it == impl_->conns.end()) continue;
    Conn& c = *it->second;
    while (c.out_pos < c.out.size()) {
      const ssize_t w = send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w <= 0) break;
      c.out_pos += static_cast<size_t>(w);
    }
    Close(id);
  }
}

void HttpServer::OnEvents(uint64_t id, uint32_t ev) {
  auto it = impl_->conns.find(id);
  if (it == impl_->conns.end()) return;
  Conn& c = *it->second;
  // A handled request whose read-ahead is full: the peer closing is seen
  // from the flags alone.
  if ((ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && c.phase == Phase::kHandling &&
      c.in.size() >= kMaxReadAhead) {
    Close(id);
    return;
  }
  if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) OnReadable(c);
  if (!impl_->conns.count(id)) return;
  if (ev & EPOLLOUT) Flush(c);
}

// An allocation for one connection failed (a body growing, a handler): that
// connection is answered 503 if it can be, else closed; the others go on.
void HttpServer::OutOfMemory(uint64_t id) {
  auto it = impl_->conns.find(id);
  if (it == impl_->conns.end()) return;
  Conn& c = *it->second;
  if (c.phase == Phase::kHandling || c.phase == Phase::kClosing) {
    Close(id);
    return;
  }
  try {
    c.parser.Reset();  // frees what the request holds
    Refuse(c, 503, "out of memory while reading the request; retry later", nullptr);
  } catch (const std::bad_alloc&) {
    Close(id);
  }
}

void HttpServer::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting for a tick (the listener is
        // level-triggered and would wake the loop at once otherwise).
        epoll_event ev{};
        ev.data.u64 = kListenerId;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_ = true;
        accept_paused_until_ = Clock::now() + kTick;
      }
      return;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
    else if (addr.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t id = next_id_++;
    std::unique_ptr<Conn> conn;
    try {
      conn = std::make_unique<Conn>(id, fd, host, options_.limits);
      impl_->conns.emplace(id, nullptr);
    } catch (const std::bad_alloc&) {
      close(fd);
      continue;
    }
    Conn& c = *conn;
    impl_->conns[id] = std::move(conn);
    n_connections_.store(static_cast<int64_t>(impl_->conns.size()));
    const int from_addr = ++impl_->per_addr[c.addr];
    c.deadline = Clock::now() + options_.keep_alive_timeout;
    Watch(c);
    if (static_cast<int>(impl_->conns.size()) > options_.max_connections) {
      Refuse(c, 503,
             fmt::format("the server has {} connections open, its limit (--max-connections); "
                         "retry later",
                         options_.max_connections),
             nullptr);
    } else if (options_.max_connections_per_client > 0 &&
               from_addr > options_.max_connections_per_client) {
      Refuse(c, 429,
             fmt::format("{} has {} connections open, the limit per client address "
                         "(--max-connections-per-client); retry later",
                         c.addr, options_.max_connections_per_client),
             nullptr);
    }
  }
}

void HttpServer::Watch(Conn& c) {
  uint32_t want = EPOLLRDHUP;
  const bool reading = c.phase != Phase::kClosing && !c.peer_closed &&
                       (c.phase != Phase::kHandling || c.in.size() < kMaxReadAhead);
  if (reading) want |= EPOLLIN;
  if (c.out_pos < c.out.size()) want |= EPOLLOUT;
  if (c.peer_closed) want &= ~EPOLLRDHUP;
  if (want == c.events && c.events != 0) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &ev);
  c.events = want;
}

void HttpServer::OnReadable(Conn& c) {
  const uint64_t id = c.id;
  char buf[16 << 10];
  // A bounded number of reads per wake-up, so one fast sender cannot hold
  // the loop.
  for (int i = 0; i < 16; ++i) {
    if (c.phase == Phase::kHandling && c.in.size() >= kMaxReadAhead) break;
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (c.phase == Phase::kClosing) continue;  // discarded
      if (c.phase == Phase::kHandling) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      Parse(c, std::string_view(buf, static_cast<size_t>(n)));
      if (!impl_->conns.count(id)) return;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    // End of stream or an error. While a request is handled this is the
    // client going away; in between requests, a normal close.
    if (n == 0 && c.phase == Phase::kClosing && c.out_pos < c.out.size()) {
      c.peer_closed = true;
      Watch(c);
      return;
    }
    Close(id);
    return;
  }
  if (impl_->conns.count(id)) Watch(c);
}

void HttpServer::Parse(Conn& c, std::string_view data) {
  while (!data.empty() || c.phase == Phase::kIdle) {
    if (data.empty()) return;
    if (c.phase == Phase::kIdle) {
      c.phase = Phase::kHeaders;
      c.deadline = Clock::now() + options_.header_timeout;
    }
    const size_t used = c.parser.Feed(data);
    data.remove_prefix(used);
    const RequestParser::State st = c.parser.state();
    if (st == RequestParser::State::kError) {
      Refuse(c, c.parser.error_status(), c.parser.error_message(), &c.parser.request());
      return;
    }
    if (c.phase == Phase::kHeaders && c.parser.headers_done()) {
      c.phase = Phase::kBody;
      c.deadline = Clock::now() + options_.body_timeout;
      if (c.parser.request().expect_continue && st != RequestParser::State::kDone) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        Flush(c);
        if (!impl_->conns.count(c.id)) return;
      }
    }
    if (st == RequestParser::State::kDone) {
      c.in.assign(data.data(), data.size());  // pipelined: parsed after this one
      Dispatch(c);
      return;
    }
  }
}

void HttpServer::Dispatch(Conn& c) {
  c.phase = Phase::kHandling;
  c.deadline = Clock::time_point::max();
  HttpRequest request = std::move(c.parser.request());
  const bool keep_alive = request.keep_alive && !stop_.load() &&
                          c.served + 1 < options_.keep_alive_requests;
  c.close_after = !keep_alive;
  c.ex = std::make_shared<HttpExchange>(std::move(request), keep_alive, &options_.default_headers,
                                        waker_, c.id, options_.cors);
  c.ex_finished = false;
  handler_(c.ex);
  // The handler may have answered at once.
  if (impl_->conns.count(c.id)) {
    PullOutput(c);
    if (impl_->conns.count(c.id)) Flush(c);
  }
}

void HttpServer::Refuse(Conn& c, int status, const std::string& message,
                        const HttpRequest* request) {
  HttpResponse r = error_page_(status, message, request);
  if (status == 503 || status == 429) r.headers.emplace_back("Retry-After", "1");
  c.out += Head(r.status, &options_.default_headers, r.headers, r.content_type, false);
  c.out += fmt::format("Content-Length: {}\r\n\r\n", r.body.size());
  c.out += r.body;
  c.phase = Phase::kClosing;
  c.close_after = true;
  c.deadline = Clock::now() + kLinger;
  // Half-close once sent (Flush); the client reads the answer, not a reset.
  Flush(c);
}

void HttpServer::PullOutput(Conn& c) {
  if (!c.ex) return;
  std::lock_guard<std::mutex> lock(c.ex->mu_);
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
  c.out += c.ex->outbox_;
  c.ex->outbox_.clear();
  if (c.ex->finished_ && !c.ex_finished) {
    c.ex_finished = true;
    // The whole answer is handed over: a client that does not read it within
    // the body timeout loses the connection.
    c.deadline = Clock::now() + options_.body_timeout;
  }
}

void HttpServer::Flush(Conn& c) {
  const uint64_t id = c.id;
  while (c.out_pos < c.out.size()) {
    const ssize_t w =
        send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (w > 0) {
      c.out_pos += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(id);
    return;
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
    if (c.phase == Phase::kClosing) {
      // Answer sent: stop sending, and close when the client does (or at
      // the linger deadline), so the answer is not lost to a reset.
      shutdown(c.fd, SHUT_WR);
      if (c.peer_closed) {
        Close(id);
        return;
      }
    } else if (c.phase == Phase::kHandling && c.ex_finished) {
      Finish(c);
      return;
    }
  }
  if (impl_->conns.count(id)) Watch(c);
}

void HttpServer::Finish(Conn& c) {
  std::shared_ptr<HttpExchange> ex = std::move(c.ex);
  c.ex_finished = false;
  ++c.served;
  // Moved out: the callback may hold what holds the exchange.
  if (auto done = std::exchange(ex->on_done_, nullptr)) done(true);
  if (c.close_after) {
    Close(c.id);
    return;
  }
  c.phase = Phase::kIdle;
  c.parser.Reset();
  c.deadline = Clock::now() + options_.keep_alive_timeout;
  const std::string pipelined = std::move(c.in);
  c.in.clear();
  const uint64_t id = c.id;
  if (!pipelined.empty()) Parse(c, pipelined);
  if (impl_->conns.count(id)) Watch(c);
}

void HttpServer::Close(uint64_t id) {
  auto it = impl_->conns.find(id);
  if (it == impl_->conns.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  impl_->conns.erase(it);
  n_connections_.store(static_cast<int64_t>(impl_->conns.size()));
  if (auto a = impl_->per_addr.find(c->addr); a != impl_->per_addr.end() && --a->second <= 0)
    impl_->per_addr.erase(a);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  close(c->fd);
  if (c->ex) {
    {
      std::lock_guard<std::mutex> lock(c->ex->mu_);
      c->ex->gone_ = true;
    }
    if (auto done = std::exchange(c->ex->on_done_, nullptr)) done(false);
  }
}

void HttpServer::CheckDeadlines() {
  const Clock::time_point now = Clock::now();
  if (accept_paused_ && now >= accept_paused_until_) {
    accept_paused_ = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerId;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  }
  std::vector<uint64_t> expired;
  for (auto& [id, c] : impl_->conns)
    if (c->deadline <= now) expired.push_back(id);
  for (uint64_t id : expired) {
    auto it = impl_->conns.find(id);
    if (it == impl_->conns.end()) continue;
    Conn& c = *it->second;
    switch (c.phase) {
      case Phase::kHeaders:
        Refuse(c, 408,
               fmt::format("the request's header did not arrive within {} ms (--header-timeout)",
                           options_.header_timeout.count()),
               nullptr);
        break;
      case Phase::kBody:
        Refuse(c, 408,
               fmt::format("the request's body did not arrive within {} ms (--body-timeout)",
                           options_.body_timeout.count()),
               &c.parser.request());
        break;
      default:  // idle keep-alive, or an answer the client would not read
        Close(id);
        break;
    }
  }
}

}  // namespace rotor::serve
