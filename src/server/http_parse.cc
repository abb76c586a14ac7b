#include "server/http_parse.h"

#include <algorithm>
#include <cctype>

namespace rotor::serve {
namespace {

// A chunk-size line (size and extensions); longer is a malformed body.
constexpr size_t kMaxChunkLine = 4096;

bool IsTchar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return std::isalnum(u) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated list `value` holds `token` (case-insensitive).
bool HasToken(std::string_view value, std::string_view token) {
  const std::string v = Lower(value);
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    if (Trim(std::string_view(v).substr(start, end - start)) == token) return true;
    start = end + 1;
  }
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

std::string HttpRequest::QueryParam(std::string_view key) const {
  std::string_view q = query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    const size_t eq = pair.find('=');
    if (PercentDecode(pair.substr(0, eq), true) == key)
      return eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return "";
}

void RequestParser::Reset() {
  state_ = State::kHeaders;
  request_ = HttpRequest();
  line_.clear();
  line_done_ = false;
  header_bytes_ = 0;
  lines_ = 0;
  remaining_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

void RequestParser::Fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

bool RequestParser::TakeLine(std::string_view data, size_t* used) {
  if (line_done_) {
    line_.clear();
    line_done_ = false;
  }
  const size_t nl = data.find('\n');
  const size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
  const bool header = state_ == State::kHeaders || state_ == State::kTrailers;
  const size_t cap = header ? limits_.max_header_bytes - std::min(header_bytes_, limits_.max_header_bytes)
                            : kMaxChunkLine - std::min(line_.size(), kMaxChunkLine);
  if (take > cap) {
    if (header)
      Fail(431, "the request's header is larger than " + std::to_string(limits_.max_header_bytes) +
                    " bytes (--max-header-bytes)");
    else
      Fail(400, "a chunk-size line is longer than " + std::to_string(kMaxChunkLine) + " bytes");
    return false;
  }
  if (header) header_bytes_ += take;
  line_.append(data.data(), take);
  *used = take;
  if (nl == std::string_view::npos) return false;
  line_.pop_back();
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  line_done_ = true;
  return true;
}

bool RequestParser::ParseRequestLine(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    Fail(400, "malformed request line");
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTchar)) {
    Fail(400, "malformed request method");
    return false;
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
      })) {
    Fail(400, "malformed request target");
    return false;
  }
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
  } else {
    Fail(version.substr(0, 5) == "HTTP/" ? 505 : 400, "unsupported HTTP version");
    return false;
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) request_.query = std::string(target.substr(q + 1));
  return true;
}

bool RequestParser::ParseField(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    Fail(400, "obsolete line folding in a header field");
    return false;
  }
  const size_t colon = line.find(':');
  const std::string_view name = line.substr(0, colon);
  if (colon == std::string_view::npos || name.empty() ||
      !std::all_of(name.begin(), name.end(), IsTchar)) {
    Fail(400, "malformed header field");
    return false;
  }
  const std::string_view value = Trim(line.substr(colon + 1));
  for (const char c : value)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
      Fail(400, "a control character in a header field's value");
      return false;
    }
  if (static_cast<int>(request_.headers.size()) >= limits_.max_headers) {
    Fail(431, "the request has more than " + std::to_string(limits_.max_headers) +
                  " header fields (--max-headers)");
    return false;
  }
  if (state_ == State::kHeaders) request_.headers.emplace_back(Lower(name), std::string(value));
  return true;
}

