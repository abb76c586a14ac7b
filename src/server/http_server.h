// The HTTP/1.1 transport of `rotor serve`: one event-loop thread (epoll) owns
// every connection, so an idle or half-sent connection costs a few hundred
// bytes and no thread. Framing is http_parse.h's; the loop adds what needs a
// clock or a socket:
//   connections in total (503) and per client address (429), answered and
//   closed at accept;
//   time to receive a request's header (from its first byte) and its body
//   (from the end of its header): 408, then the connection closes;
//   keep-alive: requests per connection and idle time between them;
//   the client going away (EOF, reset, or half-close while its request is
//   handled), noticed from the connection itself: the exchange ends
//   (OnDone(false)) so the handler can cancel its work.
// A handler runs on the loop thread and must not block: it answers at once or
// hands the HttpExchange to another thread, which answers through it (every
// HttpExchange call is thread-safe) whenever it likes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "server/http_parse.h"

namespace rotor::serve {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  HttpLimits limits;
  int max_connections = 1024;
  int max_connections_per_client = 256;  // 0: no per-address limit
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds keep_alive_timeout{5'000};
  int keep_alive_requests = 100;  // requests per connection
  HttpHeaders default_headers;    // on every response
  // A request's Origin is allowed on its response (Access-Control-Allow-Origin
  // reflecting it, with credentials), so pages of other origins can read the
  // answers, as llama-server allows any.
  bool cors = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
};

class Waker;

// One request and its response.
class HttpExchange {
 public:
  HttpExchange(HttpRequest request, bool keep_alive, const HttpHeaders* default_headers,
               std::shared_ptr<Waker> waker, uint64_t conn_id, bool cors = false);
  // The handler's: the loop does not touch it after handing it over. A HEAD
  // request's method reads "GET": the handlers answer it as GET, and the
  // exchange sends the head of their answer alone.
  HttpRequest& request() { return request_; }

  // Whole response.
  void Respond(const HttpResponse& r);
  // A chunked response: the head, chunks, the end.
  void StartStream(int status, const std::string& content_type, const HttpHeaders& headers);
  // False once the client has gone (nothing is sent).
  bool Write(std::string_view data);
  void End();
  bool gone() const;
  // Runs once, on the loop thread, when the exchange ends: `completed` when
  // the whole response was written, false when the connection closed first.
  // Set it before handing the exchange to another thread.
  void OnDone(std::function<void(bool completed)> fn) { on_done_ = std::move(fn); }

 private:
  friend class HttpServer;
  void Append(std::string bytes, bool finished);

  HttpRequest request_;
  const bool head_;  // a HEAD request: routed as GET, answered without a body
  const bool keep_alive_;
  const HttpHeaders* default_headers_;
  HttpHeaders cors_;  // Access-Control-Allow-Origin and the rest; empty without an Origin
  std::shared_ptr<Waker> waker_;
  const uint64_t conn_id_;
  std::function<void(bool)> on_done_;  // loop thread

  mutable std::mutex mu_;
  std::string outbox_;    // bytes for the loop to send
  bool finished_ = false;  // the last byte is in outbox_ (or sent)
  bool gone_ = false;
  bool chunked_ = false;
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;
  // The response for a request the transport refuses (400, 408, 413, 429,
  // 431, 503, ...), with its message.
  using ErrorPage = std::function<HttpResponse(int status, const std::string& message,
                                               const HttpRequest* request)>;

  // Binds (port() is known on return); Run() serves.
  static Result<std::unique_ptr<HttpServer>> Bind(const HttpServerOptions& options,
                                                  Handler handler, ErrorPage error_page);
  ~HttpServer();
  int port() const { return port_; }
  // On every response; before Run().
  void set_default_headers(HttpHeaders headers) { options_.default_headers = std::move(headers); }
  // Serves until Stop(); then every connection is closed (responses already
  // handed over are flushed as far as the socket takes them).
  void Run();
  // Any thread.
  void Stop();
  int64_t connections() const { return n_connections_.load(); }

 private:
  struct Conn;
  HttpServer() = default;
  void Accept();
  void OnEvents(uint64_t id, uint32_t events);
  void OutOfMemory(uint64_t id);
  void OnReadable(Conn& c);
  void Parse(Conn& c, std::string_view data);
  void Dispatch(Conn& c);
  void Refuse(Conn& c, int status, const std::string& message, const HttpRequest* request);
  void PullOutput(Conn& c);
  void Flush(Conn& c);
  void Finish(Conn& c);  // the exchange's response is out: next request or close
  void Close(uint64_t id);
  void Watch(Conn& c);   // epoll interest from the connection's state
  void CheckDeadlines();

  HttpServerOptions options_;
  Handler handler_;
  ErrorPage error_page_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int port_ = 0;
  std::shared_ptr<Waker> waker_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> n_connections_{0};
  uint64_t next_id_ = 2;  // 0: the listener, 1: the waker
  std::chrono::steady_clock::time_point accept_paused_until_{};
  bool accept_paused_ = false;
  struct Impl;
  std::unique_ptr<Impl> impl_;  // connections by id, counts by address
};

}  // namespace rotor::serve
