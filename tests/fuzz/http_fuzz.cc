// The server's HTTP/1.1 framing (server/http_parse.h) on arbitrary bytes, with
// small limits so that every limit is reached: the whole-buffer parse, then
// the incremental parser fed the same bytes in pieces (sizes from the first
// byte), which must reach the same outcome, request and length. Besides no
// crash: a refused request has a status of 4xx/5xx with a message, and an
// accepted one holds no more body than the limit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/http_parse.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "http: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 13;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const rotor::serve::HttpLimits limits{.max_header_bytes = 512, .max_headers = 8,
                                        .max_body = 1024};

  rotor::serve::HttpRequest whole;
  size_t consumed = 0;
  const int status = rotor::serve::ParseHttpRequest(bytes, limits, &whole, &consumed);
  Check(status == 0 || status == -1 || (status >= 400 && status < 600), "odd status");
  if (status == 0) {
    Check(consumed <= bytes.size(), "consumed past the input");
    Check(whole.body.size() <= limits.max_body, "a body past the limit was accepted");
    Check(whole.path.size() <= whole.target.size(), "path longer than the target");
  }
  (void)rotor::serve::HttpReason(status);

  rotor::serve::RequestParser parser(limits);
  size_t used = 0;
  using State = rotor::serve::RequestParser::State;
  while (used < bytes.size() && parser.state() != State::kDone && parser.state() != State::kError) {
    const size_t n = std::min(piece, bytes.size() - used);
    const size_t took = parser.Feed(bytes.substr(used, n));
    Check(took <= n, "Feed() took more than it was given");
    used += took;
    if (took < n) break;  // the request ended inside this piece
  }
  if (parser.state() == State::kError) {
    Check(parser.error_status() >= 400 && !parser.error_message().empty(), "an error without a status");
    Check(status == parser.error_status(), "piecewise and whole parses refuse differently");
  } else if (parser.state() == State::kDone) {
    Check(status == 0 && used == consumed, "piecewise and whole parses end differently");
    const rotor::serve::HttpRequest& r = parser.request();
    Check(r.method == whole.method && r.target == whole.target && r.body == whole.body &&
              r.headers == whole.headers && r.keep_alive == whole.keep_alive,
          "piecewise and whole parses read different requests");
    (void)r.QueryParam("id");
    parser.Reset();
    Check(parser.empty(), "Reset() left bytes behind");
  } else {
    Check(status == -1, "the whole parse finished where the piecewise one needs more");
  }
  return 0;
}
