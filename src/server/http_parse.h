// HTTP/1.1 request framing for `rotor serve`: an incremental parser fed the
// bytes of a connection as they arrive, with every limit checked as the bytes
// come in, so nothing is buffered past a limit:
//   header bytes (request line, fields, chunked trailers) and field count: 431;
//   body bytes, Content-Length or chunked: 413 as soon as the declared length
//   or the chunks so far pass --max-body;
//   malformed framing: 400; a transfer coding other than chunked: 501;
//   an HTTP version other than 1.0 / 1.1: 505.
// Pure: no I/O, no clock (deadlines are the connection's, http_server.cc).
// ParseHttpRequest() is the whole-buffer entry point (tests, a fuzz harness).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rotor::serve {

// "%2F" -> "/"; invalid escapes stay as they are. plus_is_space: '+' is a
// space (query strings); else it stays (path segments).
std::string PercentDecode(std::string_view s, bool plus_is_space = false);

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;  // request line + fields (+ trailers)
  int max_headers = 64;                // fields (+ trailers)
  size_t max_body = 4 << 20;           // decoded body bytes
};

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // target before '?'
  std::string query;   // after '?', "" if none
  int minor_version = 1;  // HTTP/1.x
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;       // what the client asks (version and Connection)
  bool expect_continue = false;  // "Expect: 100-continue"

  // The first field named `name` (lower case), or nullptr.
  const std::string* Header(std::string_view name) const;
  // The value of `key` in the query ("" when absent); no percent-decoding
  // beyond what the routes need ('+' and %XX).
  std::string QueryParam(std::string_view key) const;
};

class RequestParser {
 public:
  enum class State { kHeaders, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone,
                     kError };

  explicit RequestParser(const HttpLimits& limits) : limits_(limits) {}

  // Consumes bytes of `data` (up to the end of one request: pipelined bytes
  // after it are left) and returns how many. After it, state() is kDone (the
  // request is whole), kError (error_status(), error_message()), or one of
  // the others (more bytes are needed).
  size_t Feed(std::string_view data);
  State state() const { return state_; }
  bool headers_done() const { return state_ != State::kHeaders && state_ != State::kError; }
  // Whether no byte of a request has arrived yet.
  bool empty() const { return state_ == State::kHeaders && line_.empty() && lines_ == 0; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  HttpRequest& request() { return request_; }
  // Ready for the next request of a keep-alive connection.
  void Reset();

 private:
  size_t FeedHeaders(std::string_view data);
  size_t FeedChunkSize(std::string_view data);
  size_t FeedTrailers(std::string_view data);
  // Reads one line into line_ (without CR LF); false: needs more bytes.
  // Counts header bytes against the limit (sets kError 431).
  bool TakeLine(std::string_view data, size_t* used);
  bool ParseRequestLine(std::string_view line);
  bool ParseField(std::string_view line);
  bool EndHeaders();
  void Fail(int status, std::string message);

  HttpLimits limits_;
  State state_ = State::kHeaders;
  HttpRequest request_;
  std::string line_;          // the line being read
  bool line_done_ = false;
  size_t header_bytes_ = 0;   // counted against max_header_bytes
  int lines_ = 0;             // lines of this header block (request line included)
  uint64_t remaining_ = 0;    // body / chunk bytes still to come
  int error_status_ = 0;
  std::string error_message_;
};

// Parses one whole request from `bytes` (what a client sent, read in one
// piece). Returns 0 with *out filled and *consumed the request's length;
// an HTTP status (400, 413, 431, 501, 505) for a request the server refuses;
// or -1 when `bytes` end before the request does.
int ParseHttpRequest(std::string_view bytes, const HttpLimits& limits, HttpRequest* out,
                     size_t* consumed = nullptr);

// The reason phrase of a status ("OK", "Payload Too Large", ...).
const char* HttpReason(int status);

}  // namespace rotor::serve