bool RequestParser::EndHeaders() {
  HttpRequest& r = request_;
  const std::string* connection = r.Header("connection");
  if (r.minor_version == 0)
    r.keep_alive = connection && HasToken(*connection, "keep-alive");
  else
    r.keep_alive = !(connection && HasToken(*connection, "close"));
  if (const std::string* expect = r.Header("expect"))
    r.expect_continue = Lower(*expect) == "100-continue";

  const std::string* te = nullptr;
  std::string content_length;
  bool has_length = false;
  for (const auto& [k, v] : r.headers) {
    if (k == "transfer-encoding") {
      if (te) {
        Fail(400, "more than one Transfer-Encoding field");
        return false;
      }
      te = &v;
    } else if (k == "content-length") {
      if (has_length && v != content_length) {
        Fail(400, "conflicting Content-Length fields");
        return false;
      }
      has_length = true;
      content_length = v;
    }
  }
  if (te) {
    if (has_length) {
      Fail(400, "both Transfer-Encoding and Content-Length");
      return false;
    }
    if (Lower(*te) != "chunked") {
      Fail(501, "transfer coding '" + *te + "' is not supported (only chunked)");
      return false;
    }
    state_ = State::kChunkSize;
    return true;
  }
  if (has_length) {
    if (content_length.empty() || content_length.size() > 18 ||
        !std::all_of(content_length.begin(), content_length.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      Fail(400, "malformed Content-Length");
      return false;
    }
    remaining_ = std::stoull(content_length);
    if (remaining_ > limits_.max_body) {
      Fail(413, "the request body of " + content_length + " bytes is larger than " +
                    std::to_string(limits_.max_body) + " bytes (--max-body)");
      return false;
    }
  }
  state_ = remaining_ > 0 ? State::kBody : State::kDone;
  return true;
}

size_t RequestParser::FeedHeaders(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && state_ == State::kHeaders) {
    size_t n = 0;
    const bool whole = TakeLine(data.substr(used), &n);
    used += n;
    if (!whole) return used;
    if (lines_ == 0) {
      if (line_.empty()) continue;  // CR LF before a request line: skipped (RFC 9112 2.2)
      if (!ParseRequestLine(line_)) return used;
    } else if (line_.empty()) {
      EndHeaders();
      return used;
    } else if (!ParseField(line_)) {
      return used;
    }
    ++lines_;
  }
  return used;
}

size_t RequestParser::FeedChunkSize(std::string_view data) {
  size_t used = 0;
  if (!TakeLine(data, &used)) return used;
  std::string_view line = line_;
  line = Trim(line.substr(0, line.find(';')));
  if (line.empty() || line.size() > 15) {
    Fail(400, "malformed chunk size");
    return used;
  }
  uint64_t size = 0;
  for (const char c : line) {
    const int v = HexValue(c);
    if (v < 0) {
      Fail(400, "malformed chunk size");
      return used;
    }
    size = size * 16 + static_cast<uint64_t>(v);
  }
  if (size > limits_.max_body - std::min(request_.body.size(), limits_.max_body)) {
    Fail(413, "the chunked request body is larger than " + std::to_string(limits_.max_body) +
                  " bytes (--max-body)");
    return used;
  }
  remaining_ = size;
  state_ = size == 0 ? State::kTrailers : State::kChunkData;
  return used;
}

size_t RequestParser::FeedTrailers(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && state_ == State::kTrailers) {
    size_t n = 0;
    const bool whole = TakeLine(data.substr(used), &n);
    used += n;
    if (!whole) return used;
    if (line_.empty()) {
      state_ = State::kDone;
      return used;
    }
    if (!ParseField(line_)) return used;  // checked, counted, not kept
    ++lines_;
  }
  return used;
}

size_t RequestParser::Feed(std::string_view data) {
  size_t used = 0;
  for (;;) {
    const std::string_view rest = data.substr(used);
    switch (state_) {
      case State::kDone:
      case State::kError:
        return used;
      case State::kHeaders:
        if (rest.empty()) return used;
        used += FeedHeaders(rest);
        break;
      case State::kBody:
      case State::kChunkData: {
        if (rest.empty()) return used;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        request_.body.append(rest.data(), n);
        remaining_ -= n;
        used += n;
        if (remaining_ == 0)
          state_ = state_ == State::kBody ? State::kDone : State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        if (rest.empty()) return used;
        size_t n = 0;
        const bool whole = TakeLine(rest, &n);
        used += n;
        if (state_ == State::kError) return used;
        if (!whole) {
          if (line_.size() > 1) Fail(400, "a chunk is longer than its size");
          if (state_ == State::kError) return used;
          break;
        }
        if (!line_.empty()) {
          Fail(400, "a chunk is longer than its size");
          return used;
        }
        state_ = State::kChunkSize;
        break;
      }
      case State::kChunkSize:
        if (rest.empty()) return used;
        used += FeedChunkSize(rest);
        break;
      case State::kTrailers:
        if (rest.empty()) return used;
        used += FeedTrailers(rest);
        break;
    }
  }
}

int ParseHttpRequest(std::string_view bytes, const HttpLimits& limits, HttpRequest* out,
                     size_t* consumed) {
  RequestParser parser(limits);
  const size_t used = parser.Feed(bytes);
  if (consumed) *consumed = used;
  if (parser.state() == RequestParser::State::kError) return parser.error_status();
  if (parser.state() != RequestParser::State::kDone) return -1;
  *out = std::move(parser.request());
  return 0;
}

const char* HttpReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
  }
}

}  // namespace rotor::serve
